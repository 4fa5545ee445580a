"""Registration and health: ``GetNodeDevices`` + ``CheckHealth`` for DCU (vendors A.3, A.5, E.2, E.5).

``Engine.upsert_node`` shows the devices, the errors (previous devices kept), dropped backends and the
node patch; the (healthy, need_update) pairs of HAMi's ``CheckHealth`` come from the engine's health hook.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hygon_testlib import (
    ALLOCATED,
    HANDSHAKE,
    K100,
    T0,
    Clock,
    csv_device,
    dcu_container,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    requesting,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo

TWO_HOURS = 2 * 3600.0
#: The E.2 registration example, verbatim.
E2_EXAMPLE = ("DCU-TPXS320016070601,4,65520,100,DCU-K100_AI,0,true,0,hami-core:"
              "DCU-TPXS320010040501,4,65520,100,DCU-K100_AI,1,true,1,hami-core:")


def devices_of(engine: Engine, node: str) -> list[DeviceInfo]:
    return [u.info for u in engine.nodes[node].devices.get("DCU", [])]


# ------------------------------------------------------------------------------------ decoding (A.3, E.2)
def test_e2_example_registers_two_k100_cards(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("dcu-node", E2_EXAMPLE, allocatable=8))
    assert status.devices == {"DCU": 2}
    assert status.errors == {}
    assert devices_of(engine, "dcu-node") == [
        DeviceInfo(id="DCU-TPXS320016070601", index=0, count=4, devmem=65520, devcore=100, type=K100, numa=0,
                   mode="hami-core", health=True, vendor="DCU"),
        DeviceInfo(id="DCU-TPXS320010040501", index=1, count=4, devmem=65520, devcore=100, type=K100, numa=1,
                   mode="hami-core", health=True, vendor="DCU"),
    ]


def test_e5_nine_field_device_keeps_its_mode() -> None:
    (dev,) = make_backend().hami_node_devices(make_node("n", "test-0,1,1024,100,DCU,0,true,0,test:"))
    assert dev == DeviceInfo(id="test-0", index=0, count=1, devmem=1024, devcore=100, type="DCU", numa=0,
                             mode="test", health=True)


def test_seven_field_device_defaults_to_index_0_and_hami_core() -> None:
    (dev,) = make_backend().hami_node_devices(make_node("n", "DCU-a,4,16384,100,DCU-Z100,1,1:"))
    assert (dev.index, dev.mode, dev.numa, dev.health) == (0, "hami-core", 1, True)


def test_go_bools_and_empty_segments() -> None:
    raw = "::DCU-a,4,16384,100,DCU-Z100,0,F,0,hami-core::DCU-b,4,16384,100,DCU-Z100,0,TRUE,1,hami-core"
    devs = make_backend().hami_node_devices(make_node("n", raw))
    assert [(d.id, d.health, d.index) for d in devs] == [("DCU-a", False, 0), ("DCU-b", True, 1)]


def test_json_registration_is_read_too() -> None:
    raw = json.dumps([{"id": "DCU-j0", "count": 4, "devmem": 16384, "devcore": 100, "type": "DCU-Z100",
                       "health": True}, {"ID": "DCU-j1", "Index": 1, "Count": 2, "Devmem": 8192, "Devcore": 100,
                                         "Type": "DCU-Z100L", "Numa": 1, "Mode": "hami-core", "Health": True}])
    devs = make_backend().hami_node_devices(make_node("n", raw))
    assert devs == [
        DeviceInfo(id="DCU-j0", count=4, devmem=16384, devcore=100, type="DCU-Z100", health=True),
        DeviceInfo(id="DCU-j1", index=1, count=2, devmem=8192, devcore=100, type="DCU-Z100L", numa=1,
                   mode="hami-core", health=True),
    ]


def test_no_annotation_means_no_devices(clock: Clock) -> None:
    assert make_backend().hami_node_devices(make_node("n")) == []
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("cpu-node"))
    assert (status.devices, status.errors) == ({}, {})
    assert not engine.nodes["cpu-node"].registered


@pytest.mark.parametrize(("raw", "message"), [
    (":", "hami.io/node-dcu-register: no gpu found on node"),                          # E.5
    ("[]", "hami.io/node-dcu-register: no gpu found on node"),
    ("", "hami.io/node-dcu-register: node annotation missing device separator"),       # E.5 decode error
    ("   ", "hami.io/node-dcu-register: node annotation missing device separator"),
    ("test-0,1,1024,100,DCU:", "hami.io/node-dcu-register: unexpected field count 5 in node annotation"),  # E.5
    ("DCU-a,4,16384,100,DCU-Z100,0,true,0:", "hami.io/node-dcu-register: unexpected field count 8"),
    ("DCU-a:", 'hami.io/node-dcu-register: malformed node annotation segment: "DCU-a"'),
    ("DCU-a,four,16384,100,DCU-Z100,0,true:", "hami.io/node-dcu-register: invalid count field"),
    ("DCU-a,4,16384,100,DCU-Z100,0,yes:", "hami.io/node-dcu-register: invalid health field"),
    ("DCU-a,4,16384,100,DCU-Z100,0,true,-1,hami-core:", "hami.io/node-dcu-register: index field must not be"),
    ("DCU-a,4,-1,100,DCU-Z100,0,true:", "hami.io/node-dcu-register: memory field must not be negative"),
    ('[{"id": "DCU-a", "count": "4"}]', "hami.io/node-dcu-register: device 0: field \"count\""),
])
def test_malformed_registration_names_the_annotation(raw: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        make_backend().hami_node_devices(make_node("n", raw))
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("raw", [":", "", "test-0,1,1024,100,DCU:"])
def test_engine_keeps_the_previous_devices_on_a_bad_registration(clock: Clock, raw: str) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", E2_EXAMPLE, allocatable=8))
    engine.upsert_pod(running_pod("busy", "n1", "DCU-TPXS320016070601,DCU,1000,30:;"))
    status = engine.upsert_node(make_node("n1", raw, allocatable=8))
    assert status.devices == {"DCU": 2}
    assert status.errors["DCU"].startswith("hami.io/node-dcu-register: ")
    assert [d.id for d in devices_of(engine, "n1")] == ["DCU-TPXS320016070601", "DCU-TPXS320010040501"]
    # Usage survives too.
    used = engine.nodes["n1"].by_uuid["DCU-TPXS320016070601"]
    assert (used.used, used.usedmem, used.usedcores) == (1, 1000, 30)
    # A good registration later replaces the devices.
    status = engine.upsert_node(make_node("n1", csv_device("DCU-new", type="DCU-Z100"), allocatable=4))
    assert (status.devices, status.errors) == ({"DCU": 1}, {})


def test_devices_whose_type_lacks_dcu_are_ignored(clock: Clock) -> None:
    # HAMi hands the backend only devices whose type contains "DCU" (A.3).
    raw = csv_device("DCU-0", type="K100_AI") + csv_device("DCU-1", index=1, type="dcu-k100")
    status = make_engine(clock=clock).upsert_node(make_node("n1", raw))
    assert status.devices == {"DCU": 1}
    assert status.errors == {"DCU": "1 device(s) ignored: type 'K100_AI' does not contain 'DCU'"}


def test_usage_is_rebuilt_from_the_allocated_annotation(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", E2_EXAMPLE))
    pod = running_pod("two", "n1", "DCU-TPXS320016070601,DCU,2000,60:;DCU-TPXS320016070601,DCU,1000,10:"
                                   "DCU-TPXS320010040501,DCU,65520,100:;", containers=2)
    engine.upsert_pod(pod)
    a = engine.nodes["n1"].by_uuid["DCU-TPXS320016070601"]
    b = engine.nodes["n1"].by_uuid["DCU-TPXS320010040501"]
    assert (a.used, a.usedmem, a.usedcores) == (2, 3000, 70)
    assert (b.used, b.usedmem, b.usedcores) == (1, 65520, 100)
    engine.remove_pod(pod)
    assert (a.used, a.usedmem, a.usedcores) == (0, 0, 0)


def test_undecodable_allocation_quarantines_the_node(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", E2_EXAMPLE))
    engine.upsert_pod(running_pod("bad", "n1", "DCU-TPXS320016070601,DCU,2000:;"))
    decision = engine.schedule(make_pod(dcu_container(mem=100, cores=10)))
    assert decision.node is None
    assert decision.failed["n1"].startswith("node quarantined: pod default/bad has an undecodable allocation: "
                                            f"{ALLOCATED}")


# ------------------------------------------------------------------------------------ health (A.5, E.2, E.5)
def health(node: dict[str, Any], clock: Clock) -> tuple[bool, bool, dict[str, str | None]]:
    engine = make_engine(clock=clock)
    backend = engine.backends["DCU"]
    devices = engine.hook.hami_node_devices(backend=backend, node=node) or []
    report = engine.hook.hami_node_health(backend=backend, node=node, devices=devices, now=clock(), state={})
    return report.healthy, report.need_update, dict(report.annotations)


def test_e5_old_requesting_without_allocatable_is_unhealthy(clock: Clock) -> None:
    node = make_node("n", E2_EXAMPLE, annotations={HANDSHAKE: "Requesting_2025-01-07 00:00:00"})
    assert health(node, clock) == (False, False, {})


def test_e5_unknown_handshake_is_healthy_and_requests_a_report(clock: Clock) -> None:
    node = make_node("n", E2_EXAMPLE, annotations={HANDSHAKE: "Unknown"})
    assert health(node, clock) == (True, True, {HANDSHAKE: requesting(T0)})


@pytest.mark.parametrize("value", [None, "Reported 2025-01-07 00:00:00.1 +0800 CST"])
def test_absent_or_reported_handshake_writes_requesting_now(clock: Clock, value: str | None) -> None:
    annotations = {HANDSHAKE: value} if value is not None else {}
    node = make_node("n", E2_EXAMPLE, annotations=annotations)
    assert health(node, clock) == (True, True, {HANDSHAKE: requesting(T0)})


def test_requesting_younger_than_60_seconds_is_healthy(clock: Clock) -> None:
    assert health(make_node("n", E2_EXAMPLE, annotations={HANDSHAKE: requesting(T0 - 59)}), clock)[:2] == (
        True, False)
    assert health(make_node("n", E2_EXAMPLE, annotations={HANDSHAKE: requesting(T0 - 61)}), clock)[:2] == (
        False, False)


def test_stale_requesting_with_dcus_allocatable_is_healthy(clock: Clock) -> None:
    node = make_node("n", E2_EXAMPLE, annotations={HANDSHAKE: requesting(T0 - TWO_HOURS)}, allocatable=8)
    assert health(node, clock) == (True, False, {})


def test_the_handshake_checks_the_configured_count_resource(clock: Clock) -> None:
    engine = make_engine({"resourceCountName": "hygon.com/dcu"}, clock=clock)
    node = make_node("n", E2_EXAMPLE, annotations={HANDSHAKE: requesting(T0 - TWO_HOURS)}, allocatable=8)
    # allocatable is set under hygon.com/dcunum, which this engine does not count.
    devices = engine.hook.hami_node_devices(backend=engine.backends["DCU"], node=node)
    report = engine.hook.hami_node_health(backend=engine.backends["DCU"], node=node, devices=devices, now=T0,
                                          state={})
    assert (report.healthy, report.need_update) == (False, False)
    node["status"]["allocatable"] = {"hygon.com/dcu": "8"}
    report = engine.hook.hami_node_health(backend=engine.backends["DCU"], node=node, devices=devices, now=T0,
                                          state={})
    assert (report.healthy, report.need_update) == (True, False)


def test_stale_node_loses_its_dcus_and_its_handshake(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    first = engine.upsert_node(make_node("n1", E2_EXAMPLE))
    assert first.devices == {"DCU": 2}
    assert first.patch == {HANDSHAKE: requesting(T0)}
    # The device plugin never answers: two minutes later the mark is stale and nothing is allocatable.
    clock.now += 120
    status = engine.upsert_node(make_node("n1", E2_EXAMPLE, annotations={HANDSHAKE: requesting(T0)}))
    assert status.devices == {}
    assert "DCU" in status.unhealthy
    # NodeCleanUp deletes the handshake (E.4).
    assert status.patch == {HANDSHAKE: None}
    assert engine.schedule(make_pod(dcu_container())).failed == {"n1": "node unregistered"}
    # The device plugin reports again: the node is back.
    status = engine.upsert_node(make_node("n1", E2_EXAMPLE, annotations={HANDSHAKE: "Reported_now"}))
    assert status.devices == {"DCU": 2}
