"""Devices synthesised from node capacity and health (vendors D.2; scheduler §9.2)."""

from __future__ import annotations

import pytest
from cambricon_testlib import MLU, VCORE, VMEMORY, backend, make_engine, make_node

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo, HealthReport

BACKEND = backend()


def test_hami_vector_one_core_one_vmemory() -> None:
    # device_test.go Test_GetNodeDevices: vcore=1, vmemory=1 on node "test".
    assert BACKEND.hami_node_devices(make_node("test", cores=1, vmemory=1)) == [
        DeviceInfo(id="test-cambricon-mlu-0", index=0, count=100, devmem=25600, devcore=100, type="MLU", numa=0,
                   health=True)]


def test_one_device_per_started_hundred_cores() -> None:
    devices = BACKEND.hami_node_devices(make_node("n1", cores=250, vmemory=480))
    assert [(d.id, d.index) for d in devices] == [("n1-cambricon-mlu-0", 0), ("n1-cambricon-mlu-1", 1),
                                                   ("n1-cambricon-mlu-2", 2)]
    # 480 units x 256 MiB spread over 250 cores, per 100 cores (integer division).
    assert {d.devmem for d in devices} == {480 * 256 * 100 // 250} == {49152}
    assert {(d.count, d.devcore, d.type, d.health) for d in devices} == {(100, 100, "MLU", True)}


def test_memory_capacity_missing_or_fractional_gives_zero_memory() -> None:
    assert {d.devmem for d in BACKEND.hami_node_devices(make_node("n1", cores=200))} == {0}
    assert {d.devmem for d in BACKEND.hami_node_devices(make_node("n1", cores=200, vmemory="1.5"))} == {0}


def test_node_without_mlu_capacity_has_no_devices() -> None:
    assert BACKEND.hami_node_devices(make_node("cpu-0")) == []
    assert BACKEND.hami_node_devices({"metadata": {"name": "bare"}}) == []


def test_negative_cores_register_nothing() -> None:
    assert BACKEND.hami_node_devices(make_node("n1", cores=-100, vmemory=10)) == []


@pytest.mark.parametrize("cores", ["0", "1.5", "lots"])
def test_unusable_core_capacity_is_an_error_naming_the_resource(cores: str) -> None:
    with pytest.raises(WireFormatError, match=rf"node n1: status\.capacity\[{VCORE}\]"):
        BACKEND.hami_node_devices(make_node("n1", cores=cores, vmemory=10))


def test_malformed_memory_capacity_is_an_error_naming_the_resource() -> None:
    with pytest.raises(WireFormatError, match=rf"node n1: status\.capacity\[{VMEMORY}\]"):
        BACKEND.hami_node_devices(make_node("n1", cores=100, vmemory="ten"))


def test_engine_registers_capacity_devices(clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("n1", cores=400, vmemory=768))
    assert status.devices == {"MLU": 4}
    assert (status.errors, status.unhealthy, dict(status.patch)) == ({}, {}, {})
    devices = engine.nodes["n1"].devices["MLU"]
    assert [(d.id, d.totalmem, d.totalcore, d.count) for d in devices] == [
        (f"n1-cambricon-mlu-{i}", 49152, 100, 100) for i in range(4)]
    assert {d.info.vendor for d in devices} == {"MLU"}


def test_engine_keeps_previous_devices_when_capacity_turns_unreadable(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", cores=200, vmemory=384))
    status = engine.upsert_node(make_node("n1", cores="0", vmemory=384))
    assert status.devices == {"MLU": 2}
    assert VCORE in status.errors["MLU"]
    assert "device not found" in status.errors["MLU"]


def test_engine_drops_devices_when_capacity_disappears(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", cores=200, vmemory=384))
    status = engine.upsert_node(make_node("n1"))
    assert status.devices == {}
    assert status.errors == {}


def test_custom_core_and_memory_names_are_read(clock) -> None:
    engine = make_engine({"resourceCountName": MLU, "resourceMemoryName": "cambricon.com/mlu370.smlu.vmemory",
                          "resourceCoreName": "cambricon.com/mlu370.smlu.vcore"}, clock=clock)
    assert engine.upsert_node(make_node("n1", cores=200, vmemory=384)).devices == {}
    status = engine.upsert_node(make_node("n1", 200, 384, core_name="cambricon.com/mlu370.smlu.vcore",
                                          mem_name="cambricon.com/mlu370.smlu.vmemory"))
    assert status.devices == {"MLU": 2}


def test_health_is_always_good_and_refreshed(clock) -> None:
    # HAMi's Cambricon CheckHealth returns (true, true) and writes no handshake.
    assert BACKEND.hami_node_health() == HealthReport(True, True)
    engine = make_engine(clock=clock)
    node = make_node("n1", cores=100, vmemory=192)
    b = engine.backends["MLU"]
    report = engine.hook.hami_node_health(backend=b, node=node, devices=[], now=clock.now, state={})
    assert report == HealthReport(True, True)
    clock.now += 3600
    status = engine.upsert_node(node)
    assert (status.devices, status.unhealthy, dict(status.patch)) == ({"MLU": 1}, {}, {})
