"""Capacity-based registration and health (vendors H.2, A.3, A.5)."""

from __future__ import annotations

import pytest
from mthreads_testlib import CORE, MEM, make_backend, make_engine, make_node, make_pod, mt_container

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo, HealthReport


def devices(node: dict) -> list[DeviceInfo]:
    return make_backend().hami_node_devices(node)


def test_hami_vector_one_core_one_memory_unit() -> None:
    # H.7: capacity mem 1, core 1 → one device, Devmem 1 x 512 x 16 / 1 = 8192, Devcore 16.
    assert devices(make_node("test", cores=1, memory=1)) == [
        DeviceInfo(id="test-mthreads-0", index=0, count=100, devmem=8192, devcore=16, type="Mthreads", numa=0,
                   health=True)]


def test_eight_gpus_of_48_gib() -> None:
    devs = devices(make_node("mtt-0", cores=128, memory=768))
    assert [d.id for d in devs] == [f"mtt-0-mthreads-{i}" for i in range(8)]
    assert [d.index for d in devs] == list(range(8))
    assert {(d.count, d.devmem, d.devcore, d.type, d.health) for d in devs} == {(100, 49152, 16, "Mthreads", True)}


@pytest.mark.parametrize(("cores", "memory", "n", "devmem"), [
    (16, 96, 1, 49152),
    (17, 96, 2, 46260),   # ceil(17/16) devices; 96 x 8192 / 17 = 46260.7 → 46260
    (32, 100, 2, 25600),
    (15, 0, 1, 0),
])
def test_device_count_is_ceil_of_cores_over_16_and_memory_is_integer_divided(cores: int, memory: int, n: int,
                                                                                devmem: int) -> None:
    devs = devices(make_node("n", cores=cores, memory=memory))
    assert len(devs) == n
    assert {d.devmem for d in devs} == {devmem}


def test_quantity_suffixes_are_read() -> None:
    assert devices(make_node("n", cores="32", memory="0.192k"))[0].devmem == 49152


def test_missing_memory_capacity_gives_zero_mib_cards() -> None:
    assert [d.devmem for d in devices(make_node("n", cores=32, memory=None))] == [0, 0]


@pytest.mark.parametrize("cores", [None, 0, "0"])
def test_no_core_capacity_means_no_devices(cores: object) -> None:
    assert devices(make_node("n", cores=cores, memory=96)) == []


def test_allocatable_is_not_what_counts() -> None:
    node = make_node("n", cores=32, memory=192)
    node["status"]["allocatable"] = {CORE: "0", MEM: "0"}
    assert len(devices(node)) == 2


@pytest.mark.parametrize(("cores", "memory", "resource"), [
    ("sixteen", "96", CORE),
    ("1.5", "96", CORE),
    ("-16", "96", CORE),
    ("16", "lots", MEM),
    ("16", "0.5", MEM),
    ("16", "-1", MEM),
    ("1", "600000", MEM),  # 600000 x 8192 MiB per GPU is beyond int32
])
def test_malformed_capacity_is_a_wire_error_naming_node_and_resource(cores: str, memory: str,
                                                                      resource: str) -> None:
    with pytest.raises(WireFormatError) as info:
        devices(make_node("bad", cores=cores, memory=memory))
    assert f"node bad: status.capacity[{resource}]" in str(info.value)


def test_engine_keeps_previous_devices_on_malformed_capacity() -> None:
    engine = make_engine()
    assert engine.upsert_node(make_node("n1", cores=32, memory=192)).devices == {"Mthreads": 2}
    status = engine.upsert_node(make_node("n1", cores="x", memory=192))
    assert status.devices == {"Mthreads": 2}
    assert "status.capacity[mthreads.com/sgpu-core]" in status.errors["Mthreads"]
    assert engine.schedule(make_pod(mt_container(mem=4))).node == "n1"


def test_engine_drops_devices_when_core_capacity_goes_away() -> None:
    engine = make_engine()
    engine.upsert_node(make_node("n1", cores=32, memory=192))
    status = engine.upsert_node(make_node("n1", cores=None, memory=None))
    assert status.devices == {}
    assert status.errors == {}
    assert engine.schedule(make_pod(mt_container(mem=4))).node is None


def test_always_healthy_and_no_patch() -> None:
    # CheckHealth is (true, true) and no handshake exists: nothing is written on the node.
    engine = make_engine()
    status = engine.upsert_node(make_node("n1", cores=16, memory=96, allocatable=False))
    assert status.unhealthy == {}
    assert status.patch == {}
    report = engine.hook.hami_node_health(backend=engine.backends["Mthreads"], node=make_node("n1"), devices=[],
                                          now=0.0, state={})
    assert report == HealthReport(True, True)
