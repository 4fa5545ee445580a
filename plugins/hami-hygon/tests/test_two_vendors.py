"""A pod whose containers use NVIDIA and Hygon at once, with both plugins registered (vendors A.1, A.3, A.4):
each container is fitted by its own vendor, and only a node with both kinds of devices fits."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hygon_testlib import (
    ALLOCATED,
    DCUNUM,
    NODE_LOCK,
    T0,
    TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
    Clock,
    container,
    csv_device,
    dcu_container,
    make_node,
    make_pod,
    plugin_manager,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import LockSpec

nvidia_plugin = pytest.importorskip("hami_nvidia.plugin", reason="the two-vendor tests need hami-nvidia installed")

CARD = 65520


def usage_of(engine: Engine, node: str, uuid: str) -> tuple[int, int, int]:
    d = engine.nodes[node].by_uuid[uuid]
    return d.used, d.usedmem, d.usedcores


NVIDIA_REGISTER = "hami.io/node-nvidia-register"
NVIDIA_CARD = {"id": "GPU-0", "count": 10, "devmem": 24576, "devcore": 100, "type": "NVIDIA A10",
               "mode": "hami-core", "health": True}


def two_vendor_engine(clock: Clock) -> Engine:
    pm = plugin_manager(nvidia_plugin)
    engine = Engine({"nvidia": {}, "hygon": {}}, plugins=pm, clock=clock)
    assert sorted(engine.backends) == ["DCU", "NVIDIA"]
    gpu = json.dumps([NVIDIA_CARD])
    dcus = csv_device("DCU-0", type="DCU-K100_AI")
    for name, annos in (("both", {NVIDIA_REGISTER: gpu, "hami.io/node-dcu-register": dcus}),
                        ("nvidia-only", {NVIDIA_REGISTER: gpu}),
                        ("dcu-only", {"hami.io/node-dcu-register": dcus})):
        node = make_node(name, annotations=annos)
        node["status"]["allocatable"] = {"nvidia.com/gpu": "10", DCUNUM: "4"}
        status = engine.upsert_node(node)
        assert status.errors == {}
    return engine


def mixed_pod(name: str = "mixed", dcu_mem: int = 2000) -> dict[str, Any]:
    return make_pod(container("cuda", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}),
                    dcu_container("rocm", mem=dcu_mem, cores=30), name=name)


def test_nvidia_and_hygon_containers_in_one_pod(clock: Clock) -> None:
    engine = two_vendor_engine(clock)
    pod = engine.admit(mixed_pod())
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    reqs = engine.requests(pod)
    assert [sorted(c) for c in reqs.containers] == [["NVIDIA"], ["DCU"]]
    decision = engine.schedule(pod)
    assert decision.node == "both"
    assert decision.nodes == ("both",)
    assert decision.failed == {"nvidia-only": "NodeInsufficientDevice", "dcu-only": "NodeInsufficientDevice"}
    assert decision.annotations == {
        VGPU_NODE: "both", VGPU_TIME: str(int(T0)),
        "hami.io/vgpu-devices-to-allocate": "GPU-0,NVIDIA,4000,0:;;",
        "hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,4000,0:;;",
        TO_ALLOCATE: ";DCU-0,DCU,2000,30:;",
        ALLOCATED: ";DCU-0,DCU,2000,30:;",
    }
    for name in ("NVIDIA", "DCU"):
        spec = engine.hook.hami_node_lock(backend=engine.backends[name], pod=pod, requests=reqs)
        assert spec == LockSpec(NODE_LOCK)
    engine.reserve(pod, decision)
    assert usage_of(engine, "both", "GPU-0") == (1, 4000, 0)
    assert usage_of(engine, "both", "DCU-0") == (1, 2000, 30)


def test_mixed_pod_usage_is_rebuilt_from_both_allocated_keys(clock: Clock) -> None:
    engine = two_vendor_engine(clock)
    pod = engine.admit(mixed_pod())
    decision = engine.schedule(pod)
    placed = {**pod, "metadata": {**pod["metadata"], "annotations": dict(decision.annotations)}}
    engine.upsert_pod(placed)
    assert usage_of(engine, "both", "GPU-0") == (1, 4000, 0)
    assert usage_of(engine, "both", "DCU-0") == (1, 2000, 30)


def test_mixed_pod_fails_when_one_vendor_does_not_fit(clock: Clock) -> None:
    engine = two_vendor_engine(clock)
    decision = engine.schedule(engine.admit(mixed_pod(dcu_mem=CARD + 1)))
    assert decision.node is None
    assert decision.failed == {"both": "1/1 CardInsufficientMemory", "nvidia-only": "NodeInsufficientDevice",
                               "dcu-only": "NodeInsufficientDevice"}
