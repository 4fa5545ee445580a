"""Several MLU models side by side (``cambricon.models``; not in HAMi, see the README).

One backend per model: its own resource names, its own node capacity (or node labels) and its own
allocation annotations; the HAMi default path is untouched when ``models`` is absent.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from cambricon_testlib import (
    ASSIGNED,
    MODELS,
    PROFILE,
    Clock,
    container,
    make_engine,
    make_node,
    make_pod,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import AdmissionFailed
from hami_core.plugins.types import ContainerDevice, DeviceRequest, LockSpec, ResourceNames

C370, M370, K370 = "cambricon.com/mlu370.vmlu", "cambricon.com/mlu370.smlu.vmemory", "cambricon.com/mlu370.smlu.vcore"
C590, M590, K590 = "cambricon.com/mlu590.vmlu", "cambricon.com/mlu590.smlu.vmemory", "cambricon.com/mlu590.smlu.vcore"


def node_370(name: str = "mlu370-0") -> dict[str, Any]:
    """Four MLU370 cards of 48 GiB."""
    return make_node(name, 400, 768, core_name=K370, mem_name=M370)


def node_590(name: str = "mlu590-0") -> dict[str, Any]:
    """Eight MLU590 cards of 80 GiB."""
    return make_node(name, 800, 2560, core_name=K590, mem_name=M590)


def two_models(clock: Clock) -> Engine:
    engine = make_engine(MODELS, clock=clock)
    assert engine.upsert_node(node_370()).devices == {"MLU370": 4}
    assert engine.upsert_node(node_590()).devices == {"MLU590": 8}
    return engine


def pod_of(count: str, mem_name: str, core_name: str, *, mem: int = 40, cores: int = 25, name: str = "p",
           **kwargs: Any) -> dict[str, Any]:
    return make_pod(container("main", limits={count: "1", mem_name: str(mem), core_name: str(cores)}), name=name,
                    **kwargs)


def test_one_backend_per_model() -> None:
    engine = make_engine(MODELS)
    assert sorted(engine.backends) == ["MLU370", "MLU590"]
    b = engine.backends["MLU590"]
    assert (b.vendor, b.plugin) == ("cambricon", "hami_cambricon.plugin")
    assert b.resource_names == ResourceNames(count=C590, memory=M590, cores=K590, memory_factor=256)
    assert b.to_allocate_annotation == "hami.io/cambricon-mlu590-devices-to-allocate"
    assert b.allocated_annotation == "hami.io/cambricon-mlu590-devices-allocated"
    assert b.lock_annotation == "cambricon.com/dsmlu.lock"
    assert b.standard_capacity is True


def test_each_node_registers_the_model_its_capacity_names(clock: Clock) -> None:
    engine = two_models(clock)
    devices = engine.nodes["mlu590-0"].devices["MLU590"]
    assert [(d.id, d.index, d.type, d.totalmem, d.totalcore, d.count) for d in devices[:2]] == [
        ("mlu590-0-cambricon-mlu590-0", 0, "MLU590", 81920, 100, 100),
        ("mlu590-0-cambricon-mlu590-1", 1, "MLU590", 81920, 100, 100)]
    assert "MLU590" not in engine.nodes["mlu370-0"].devices
    # The HAMi names register nothing once models are configured.
    assert engine.upsert_node(make_node("generic", 400, 768)).devices == {}


def test_requests_are_routed_by_count_resource(clock: Clock) -> None:
    engine = make_engine(MODELS, clock=clock)
    pod = make_pod(container("a", limits={C370: "1", M370: "40", K370: "25"}),
                   container("b", limits={C590: "2"}), container("c", limits={"cambricon.com/vmlu": "1"}))
    assert engine.requests(pod).containers == (
        {"MLU370": DeviceRequest("MLU370", 1, 10240, 0, 25)},
        {"MLU590": DeviceRequest("MLU590", 2, 0, 100, 100)},
        {},
    )


def test_a_model_pod_lands_on_its_model(clock: Clock) -> None:
    engine = two_models(clock)
    decision = engine.schedule(pod_of(C590, M590, K590))
    assert decision.node == "mlu590-0"
    assert decision.failed == {"mlu370-0": "NodeInsufficientDevice"}
    value = "mlu590-0-cambricon-mlu590-7,MLU590,10240,25:;"
    assert {k: v for k, v in decision.annotations.items() if not k.startswith("hami.io/vgpu-")} == {
        "hami.io/cambricon-mlu590-devices-to-allocate": value,
        "hami.io/cambricon-mlu590-devices-allocated": value,
        ASSIGNED: "false",
        PROFILE: "7_25_40",
    }
    decision = engine.schedule(pod_of(C370, M370, K370, mem=192, cores=100))
    assert decision.node == "mlu370-0"
    assert decision.annotations["hami.io/cambricon-mlu370-devices-allocated"] == (
        "mlu370-0-cambricon-mlu370-3,MLU370,49152,100:;")


def test_existing_usage_is_booked_on_the_right_model(clock: Clock) -> None:
    engine = two_models(clock)
    engine.upsert_pod(running_pod("old", "mlu590-0", "mlu590-0-cambricon-mlu590-7,MLU590,81920,100:;",
                                  key="hami.io/cambricon-mlu590-devices-allocated"))
    dev = engine.nodes["mlu590-0"].by_uuid["mlu590-0-cambricon-mlu590-7"]
    assert (dev.used, dev.usedmem, dev.usedcores) == (1, 81920, 100)
    decision = engine.schedule(pod_of(C590, M590, K590, annotations={"hami.io/gpu-scheduler-policy": "binpack"}))
    assert decision.annotations["hami.io/cambricon-mlu590-devices-allocated"].startswith(
        "mlu590-0-cambricon-mlu590-6,")


def test_one_node_may_carry_two_models(clock: Clock) -> None:
    engine = make_engine(MODELS, clock=clock)
    node = make_node("mixed", 100, 192, core_name=K370, mem_name=M370,
                     extra_capacity={K590: "100", M590: "320"})
    assert engine.upsert_node(node).devices == {"MLU370": 1, "MLU590": 1}
    assert set(engine.nodes["mixed"].by_uuid) == {"mixed-cambricon-mlu370-0", "mixed-cambricon-mlu590-0"}
    a = pod_of(C370, M370, K370, mem=192, cores=100, name="a")
    engine.reserve(a, engine.schedule(a))
    decision = engine.schedule(pod_of(C590, M590, K590, mem=320, cores=100, name="b"))
    device = ContainerDevice("mixed-cambricon-mlu590-0", "MLU590", 81920, 100, idx=0)
    assert decision.devices == {"MLU590": ((device,),)}
    assert engine.schedule(pod_of(C370, M370, K370, mem=1, cores=1, name="c")).failed == {
        "mixed": "1/1 CardInsufficientMemory"}


def test_shared_capacity_names_are_told_apart_by_node_labels(clock: Clock) -> None:
    models = {"models": [
        {"name": "MLU370", "resourceCountName": C370, "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
         "resourceCoreName": "cambricon.com/mlu.smlu.vcore", "nodeSelector": {"accelerator": "mlu370"}},
        {"name": "MLU590", "resourceCountName": C590, "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
         "resourceCoreName": "cambricon.com/mlu.smlu.vcore", "nodeSelector": {"accelerator": "mlu590"}},
    ]}
    engine = make_engine(models, clock=clock)
    assert engine.upsert_node(make_node("a", 400, 768, labels={"accelerator": "mlu370"})).devices == {"MLU370": 4}
    assert engine.upsert_node(make_node("b", 800, 2560, labels={"accelerator": "mlu590"})).devices == {"MLU590": 8}
    assert engine.upsert_node(make_node("c", 800, 2560)).devices == {}
    pod = make_pod(container(limits={C590: "1", "cambricon.com/mlu.smlu.vmemory": "320"}))
    assert engine.requests(pod).containers[0] == {"MLU590": DeviceRequest("MLU590", 1, 81920, 0, 100)}
    assert engine.schedule(pod).node == "b"


def test_a_pod_may_use_one_model_only(clock: Clock) -> None:
    engine = two_models(clock)
    pod = make_pod(container("a", limits={C370: "1"}), container("b", limits={C590: "1"}), name="both")
    with pytest.raises(AdmissionFailed, match=re.escape("container a requests cambricon.com/mlu370.vmlu (MLU370) and "
                                                        "container b requests cambricon.com/mlu590.vmlu (MLU590)")):
        engine.admit(pod)
    # A pod that bypassed the webhook is refused where the second model would be placed.
    mixed = make_node("mixed", 100, 192, core_name=K370, mem_name=M370, extra_capacity={K590: "100", M590: "320"})
    engine.upsert_node(mixed)
    decision = engine.schedule(pod)
    assert decision.node is None
    assert decision.failed["mixed"] == "pod already holds MLU370 devices on this node; a pod may use one MLU model"


def test_model_pod_takes_the_cambricon_lock(clock: Clock) -> None:
    engine = two_models(clock)
    pod = pod_of(C590, M590, K590)
    lock = engine.hook.hami_node_lock(backend=engine.backends["MLU590"], pod=pod, requests=engine.requests(pod))
    assert lock == LockSpec("cambricon.com/dsmlu.lock", False, 120.0)
    assert engine.hook.hami_node_lock(backend=engine.backends["MLU370"], pod=pod, requests=engine.requests(pod)) is None


def test_a_single_model_named_mlu_is_wire_identical_to_hami(clock: Clock) -> None:
    engine = make_engine({"models": [{"name": "MLU", "resourceCountName": "cambricon.com/vmlu",
                                      "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
                                      "resourceCoreName": "cambricon.com/mlu.smlu.vcore"}]}, clock=clock)
    hami = make_engine(clock=clock)
    for e in (engine, hami):
        e.upsert_node(make_node("n1", 200, 384))
    pod = make_pod(container(limits={"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "8"}))
    assert engine.schedule(pod).annotations == hami.schedule(pod).annotations
    assert engine.backends["MLU"] == hami.backends["MLU"]
