"""End to end through the engine: policies, the decision annotations and reservations
(scheduler §3.4, §6.3-§6.4, §7.1-§7.5, Appendix A and C; vendors A.4, B.3)."""

from __future__ import annotations

from typing import Any

import pytest
from nvidia_testlib import (
    ALLOCATED,
    GPU_POLICY,
    NODE_POLICY,
    T0,
    TO_ALLOCATE,
    VGPU_NODE,
    Clock,
    container,
    gpu_container,
    make_engine,
    make_node,
    make_pod,
    reg,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice

# Test_Filter uses its own resource names (scheduler_test.go).
HAMI_NAMES = {"resourceCountName": "hami.io/gpu", "resourceMemoryName": "hami.io/gpumem",
              "resourceMemoryPercentageName": "hami.io/gpumem-percentage", "resourceCoreName": "hami.io/gpucores",
              "defaultMemory": 0, "defaultCores": 0, "defaultGPUNum": 1}


def hami_container(name: str, gpus: int, mem: int, cores: int) -> dict[str, Any]:
    return container(name, limits={"hami.io/gpu": str(gpus), "hami.io/gpumem": str(mem),
                                   "hami.io/gpucores": str(cores)})


def filter_engine(clock: Clock, **scheduler: str) -> Engine:
    """Spec §7.5: node1 = device1 (2000 MiB / 25 % used) + device2 idle; node2 = device3 idle + device4
    (6000 MiB / 75 % used); 8000 MiB, 100 cores, split 10 each."""
    engine = make_engine(HAMI_NAMES, clock=clock, scheduler=scheduler or None)
    for name, first, second in (("node1", "device1", "device2"), ("node2", "device3", "device4")):
        devices = [reg(first, index=0, count=10, devmem=8000, devcore=100, type="NVIDIA", mode="hami"),
                   reg(second, index=1, count=10, devmem=8000, devcore=100, type="NVIDIA")]
        status = engine.upsert_node(make_node(name, devices))
        assert status.devices == {"NVIDIA": 2}
    engine.upsert_pod(running_pod("pod1", "node1", "device1,NVIDIA,2000,25:;"))
    engine.upsert_pod(running_pod("pod2", "node2", "device4,NVIDIA,6000,75:;"))
    return engine


def policy_pod(name: str, node_policy: str | None, gpu_policy: str | None, *containers: dict[str, Any],
               init: tuple = ()) -> dict[str, Any]:
    annos = {}
    if node_policy:
        annos[NODE_POLICY] = node_policy
    if gpu_policy:
        annos[GPU_POLICY] = gpu_policy
    return make_pod(*(containers or (hami_container("gpu-burn", 1, 1000, 20),)), init=init, name=name,
                    annotations=annos)


# ------------------------------------------------------------------------------------ spec §7.5
@pytest.mark.parametrize(("node_policy", "gpu_policy", "node", "device", "ranked"), [
    ("binpack", "binpack", "node2", "device4", ("node2", "node1")),
    ("binpack", "spread", "node2", "device3", ("node2", "node1")),
    ("spread", "binpack", "node1", "device1", ("node1", "node2")),
    ("spread", "spread", "node1", "device2", ("node1", "node2")),
])
def test_filter_policy_matrix(clock: Clock, node_policy: str, gpu_policy: str, node: str, device: str,
                              ranked: tuple[str, str]) -> None:
    engine = filter_engine(clock)
    decision = engine.schedule(policy_pod("test1", node_policy, gpu_policy), ["node1", "node2"])
    assert decision.node == node
    assert decision.nodes == ranked
    assert decision.failed == {}
    assert decision.scores == {"node1": pytest.approx(3.0), "node2": pytest.approx(8.0)}
    value = f"{device},NVIDIA,1000,20:;"
    assert decision.annotations == {VGPU_NODE: node, "hami.io/vgpu-time": str(int(T0)),
                                    TO_ALLOCATE: value, ALLOCATED: value}
    assert decision.devices == {"NVIDIA": ((ContainerDevice(device, "NVIDIA", 1000, 20, idx=1 if device in (
        "device2", "device4") else 0),),)}


def test_filter_defaults_are_node_binpack_and_gpu_spread(clock: Clock) -> None:
    decision = filter_engine(clock).schedule(policy_pod("test1", None, None))
    assert (decision.node, decision.annotations[ALLOCATED]) == ("node2", "device3,NVIDIA,1000,20:;")


def test_filter_scheduler_defaults_come_from_the_config(clock: Clock) -> None:
    engine = filter_engine(clock, nodeSchedulerPolicy="spread", gpuSchedulerPolicy="binpack")
    decision = engine.schedule(policy_pod("test1", None, None))
    assert (decision.node, decision.annotations[ALLOCATED]) == ("node1", "device1,NVIDIA,1000,20:;")
    # The pod's annotations still win.
    decision = engine.schedule(policy_pod("test1", "binpack", "binpack"))
    assert (decision.node, decision.annotations[ALLOCATED]) == ("node2", "device4,NVIDIA,1000,20:;")


def test_filter_init_container_variant(clock: Clock) -> None:
    # The 5000 MiB init container cannot use device4 (2000 MiB free); app containers are fitted without
    # the init containers' usage, and device4 has too little memory for 4000 MiB as well.
    pod = policy_pod("test5", "binpack", "binpack", hami_container("app", 1, 4000, 20),
                     init=(hami_container("init", 1, 5000, 20),))
    decision = filter_engine(clock).schedule(pod)
    assert decision.node == "node2"
    assert decision.annotations[ALLOCATED] == "device3,NVIDIA,5000,20:;device3,NVIDIA,4000,20:;"
    assert decision.annotations[TO_ALLOCATE] == decision.annotations[ALLOCATED]


def test_filter_nothing_fits(clock: Clock) -> None:
    decision = filter_engine(clock).schedule(policy_pod("big", None, None, hami_container("c", 1, 9000, 0)))
    assert decision.node is None
    assert decision.failed == {"node1": "2/2 CardInsufficientMemory", "node2": "2/2 CardInsufficientMemory"}
    assert decision.annotations == {}


# ------------------------------------------------------------------------------------ annotation encoding
def one_gpu_engine(clock: Clock, uuid: str = "GPU-a", devmem: int = 8000) -> Engine:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", [reg(uuid, devmem=devmem, type="NVIDIA A10")], allocatable=10))
    return engine


def test_two_containers_on_one_card(clock: Clock) -> None:
    pod = make_pod(gpu_container("a", mem=3000), gpu_container("b", mem=5000))
    decision = one_gpu_engine(clock).schedule(pod)
    assert decision.annotations[ALLOCATED] == "GPU-a,NVIDIA,3000,0:;GPU-a,NVIDIA,5000,0:;"


def test_two_containers_do_not_overbook_a_card(clock: Clock) -> None:
    pod = make_pod(gpu_container("a", mem=3000), gpu_container("b", mem=5001))
    assert one_gpu_engine(clock).schedule(pod).failed == {"n1": "1/1 CardInsufficientMemory"}


def test_spec_example_two_containers_three_cards(clock: Clock) -> None:
    # scheduler §3.4: container 0 one GPU 3000/30, container 1 two GPUs 5000 each.
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("gpu-node-1", [
        reg("GPU-0a1b", devmem=24576, type="NVIDIA A10"), reg("GPU-7e8f", index=1, devmem=24576, type="NVIDIA A10"),
    ], allocatable=20))
    engine.upsert_pod(running_pod("other", "gpu-node-1", "GPU-0a1b,NVIDIA,1000,0:;"))
    pod = make_pod(gpu_container("c0", mem=3000, cores=30), gpu_container("c1", gpus=2, mem=5000),
                   annotations={GPU_POLICY: "binpack"})
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == (
        "GPU-0a1b,NVIDIA,3000,30:;GPU-0a1b,NVIDIA,5000,0:GPU-7e8f,NVIDIA,5000,0:;")


def test_container_without_gpu_gets_an_empty_entry(clock: Clock) -> None:
    pod = make_pod(container("sidecar"), gpu_container("gpu", mem=1000))
    decision = one_gpu_engine(clock, "GPU-x").schedule(pod)
    assert decision.annotations[ALLOCATED] == ";GPU-x,NVIDIA,1000,0:;"
    assert decision.annotations[TO_ALLOCATE] == ";GPU-x,NVIDIA,1000,0:;"
    assert decision.devices == {"NVIDIA": ((), (ContainerDevice("GPU-x", "NVIDIA", 1000, 0, idx=0),))}


def test_trailing_container_without_gpu(clock: Clock) -> None:
    pod = make_pod(gpu_container("gpu", mem=1000), container("sidecar"), init=[container("init")])
    decision = one_gpu_engine(clock, "GPU-x").schedule(pod)
    assert decision.annotations[ALLOCATED] == ";GPU-x,NVIDIA,1000,0:;;"


def test_appendix_a_single_container(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("gpu-node-1", [
        reg("GPU-0a1b2c3d-1111-2222-3333-444455556666", devmem=24576, type="NVIDIA A10"),
        reg("GPU-7e8f9a0b-aaaa-bbbb-cccc-ddddeeeeffff", index=1, devmem=24576, type="NVIDIA A10", numa=1),
    ], allocatable=20))
    pod = engine.admit(make_pod(gpu_container(mem=8000), name="train-0", namespace="team-a"))
    decision = engine.schedule(pod, ["gpu-node-1", "cpu-node-1"])
    assert decision.node == "gpu-node-1"
    assert decision.failed == {"cpu-node-1": "node unregistered"}
    # Both cards idle: spread keeps registration order as the tie-break, so the last card is tried first.
    assert decision.annotations[ALLOCATED] == "GPU-7e8f9a0b-aaaa-bbbb-cccc-ddddeeeeffff,NVIDIA,8000,0:;"


# ------------------------------------------------------------------------------------ device score weights
def weights_engine(clock: Clock) -> Engine:
    # Appendix C device-score vector: Count 10, Totalcore 100, Totalmem 100; the request's type equals the
    # device type, so the pending request counts in the score.
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", [reg("gpu-a", count=10, devmem=100), reg("gpu-b", index=1, count=10,
                                                                                  devmem=100)], allocatable=20))
    engine.upsert_pod(running_pod("on-a", "n1", "gpu-a,NVIDIA,10,90:;"))
    engine.upsert_pod(running_pod("on-b", "n1", "gpu-b,NVIDIA,20,10:;" + "gpu-b,NVIDIA,0,0:;" * 6, containers=7))
    b = engine.nodes["n1"].by_uuid["gpu-b"]
    assert (b.used, b.usedmem, b.usedcores) == (7, 20, 10)
    return engine


@pytest.mark.parametrize(("policy", "weights", "device"), [
    ("binpack", None, "gpu-a"),                        # scores a 16, b 15
    ("spread", None, "gpu-b"),
    ("binpack", "slot=1,core=1,memory=3", "gpu-b"),    # scores a 26, b 27
    ("spread", "slot=1,core=1,memory=3", "gpu-a"),
])
def test_device_scoring_weights(clock: Clock, policy: str, weights: str | None, device: str) -> None:
    annos = {GPU_POLICY: policy}
    if weights:
        annos["hami.io/device-scoring-weights"] = weights
    pod = make_pod(gpu_container(pct=40, cores=0), annotations=annos)
    decision = weights_engine(clock).schedule(pod)
    assert decision.annotations[ALLOCATED] == f"{device},NVIDIA,40,0:;"


def test_invalid_weights_fail_the_pod(clock: Clock) -> None:
    pod = make_pod(gpu_container(mem=10), name="w", annotations={"hami.io/device-scoring-weights": "slot=1,core=1"})
    decision = weights_engine(clock).schedule(pod)
    assert decision.node is None
    assert decision.error is not None
    assert decision.error.startswith("calcScore failed ")
    assert decision.error.endswith(" for pod default/w")


# ------------------------------------------------------------------------------------ reservations
def usage_of(engine: Engine, node: str, uuid: str) -> tuple[int, int, int]:
    d = engine.nodes[node].by_uuid[uuid]
    return d.used, d.usedmem, d.usedcores


def test_schedule_alone_changes_nothing(clock: Clock) -> None:
    engine = one_gpu_engine(clock)
    pod = make_pod(gpu_container(mem=5000, cores=10), name="a")
    first = engine.schedule(pod)
    second = engine.schedule(make_pod(gpu_container(mem=5000, cores=10), name="b"))
    assert first.node == second.node == "n1"
    assert usage_of(engine, "n1", "GPU-a") == (0, 0, 0)
    assert len(engine.ledger) == 0


def test_reserve_then_schedule_sees_the_usage(clock: Clock) -> None:
    engine = one_gpu_engine(clock)
    a = make_pod(gpu_container(mem=5000, cores=10), name="a")
    b = make_pod(gpu_container(mem=5000, cores=10), name="b")
    decision = engine.schedule(a)
    engine.reserve(a, decision)
    assert usage_of(engine, "n1", "GPU-a") == (1, 5000, 10)
    assert engine.schedule(b).failed == {"n1": "1/1 CardInsufficientMemory"}
    # Re-scheduling the reserved pod ignores its own reservation (HAMi drops it when filtering again).
    assert engine.schedule(a).node == "n1"
    engine.unreserve(a)
    assert usage_of(engine, "n1", "GPU-a") == (0, 0, 0)
    assert engine.schedule(b).node == "n1"


def test_reserve_then_pod_update_books_once(clock: Clock) -> None:
    engine = one_gpu_engine(clock)
    a = make_pod(gpu_container(mem=3000, cores=10), name="a")
    decision = engine.schedule(a)
    engine.reserve(a, decision)
    # The informer later sees the pod with the annotations the decision wrote.
    placed = make_pod(gpu_container(mem=3000, cores=10), name="a", annotations=dict(decision.annotations))
    engine.upsert_pod(placed)
    assert usage_of(engine, "n1", "GPU-a") == (1, 3000, 10)
    placed["status"] = {"phase": "Succeeded"}
    engine.upsert_pod(placed)
    assert usage_of(engine, "n1", "GPU-a") == (0, 0, 0)


def test_split_count_fills_up(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", [reg("GPU-a", count=3, devmem=8000, type="NVIDIA A10")], allocatable=3))
    for i in range(3):
        pod = make_pod(gpu_container(mem=100), name=f"p{i}")
        decision = engine.schedule(pod)
        assert decision.node == "n1", decision.failed
        engine.reserve(pod, decision)
    assert engine.schedule(make_pod(gpu_container(mem=100), name="p3")).failed == {
        "n1": "1/1 CardTimeSlicingExhausted"}


def test_exclusive_pod_blocks_the_card(clock: Clock) -> None:
    engine = one_gpu_engine(clock)
    whole = engine.admit(make_pod(gpu_container(), name="whole"))
    decision = engine.schedule(whole)
    assert decision.annotations[ALLOCATED] == "GPU-a,NVIDIA,8000,100:;"
    engine.reserve(whole, decision)
    small = make_pod(gpu_container(mem=1), name="small")
    assert engine.schedule(small).failed == {"n1": "1/1 CardInsufficientMemory"}


def test_reserve_init_and_app_containers_count_peak_plus_sum(clock: Clock) -> None:
    # Collapse (spec §6.3): init c0 5000/20; app c1 4000/20 and c2 3000/10 on the same card -> 7000 MiB, 30, 2.
    engine = one_gpu_engine(clock, devmem=16000)
    pod = make_pod(gpu_container("c1", mem=4000, cores=20), gpu_container("c2", mem=3000, cores=10),
                   init=[gpu_container("c0", mem=5000, cores=20)], name="mixed")
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == "GPU-a,NVIDIA,5000,20:;GPU-a,NVIDIA,4000,20:;GPU-a,NVIDIA,3000,10:;"
    engine.reserve(pod, decision)
    assert usage_of(engine, "n1", "GPU-a") == (2, 7000, 30)
