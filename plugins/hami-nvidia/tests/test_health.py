"""Registration and health: ``GetNodeDevices`` + ``CheckHealth`` (scheduler §3.2, §3.7, §9.2, Appendix B.1/B.2;
vendors B.2, B.8 and the B.10 CheckHealth vectors).

``Engine.upsert_node`` shows devices, dropped backends and the node patch; the (healthy, need_update) pairs
of HAMi's ``CheckHealth`` are read from :meth:`NvidiaBackend.hami_node_health` directly.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from nvidia_testlib import (
    HANDSHAKE,
    REGISTER,
    SCORE,
    T0,
    Clock,
    container,
    gpu_container,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    reg,
    requesting,
    running_pod,
)

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo

TWO_HOURS = 2 * 3600.0
DEVICES = [reg("GPU-0", type="NVIDIA-A100"), reg("GPU-1", index=1, type="NVIDIA-A100")]
OTHER_DEVICES = [reg("GPU-0", type="NVIDIA-A100", health=False), reg("GPU-1", index=1, type="NVIDIA-A100")]


def health(node: dict[str, Any], state: dict[str, Any], now: float = T0) -> tuple[bool, bool]:
    report = make_backend().hami_node_health(node, now, state)
    return report.healthy, report.need_update


def node(*, handshake: str | None, allocatable: int | None = None, devices: Any = DEVICES,
         register: str | None = None) -> dict[str, Any]:
    return make_node("test-node", devices, annotations={HANDSHAKE: handshake}, allocatable=allocatable,
                     register=register)


# ------------------------------------------------------------------------------------ HAMi CheckHealth vectors
def test_fresh_requesting_with_no_allocatable_is_healthy() -> None:
    assert health(node(handshake=requesting(T0)), {}) == (True, False)


def test_two_hour_old_requesting_with_no_allocatable_is_unhealthy() -> None:
    assert health(node(handshake=requesting(T0 - TWO_HOURS)), {}) == (False, False)


def test_stale_requesting_with_allocatable_is_healthy() -> None:
    state = {"test-node": (4, json.dumps(DEVICES))}
    assert health(node(handshake=requesting(T0 - TWO_HOURS), allocatable=4), state) == (True, False)


def test_changed_register_annotation_asks_for_a_refresh() -> None:
    state = {"test-node": (4, json.dumps(DEVICES))}
    assert health(node(handshake=requesting(T0 - TWO_HOURS), allocatable=4, devices=OTHER_DEVICES), state) == (
        True, True)
    # The new text is remembered: the next pass is a plain handshake result.
    assert health(node(handshake=requesting(T0 - TWO_HOURS), allocatable=4, devices=OTHER_DEVICES), state) == (
        True, False)


def test_deleted_register_annotation_asks_for_a_refresh() -> None:
    state = {"test-node": (4, json.dumps(DEVICES))}
    assert health(node(handshake=requesting(T0 - TWO_HOURS), allocatable=4, devices=None), state) == (True, True)


def test_allocatable_change_is_healthy_and_refreshes() -> None:
    state: dict[str, Any] = {}
    stale = requesting(T0 - TWO_HOURS)
    assert health(node(handshake=stale, allocatable=4), state) == (True, True)       # 0 -> 4
    assert health(node(handshake=stale, allocatable=4), state) == (True, False)      # unchanged
    assert health(node(handshake=stale, allocatable=8), state) == (True, True)       # 4 -> 8
    assert health(node(handshake=stale, allocatable=0), state) == (False, False)     # 8 -> 0
    assert state["test-node"][0] == 0


def test_allocatable_drop_to_zero_is_unhealthy_even_with_a_fresh_handshake() -> None:
    state = {"test-node": (4, json.dumps(DEVICES))}
    assert health(node(handshake=requesting(T0), allocatable=0), state) == (False, False)


def test_forgotten_node_starts_clean() -> None:
    # HAMi NodeDeleted: once the bookkeeping is dropped, the same node counts as changed again.
    state: dict[str, Any] = {"test-node": (4, "old"), "other": (2, "x")}
    make_backend().hami_node_removed("test-node", state)
    make_backend().hami_node_removed("never-seen", state)  # idempotent
    assert state == {"other": (2, "x")}
    assert health(node(handshake="Heartbeat_2099-01-01T00:00:00Z", allocatable=4), state) == (True, True)


# ------------------------------------------------------------------------------------ generic handshake table (B.1)
@pytest.mark.parametrize("value", ["Requesting", "Requesting_not-a-time", "Requesting_2025-13-45 99:00:00"])
def test_unparsable_requesting_is_healthy_without_update(value: str) -> None:
    assert health(node(handshake=value), {}) == (True, False)


def test_requesting_just_under_60_seconds_is_healthy() -> None:
    assert health(node(handshake=requesting(T0 - 59)), {}) == (True, False)
    assert health(node(handshake=requesting(T0 - 61)), {}) == (False, False)


@pytest.mark.parametrize("value", [None, "", "Reported 2024-01-23 04:30:04.434037031 +0000 UTC", "Deleted_x"])
def test_anything_else_writes_requesting_now(value: str | None) -> None:
    report = make_backend().hami_node_health(node(handshake=value), T0, {})
    assert (report.healthy, report.need_update) == (True, True)
    assert report.annotations == {HANDSHAKE: requesting(T0)}


# ------------------------------------------------------------------------------------ through the engine
def test_absent_handshake_registers_and_patches_requesting(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(node(handshake=None))
    assert status.devices == {"NVIDIA": 2}
    assert status.unhealthy == {}
    assert status.errors == {}
    assert status.patch == {HANDSHAKE: requesting(T0)}


def test_stale_handshake_drops_the_devices_and_deletes_the_mark(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    assert engine.upsert_node(node(handshake=None)).devices == {"NVIDIA": 2}
    marked = node(handshake=requesting(T0))
    clock.now = T0 + 10
    status = engine.upsert_node(marked)
    assert (status.devices, status.unhealthy, status.patch) == ({"NVIDIA": 2}, {}, {})
    clock.now = T0 + TWO_HOURS
    status = engine.upsert_node(marked)
    assert status.devices == {}
    assert list(status.unhealthy) == ["NVIDIA"]
    assert status.patch == {HANDSHAKE: None}
    assert engine.schedule(make_pod(gpu_container(mem=10)), ["test-node"]).failed == {
        "test-node": "node unregistered"}


def test_stale_handshake_on_a_node_never_registered_keeps_the_mark(clock: Clock) -> None:
    # HAMi calls NodeCleanUp only for nodes it has in its cache (spec §9.2 step 2).
    status = make_engine(clock=clock).upsert_node(node(handshake=requesting(T0 - TWO_HOURS)))
    assert status.devices == {}
    assert list(status.unhealthy) == ["NVIDIA"]
    assert status.patch == {}


def test_allocatable_drop_drops_the_devices(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    fresh = requesting(T0)
    assert engine.upsert_node(node(handshake=fresh, allocatable=20)).devices == {"NVIDIA": 2}
    status = engine.upsert_node(node(handshake=fresh, allocatable=0))
    assert status.devices == {}
    assert "NVIDIA" in status.unhealthy
    assert status.patch == {HANDSHAKE: None}
    # The bookkeeping was forgotten: allocatable coming back is a change again.
    status = engine.upsert_node(node(handshake=fresh, allocatable=20))
    assert (status.devices, status.unhealthy) == ({"NVIDIA": 2}, {})


def test_allocatable_keeps_a_stale_handshake_alive(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(node(handshake=requesting(T0 - TWO_HOURS), allocatable=20))
    assert (status.devices, status.unhealthy, status.patch) == ({"NVIDIA": 2}, {}, {})


def test_changed_register_annotation_is_picked_up(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    stale = requesting(T0 - TWO_HOURS)
    engine.upsert_node(node(handshake=stale, allocatable=20))
    engine.upsert_node(node(handshake=stale, allocatable=20, devices=[*DEVICES, reg("GPU-2", index=2)]))
    assert [d.id for d in engine.nodes["test-node"].devices["NVIDIA"]] == ["GPU-0", "GPU-1", "GPU-2"]
    engine.upsert_node(node(handshake=stale, allocatable=20, devices=OTHER_DEVICES))
    assert [(d.id, d.health) for d in engine.nodes["test-node"].devices["NVIDIA"]] == [
        ("GPU-0", False), ("GPU-1", True)]


def test_usage_survives_a_registration_refresh(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(node(handshake=requesting(T0), allocatable=20))
    engine.upsert_pod(running_pod("holder", "test-node", "GPU-1,NVIDIA,3000,30:;"))
    engine.upsert_node(node(handshake=requesting(T0), allocatable=20, devices=[*DEVICES, reg("GPU-2", index=2)]))
    gpu1 = engine.nodes["test-node"].by_uuid["GPU-1"]
    assert (gpu1.used, gpu1.usedmem, gpu1.usedcores) == (1, 3000, 30)


# ------------------------------------------------------------------------------------ registration decoding
def test_registration_json_fields(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    raw = ('[{"id":"GPU-0a1b","count":10,"devmem":24576,"devcore":100,"type":"NVIDIA A10","mode":"hami-core",'
           '"health":true},{"id":"GPU-7e8f","index":1,"count":10,"devmem":24576,"devcore":100,'
           '"type":"NVIDIA A10","numa":1,"mode":"hami-core","health":true}]')
    engine.upsert_node(make_node("n", register=raw, allocatable=20))
    infos = [d.info for d in engine.nodes["n"].devices["NVIDIA"]]
    assert infos == [
        DeviceInfo("GPU-0a1b", 0, 10, 24576, 100, "NVIDIA A10", 0, "hami-core", True, vendor="NVIDIA"),
        DeviceInfo("GPU-7e8f", 1, 10, 24576, 100, "NVIDIA A10", 1, "hami-core", True, vendor="NVIDIA"),
    ]


def test_registration_keys_are_case_insensitive() -> None:
    raw = '[{"ID":"GPU-0","Count":5,"Devmem":8192,"Devcore":100,"Type":"NVIDIA-Tesla P4","Health":true}]'
    (dev,) = make_backend().hami_node_devices(make_node("n", register=raw))
    assert (dev.id, dev.count, dev.devmem, dev.devcore, dev.type, dev.health) == (
        "GPU-0", 5, 8192, 100, "NVIDIA-Tesla P4", True)


def test_no_registration_means_no_devices() -> None:
    assert make_backend().hami_node_devices(make_node("cpu", None)) == []


@pytest.mark.parametrize("raw", ["not-valid-json", "[{", '[{"id":"GPU-0","count":"ten"}]', '{"id":"GPU-0"}'])
def test_malformed_registration_keeps_the_previous_devices(clock: Clock, raw: str) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(node(handshake=requesting(T0), allocatable=20))
    engine.upsert_pod(running_pod("holder", "test-node", "GPU-0,NVIDIA,1000,0:;"))
    status = engine.upsert_node(node(handshake=requesting(T0), allocatable=20, register=raw))
    assert status.devices == {"NVIDIA": 2}
    assert list(status.errors) == ["NVIDIA"]
    assert REGISTER in status.errors["NVIDIA"]
    assert [d.id for d in engine.nodes["test-node"].devices["NVIDIA"]] == ["GPU-0", "GPU-1"]
    assert engine.nodes["test-node"].by_uuid["GPU-0"].usedmem == 1000
    # The node still schedules on what it had.
    assert engine.schedule(make_pod(gpu_container(mem=100)), ["test-node"]).node == "test-node"


@pytest.mark.parametrize("raw", ["[]", "", "  ", "null"])
def test_a_registration_listing_no_gpu_is_an_error(raw: str) -> None:
    # HAMi GetNodeDevices: "no gpu found on node" for [] and null, a JSON error for a blank value.
    with pytest.raises(WireFormatError) as err:
        make_backend().hami_node_devices(make_node("n", register=raw))
    assert REGISTER in str(err.value)


@pytest.mark.parametrize("raw", ["[]", ""])
def test_an_empty_registration_with_a_fresh_handshake_keeps_the_cached_devices(clock: Clock, raw: str) -> None:
    # HAMi's register loop: GetNodeDevices fails, CheckHealth says healthy, so the node's update is skipped and
    # its cached devices (and their bookings) stay schedulable while the device plugin rewrites the annotation.
    engine = make_engine(clock=clock)
    engine.upsert_node(node(handshake=requesting(T0), allocatable=20))
    engine.upsert_pod(running_pod("holder", "test-node", "GPU-0,NVIDIA,1000,0:;"))
    status = engine.upsert_node(node(handshake=requesting(T0), allocatable=20, register=raw))
    assert (status.devices, status.unhealthy) == ({"NVIDIA": 2}, {})
    assert list(status.errors) == ["NVIDIA"] and REGISTER in status.errors["NVIDIA"]
    assert [d.id for d in engine.nodes["test-node"].devices["NVIDIA"]] == ["GPU-0", "GPU-1"]
    assert engine.nodes["test-node"].by_uuid["GPU-0"].usedmem == 1000
    assert engine.schedule(make_pod(gpu_container(mem=100)), ["test-node"]).node == "test-node"


def test_an_empty_registration_with_a_stale_handshake_drops_the_devices(clock: Clock) -> None:
    # CheckHealth decides first in HAMi: an unhealthy registration is cleaned up whatever GetNodeDevices said.
    engine = make_engine(clock=clock)
    engine.upsert_node(node(handshake=requesting(T0)))
    status = engine.upsert_node(node(handshake=requesting(T0 - TWO_HOURS), register="[]"))
    assert status.devices == {} and list(status.unhealthy) == ["NVIDIA"]
    assert status.patch == {HANDSHAKE: None}


def test_a_removed_registration_with_a_fresh_handshake_keeps_the_cached_devices_under_hamis_rule(
        clock: Clock) -> None:
    # HAMi: "annos not found" is a GetNodeDevices error too. The backend answers "no devices" for a node without
    # the annotation (most nodes have no NVIDIA GPU: no error to report); `lostRegistration: keep` keeps them.
    engine = make_engine(clock=clock, scheduler={"lostRegistration": "keep"})
    engine.upsert_node(node(handshake=requesting(T0), allocatable=20))
    status = engine.upsert_node(node(handshake=requesting(T0), allocatable=20, devices=None))
    assert (status.devices, status.unhealthy) == ({"NVIDIA": 2}, {})
    assert [d.id for d in engine.nodes["test-node"].devices["NVIDIA"]] == ["GPU-0", "GPU-1"]
    # ... until the handshake goes stale
    clock.now += TWO_HOURS
    status = engine.upsert_node(node(handshake=requesting(T0), allocatable=0, devices=None))
    assert status.devices == {} and list(status.unhealthy) == ["NVIDIA"]


def test_a_removed_registration_drops_the_devices_by_default(clock: Clock) -> None:
    # hami-py's default (docs/devices.md, "Lost registrations"): the node's own word that it has none wins.
    engine = make_engine(clock=clock)
    engine.upsert_node(node(handshake=requesting(T0), allocatable=20))
    status = engine.upsert_node(node(handshake=requesting(T0), allocatable=20, devices=None))
    assert status.devices == {} and "test-node" in engine.nodes


def test_pair_scores_are_attached() -> None:
    scores = '[{"uuid":"GPU-0","score":{"GPU-1":100}},{"uuid":"GPU-1","score":{"GPU-0":100}}]'
    devs = make_backend().hami_node_devices(make_node("n", [*DEVICES, reg("GPU-2", index=2)],
                                                      annotations={SCORE: scores}))
    assert [(d.id, d.pair_scores) for d in devs] == [
        ("GPU-0", {"GPU-1": 100}), ("GPU-1", {"GPU-0": 100}), ("GPU-2", None)]


def test_pair_scores_reach_the_engine(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    scores = '[{"uuid":"GPU-0","score":{"GPU-1":400}}]'
    engine.upsert_node(make_node("n", DEVICES, annotations={SCORE: scores}, allocatable=20))
    assert engine.nodes["n"].by_uuid["GPU-0"].info.pair_scores == {"GPU-1": 400}


def test_malformed_pair_scores_are_a_registration_error(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", DEVICES, allocatable=20))
    status = engine.upsert_node(make_node("n", DEVICES, annotations={SCORE: "not-valid-json"}, allocatable=20))
    assert list(status.errors) == ["NVIDIA"]
    assert SCORE in status.errors["NVIDIA"]
    assert status.devices == {"NVIDIA": 2}


def test_pod_without_gpus_is_not_scheduled_by_us(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", DEVICES, allocatable=20))
    decision = engine.schedule(make_pod(container()))
    assert decision.skipped and decision.node is None


def test_devices_whose_type_lacks_nvidia_are_not_used(clock: Clock) -> None:
    # Vendors A.3: a backend is only handed devices whose type contains its common word, case-insensitively.
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", [reg("GPU-0", type="Tesla P4"), reg("GPU-1", index=1, type="nvidia-t4")],
                                 allocatable=20))
    assert [d.id for d in engine.nodes["n"].devices["NVIDIA"]] == ["GPU-1"]
    decision = engine.schedule(make_pod(gpu_container(mem=100)))
    assert decision.annotations["hami.io/vgpu-devices-allocated"] == "GPU-1,NVIDIA,100,0:;"
