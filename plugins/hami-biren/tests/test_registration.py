"""Registration and health: HAMi ``GetNodeDevices`` + ``CheckHealth`` + ``NodeCleanUp`` for Biren.

``Engine.upsert_node`` shows the devices, the errors (previous devices kept), dropped backends and the node patch.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from biren_testlib import (
    HANDSHAKE,
    REGISTER,
    T0,
    Clock,
    biren_node,
    device,
    gpu_container,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    requesting,
    running_pod,
)

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo


# ------------------------------------------------------------------------------------ decoding
def test_device_plugin_registration_reads_cores_as_100(clock: Clock) -> None:
    # The device plugin writes no devcore (omitempty); HAMi sets 100 for its node score. A registered devcore is
    # overwritten too.
    raw = [device("card_0"), device("card_1", index=1, devcore=30, numa=1, mode="x", custominfo={"k": "v"})]
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("n", raw, allocatable=2))
    assert (status.devices, status.errors) == ({"Biren": 2}, {})
    infos = [u.info for u in engine.nodes["n"].devices["Biren"]]
    assert infos == [
        DeviceInfo(id="card_0", count=1, devmem=65024, devcore=100, type="Biren", health=True, vendor="Biren"),
        DeviceInfo(id="card_1", index=1, count=1, devmem=65024, devcore=100, type="Biren", numa=1, mode="x",
                   health=True, custom_info={"k": "v"}, vendor="Biren"),
    ]


def test_svi_instances_are_devices_of_their_own() -> None:
    # A card in SVI-4 mode: four instances, each its own id and memory, all with the physical card's index.
    raw = [device(f"card_{i}", index=0, devmem=16256) for i in range(4)]
    devs = make_backend().hami_node_devices(make_node("n", raw))
    assert [(d.id, d.index, d.count, d.devmem) for d in devs] == [(f"card_{i}", 0, 1, 16256) for i in range(4)]


def test_go_json_keys_are_case_insensitive() -> None:
    raw = json.dumps([{"ID": "card_0", "Count": 1, "Devmem": 100, "Type": "Biren", "Health": True}])
    (dev,) = make_backend().hami_node_devices(make_node("n", raw))
    assert (dev.id, dev.count, dev.devmem, dev.devcore, dev.health) == ("card_0", 1, 100, 100, True)


def test_no_annotation_means_no_devices(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("cpu-node"))
    assert (status.devices, status.errors, status.patch) == ({}, {}, {})


@pytest.mark.parametrize(("raw", "message"), [
    ("[]", f"{REGISTER}: no gpu found on node"),
    ("null", f"{REGISTER}: no gpu found on node"),
    (":", f"{REGISTER}: "),
    ("", f"{REGISTER}: "),
    ("card_0,1,65024,100,Biren,0,true,0,hami-core:", f"{REGISTER}: "),  # HAMi's legacy form is not JSON
    ('{"id": "card_0"}', f"{REGISTER}: expected a JSON array of devices"),
    ('[{"id": "card_0", "count": "1"}]', f'{REGISTER}: device 0: field "count"'),
])
def test_malformed_registration_names_the_annotation(raw: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        make_backend().hami_node_devices(make_node("n", raw))
    assert str(info.value).startswith(message)


def test_engine_keeps_the_previous_devices_and_usage_on_a_bad_registration(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(biren_node("n1"))
    engine.upsert_pod(running_pod("busy", "n1", "n1-card_0,Biren,0,0:;"))
    status = engine.upsert_node(make_node("n1", "[]", allocatable=2))
    assert status.devices == {"Biren": 2}
    assert status.errors == {"Biren": f"{REGISTER}: no gpu found on node"}
    assert engine.nodes["n1"].by_uuid["n1-card_0"].used == 1


def test_devices_whose_type_lacks_biren_are_ignored(clock: Clock) -> None:
    # HAMi hands a backend only devices whose type contains its common word (case-insensitive): the device plugin's
    # runc mode registers the card's product name as its type.
    raw = [device("a", type="BIREN-166M"), device("b", index=1, type="BR106")]
    status = make_engine(clock=clock).upsert_node(make_node("n1", raw))
    assert status.devices == {"Biren": 1}
    assert status.errors == {"Biren": "1 device(s) ignored: type 'BR106' does not contain 'Biren'"}


# ------------------------------------------------------------------------------------ health
def health(node: dict[str, Any], clock: Clock) -> tuple[bool, bool, dict[str, str | None]]:
    b = make_backend()
    report = b.hami_node_health(node, b.hami_node_devices(node), clock())
    return report.healthy, report.need_update, dict(report.annotations)


@pytest.mark.parametrize("value", [None, "Reported_2026.01.02 15:04:05", "Unknown"])
def test_any_mark_but_requesting_is_answered_with_requesting_now(clock: Clock, value: str | None) -> None:
    # The device plugin writes "Reported_" + a time (in an odd layout); the scheduler answers "Requesting_<now>".
    node = make_node("n", [device("a")], annotations={} if value is None else {HANDSHAKE: value})
    assert health(node, clock) == (True, True, {HANDSHAKE: requesting(T0)})


def test_requesting_goes_stale_after_60_seconds_without_allocatable(clock: Clock) -> None:
    assert health(make_node("n", [device("a")], annotations={HANDSHAKE: requesting(T0 - 59)}), clock) == (
        True, False, {})
    assert health(make_node("n", [device("a")], annotations={HANDSHAKE: requesting(T0 - 61)}), clock)[:2] == (
        False, False)
    # Still allocatable: the kubelet still has the plugin's devices, so the node is kept.
    assert health(make_node("n", [device("a")], annotations={HANDSHAKE: requesting(T0 - 61)}, allocatable=1),
                  clock)[:2] == (True, False)


def test_the_handshake_checks_the_configured_count_resource(clock: Clock) -> None:
    b = make_backend(resourceCountName="birentech.com/1-4-gpu")
    node = make_node("n", [device("a")], annotations={HANDSHAKE: requesting(T0 - 120)}, allocatable=4)
    assert b.hami_node_health(node, b.hami_node_devices(node), clock()).healthy is False  # gpu, not 1-4-gpu
    node["status"]["allocatable"] = {"birentech.com/1-4-gpu": "4"}
    assert b.hami_node_health(node, b.hami_node_devices(node), clock()).healthy is True


def test_stale_node_loses_its_devices_and_its_handshake(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    first = engine.upsert_node(make_node("n1", [device("a")]))
    assert first.patch == {HANDSHAKE: requesting(T0)}
    clock.now += 120
    status = engine.upsert_node(make_node("n1", [device("a")], annotations={HANDSHAKE: requesting(T0)}))
    assert status.devices == {}
    assert "Biren" in status.unhealthy
    assert status.patch == {HANDSHAKE: None}  # NodeCleanUp deletes the handshake
    assert engine.schedule(make_pod(gpu_container())).failed == {"n1": "node unregistered"}
    status = engine.upsert_node(make_node("n1", [device("a")], annotations={HANDSHAKE: "Reported_now"}))
    assert status.devices == {"Biren": 1}
