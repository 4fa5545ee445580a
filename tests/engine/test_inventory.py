"""Inventory and ledger: node registration, health, pod bookings, collapse, quarantine (spec §6.3, §9)."""

from __future__ import annotations

import logging

import pytest
from core_helpers import (
    ACME_ALLOCATED,
    ACME_HANDSHAKE,
    ACME_REGISTER,
    T0,
    acme,
    acme_device,
    make_node,
    make_pod,
    scheduled,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.fit import collapse
from hami_core.plugins.types import ContainerDevice


def _usage(engine: Engine, node: str) -> dict[str, tuple[int, int, int]]:
    return {d.id: (d.used, d.usedmem, d.usedcores) for devs in engine.nodes[node].devices.values() for d in devs}


def test_collapse_init_peak_and_app_sum() -> None:
    """spec §6.3 example: init c0 A 5000/20; app c1 A 4000/20; app c2 A 3000/10 ⇒ A 7000 MiB, 30 cores, 2 slots."""
    a = "GPU-A"
    devices = {"NVIDIA": ((ContainerDevice(a, "NVIDIA", 5000, 20),), (ContainerDevice(a, "NVIDIA", 4000, 20),),
                          (ContainerDevice(a, "NVIDIA", 3000, 10),))}
    (dev,) = collapse(devices, init_count=1)["NVIDIA"]
    assert (dev.uuid, dev.usedmem, dev.usedcores, dev.slots) == (a, 7000, 30, 2)
    (app,) = collapse(devices, init_count=1, app_only=True)["NVIDIA"]
    assert (app.usedmem, app.usedcores, app.slots) == (7000, 30, 2)
    (peak,) = collapse({"X": ((ContainerDevice(a, "X", 9000, 50),), (ContainerDevice(a, "X", 1000, 5),))}, 1)["X"]
    assert (peak.usedmem, peak.usedcores, peak.slots) == (9000, 50, 1)


def test_upsert_pod_books_and_remove_releases(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0), acme_device(1)]))
    pod = scheduled(make_pod("p", acme(1, 1000, 10), acme(1, 2000, 20)), "n", "dev0,ACME,1000,10:;dev1,ACME,2000,20:;")
    engine.upsert_pod(pod)
    engine.upsert_pod(pod)  # the same event twice never doubles usage
    assert _usage(engine, "n") == {"dev0": (1, 1000, 10), "dev1": (1, 2000, 20)}
    engine.remove_pod(pod)
    engine.remove_pod(pod)
    assert _usage(engine, "n") == {"dev0": (0, 0, 0), "dev1": (0, 0, 0)}


def test_pods_without_vgpu_node_are_ignored(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    pod = make_pod("p", acme(1, 1000), annotations={ACME_ALLOCATED: "dev0,ACME,1000,0:;"})
    engine.upsert_pod(pod)
    assert _usage(engine, "n") == {"dev0": (0, 0, 0)}


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_finished_pods_release_their_devices(engine: Engine, phase: str) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    pod = scheduled(make_pod("p", acme(1, 1000)), "n", "dev0,ACME,1000,0:;")
    engine.upsert_pod(pod)
    pod["status"] = {"phase": phase}
    engine.upsert_pod(pod)
    assert _usage(engine, "n") == {"dev0": (0, 0, 0)}


def test_terminating_pods_keep_their_devices(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    pod = scheduled(make_pod("p", acme(1, 1000)), "n", "dev0,ACME,1000,0:;")
    pod["metadata"]["deletionTimestamp"] = "2025-06-01T08:15:30Z"
    engine.upsert_pod(pod)
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0)}


def test_init_containers_done_shrinks_to_app_usage(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    pod = scheduled(make_pod("p", acme(1, 1000), init=[acme(1, 6000, name="i")]), "n",
                    "dev0,ACME,6000,0:;dev0,ACME,1000,0:;")
    engine.upsert_pod(pod)
    assert _usage(engine, "n") == {"dev0": (1, 6000, 0)}
    pod["status"] = {"phase": "Running", "initContainerStatuses": [
        {"name": "i", "state": {"terminated": {"exitCode": 0}}}]}
    engine.upsert_pod(pod)
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0)}


def test_pod_seen_before_its_node_is_booked_when_the_node_arrives(engine: Engine) -> None:
    engine.upsert_pod(scheduled(make_pod("p", acme(1, 1000)), "late", "dev0,ACME,1000,0:;"))
    engine.upsert_node(make_node("late", [acme_device(0)]))
    assert _usage(engine, "late") == {"dev0": (1, 1000, 0)}


def test_node_reregistration_and_removal_keep_bookings(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    engine.upsert_pod(scheduled(make_pod("p", acme(1, 1000)), "n", "dev0,ACME,1000,0:;"))
    engine.upsert_node(make_node("n", [acme_device(0), acme_device(1)]))
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0), "dev1": (0, 0, 0)}
    engine.remove_node("n")
    assert "n" not in engine.nodes
    engine.upsert_node(make_node("n", [acme_device(0)]))
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0)}


def test_booking_on_an_unregistered_device_is_ignored_with_a_warning(engine: Engine, caplog) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    with caplog.at_level(logging.WARNING, logger="hami.engine"):
        engine.upsert_pod(scheduled(make_pod("p", acme(1, 1000)), "n", "ghost,ACME,1000,0:;"))
    assert "ghost" in caplog.text and "default/p" in caplog.text
    assert _usage(engine, "n") == {"dev0": (0, 0, 0)}


def test_undecodable_allocation_quarantines_the_node(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    engine.upsert_node(make_node("m", [acme_device(0, id="other")]))
    bad = scheduled(make_pod("bad", acme(1, 1000)), "n", "dev0,ACME,lots,0:;")
    engine.upsert_pod(bad)
    d = engine.schedule(make_pod("p", acme(1, 1000)))
    assert d.node == "m"
    assert d.failed["n"].startswith("node quarantined: pod default/bad has an undecodable allocation")
    assert ACME_ALLOCATED in d.failed["n"]
    engine.remove_pod(bad)
    assert engine.schedule(make_pod("p", acme(1, 1000)), ["n"]).node == "n"


def test_malformed_registration_keeps_previous_devices(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    broken = make_node("n", annotations={ACME_REGISTER: "[{not json"})
    status = engine.upsert_node(broken)
    assert status.devices == {"ACME": 1}
    assert ACME_REGISTER in status.errors["ACME"]
    assert engine.schedule(make_pod("p", acme(1, 1000))).node == "n"


def test_devices_whose_type_lacks_the_common_word_are_ignored(engine: Engine) -> None:
    status = engine.upsert_node(make_node("n", [acme_device(0), acme_device(1, type="Tesla T4")]))
    assert status.devices == {"ACME": 1}
    assert "Tesla T4" in status.errors["ACME"]


def test_handshake_absent_is_healthy_and_asks_to_be_marked(engine: Engine) -> None:
    status = engine.upsert_node(make_node("n", [acme_device(0)]))
    assert status.devices == {"ACME": 1} and not status.unhealthy
    assert status.patch == {ACME_HANDSHAKE: "Requesting_" + _local(T0)}


def _local(t: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def test_stale_handshake_without_allocatable_drops_the_devices(engine: Engine, clock: list[float]) -> None:
    annos = {ACME_HANDSHAKE: "Requesting_" + _local(T0 - 61)}
    status = engine.upsert_node(make_node("n", [acme_device(0)], annotations=annos, allocatable={}))
    assert status.devices == {} and "ACME" in status.unhealthy
    assert status.patch == {}  # never registered, so nothing to clean up
    assert engine.schedule(make_pod("p", acme(1, 1000))).failed == {"n": "node unregistered"}
    fresh = {ACME_HANDSHAKE: "Requesting_" + _local(T0 - 30)}
    fresh_status = engine.upsert_node(make_node("n", [acme_device(0)], annotations=fresh, allocatable={}))
    assert fresh_status.devices == {"ACME": 1}
    still_advertised = engine.upsert_node(make_node("n", [acme_device(0)], annotations=annos))
    assert still_advertised.devices == {"ACME": 1} and still_advertised.patch == {}


def test_node_without_name_is_rejected(engine: Engine) -> None:
    with pytest.raises(WireFormatError, match=r"metadata\.name"):
        engine.upsert_node({"metadata": {}})


def test_node_that_goes_stale_loses_its_handshake_mark(engine: Engine, clock: list[float]) -> None:
    """HAMi's NodeCleanUp: a registered node that turns stale is dropped and its handshake deleted."""
    assert engine.upsert_node(make_node("n", [acme_device(0)])).devices == {"ACME": 1}
    clock[0] = T0 + 7200
    stale = make_node("n", [acme_device(0)], annotations={ACME_HANDSHAKE: "Requesting_" + _local(T0)},
                      allocatable={})
    status = engine.upsert_node(stale)
    assert status.devices == {} and status.patch == {ACME_HANDSHAKE: None}
