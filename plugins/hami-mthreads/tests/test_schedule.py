"""End to end through the engine: decisions, pod annotations, existing usage, reservations and the
(absent) node lock (vendors H.5, H.6, H.7, A.4, A.6)."""

from __future__ import annotations

from typing import Any

import pytest
from mthreads_testlib import (
    ALLOCATED,
    GPU_INDEX,
    GPU_POLICY,
    NODE_POLICY,
    PREDICATE_NODE,
    PREDICATE_TIME,
    T0,
    TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
    Clock,
    container,
    make_engine,
    make_node,
    make_pod,
    mt_container,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice


def merged_hook_annotations(engine: Engine, pod: dict[str, Any], devices: Any, node: str = "",
                            now: float = T0) -> dict[str, str]:
    """Every plugin's ``hami_allocation_annotations`` answer merged in registration order, as the engine does."""
    out: dict[str, str] = {}
    for part in reversed(engine.hook.hami_allocation_annotations(backend=engine.backends["Mthreads"], pod=pod,
                                                                 devices=devices, node=node, now=now)):
        out.update(part or {})
    return out


def engine_with(clock: Clock, *nodes: tuple[str, int]) -> Engine:
    """An engine with nodes of ``n`` MTT GPUs each (16 cores and 96 units = 48 GiB per GPU)."""
    engine = make_engine(clock=clock)
    for name, gpus in nodes:
        assert engine.upsert_node(make_node(name, cores=16 * gpus, memory=96 * gpus)).devices == {"Mthreads": gpus}
    return engine


# ------------------------------------------------------------------------------------ H.6 / H.7 annotations
def test_hami_vector_patch_annotations(clock: Clock) -> None:
    # H.7: device idx 0 → gpu-index "0", allocated "test1,Mthreads,1000,1:;"; with no node set,
    # predicate-node is "" as in HAMi's test; predicate-time is the decision time in Unix nanoseconds.
    engine = make_engine(clock=clock)
    devices = ((ContainerDevice("test1", "Mthreads", 1000, 1, idx=0),),)
    annos = merged_hook_annotations(engine, make_pod(container()), devices, now=1_748_765_730.25)
    assert annos == {ALLOCATED: "test1,Mthreads,1000,1:;", GPU_INDEX: "0", PREDICATE_NODE: "",
                     PREDICATE_TIME: "1748765730250000000"}
    assert TO_ALLOCATE not in annos


def test_gpu_index_comes_from_the_last_container_with_devices(clock: Clock) -> None:
    # HAMi overwrites gpu-index for every container that has devices, so the last one wins. (Fit keeps a
    # pod on one device, so only a hand-made assignment shows the difference.)
    engine = make_engine(clock=clock)
    devices = ((ContainerDevice("n-mthreads-0", "Mthreads", 1024, 0, idx=0),), (),
               (ContainerDevice("n-mthreads-2", "Mthreads", 1024, 0, idx=2),
                ContainerDevice("n-mthreads-3", "Mthreads", 1024, 0, idx=3)), ())
    annos = merged_hook_annotations(engine, make_pod(container()), devices, node="n")
    assert annos[GPU_INDEX] == "2,3"
    assert annos[PREDICATE_NODE] == "n"
    assert annos[ALLOCATED] == ("n-mthreads-0,Mthreads,1024,0:;;n-mthreads-2,Mthreads,1024,0:"
                                "n-mthreads-3,Mthreads,1024,0:;;")


def test_no_device_no_extra_annotations(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    assert merged_hook_annotations(engine, make_pod(container()), ((), ())) == {ALLOCATED: ";;"}


def test_decision_annotations_exactly(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 2))
    decision = engine.schedule(make_pod(mt_container(mem=8, cores=4)))
    assert decision.node == "mtt-1"
    annos = dict(decision.annotations)
    assert annos.pop(PREDICATE_TIME) == str(int(T0) * 1_000_000_000)  # the decision time, as vgpu-time
    # Both GPUs idle: spread keeps registration order as the tie-break, so the last GPU is tried first.
    assert annos == {VGPU_NODE: "mtt-1", VGPU_TIME: str(int(T0)), ALLOCATED: "mtt-1-mthreads-1,Mthreads,4096,4:;",
                     GPU_INDEX: "1", PREDICATE_NODE: "mtt-1"}
    assert decision.devices == {"Mthreads": ((ContainerDevice("mtt-1-mthreads-1", "Mthreads", 4096, 4, idx=1),),)}


def test_predicate_node_is_the_chosen_node_not_a_stale_annotation(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-a", 1), ("mtt-b", 1))
    engine.upsert_pod(running_pod("busy", "mtt-a", "mtt-a-mthreads-0,Mthreads,49152,16:;"))
    pod = make_pod(mt_container(mem=8), annotations={VGPU_NODE: "mtt-a"})
    decision = engine.schedule(pod)
    assert decision.node == "mtt-b"
    assert decision.annotations[PREDICATE_NODE] == "mtt-b" == decision.annotations[VGPU_NODE]


def test_whole_cards_list_every_index(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 4))
    pod = engine.admit(make_pod(mt_container(gpus=2)))
    decision = engine.schedule(pod, ["mtt-1"])
    assert decision.annotations[ALLOCATED] == (
        "mtt-1-mthreads-3,Mthreads,49152,16:mtt-1-mthreads-2,Mthreads,49152,16:;")
    assert decision.annotations[GPU_INDEX] == "3,2"
    assert pod["metadata"]["annotations"]["mthreads.com/request-gpu-num"] == "2"


def test_container_without_mthreads_keeps_its_position(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 1))
    decision = engine.schedule(make_pod(container("sidecar"), mt_container("app", mem=2), container("tail")))
    assert decision.annotations[ALLOCATED] == ";mtt-1-mthreads-0,Mthreads,1024,0:;;"
    assert decision.annotations[GPU_INDEX] == "0"


def test_all_containers_share_one_device_and_the_last_one_sets_the_index(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 2))
    pod = make_pod(mt_container("a", mem=4, cores=2), mt_container("b", mem=8, cores=4),
                   init=[mt_container("init", mem=2)])
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == (
        "mtt-1-mthreads-1,Mthreads,1024,0:;mtt-1-mthreads-1,Mthreads,2048,2:;mtt-1-mthreads-1,Mthreads,4096,4:;")
    assert decision.annotations[GPU_INDEX] == "1"


def test_second_container_cannot_follow_a_two_device_container(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 2))
    pod = make_pod(mt_container("two", gpus=2, mem=8), mt_container("one", mem=2))
    decision = engine.schedule(pod)
    assert decision.node is None
    assert decision.failed == {"mtt-1": "2/2 CardNotFoundCustomFilterRule"}


def test_later_container_goes_to_the_same_device_even_when_another_is_free(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 2))
    pod = make_pod(mt_container("a", mem=64), mt_container("b", mem=64))
    # 64 + 64 units = 64 GiB do not fit one 48 GiB GPU, and the second GPU is off limits.
    decision = engine.schedule(pod)
    assert decision.failed == {"mtt-1": "1/2 CardInsufficientMemory, 1/2 CardNotFoundCustomFilterRule"}


# ------------------------------------------------------------------------------------ existing usage
def test_existing_pods_are_booked_from_the_allocated_key(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 2))
    engine.upsert_pod(running_pod("whole", "mtt-1", "mtt-1-mthreads-1,Mthreads,49152,16:;"))
    dev = engine.nodes["mtt-1"].by_uuid["mtt-1-mthreads-1"]
    assert (dev.used, dev.usedmem, dev.usedcores) == (1, 49152, 16)
    whole = engine.admit(make_pod(mt_container(gpus=1), name="next"))
    decision = engine.schedule(whole)
    assert decision.annotations[ALLOCATED] == "mtt-1-mthreads-0,Mthreads,49152,16:;"
    engine.upsert_pod(running_pod("whole2", "mtt-1", "mtt-1-mthreads-0,Mthreads,49152,16:;"))
    assert engine.schedule(whole).failed == {"mtt-1": "2/2 CardInsufficientMemory"}


def test_compute_exhausted_card(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 1))
    engine.upsert_pod(running_pod("cores", "mtt-1", "mtt-1-mthreads-0,Mthreads,2048,16:;"))
    assert engine.schedule(make_pod(mt_container(mem=4))).failed == {"mtt-1": "1/1 CardComputeUnitsExhausted"}
    assert engine.schedule(make_pod(mt_container(mem=4, cores=1))).failed == {"mtt-1": "1/1 CardInsufficientCore"}


def test_undecodable_allocation_quarantines_the_node(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 1))
    engine.upsert_pod(running_pod("broken", "mtt-1", "mtt-1-mthreads-0,Mthreads:;"))
    decision = engine.schedule(make_pod(mt_container(mem=2)))
    assert decision.node is None
    assert decision.failed["mtt-1"].startswith("node quarantined: pod default/broken has an undecodable allocation")
    assert ALLOCATED in decision.failed["mtt-1"]


# ------------------------------------------------------------------------------------ policies
@pytest.mark.parametrize(("node_policy", "gpu_policy", "node", "index"), [
    ("binpack", "binpack", "mtt-a", "0"),
    ("binpack", "spread", "mtt-a", "1"),
    ("spread", "binpack", "mtt-b", "1"),
    ("spread", "spread", "mtt-b", "1"),
])
def test_policy_matrix(clock: Clock, node_policy: str, gpu_policy: str, node: str, index: str) -> None:
    engine = engine_with(clock, ("mtt-a", 2), ("mtt-b", 2))
    engine.upsert_pod(running_pod("busy", "mtt-a", "mtt-a-mthreads-0,Mthreads,8192,4:;"))
    pod = make_pod(mt_container(mem=4, cores=2), annotations={NODE_POLICY: node_policy, GPU_POLICY: gpu_policy})
    decision = engine.schedule(pod)
    assert decision.node == node
    assert decision.annotations[GPU_INDEX] == index
    assert decision.annotations[PREDICATE_NODE] == node


def test_limited_search_picks_the_same_node(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-a", 1), ("mtt-b", 1), ("mtt-c", 1))
    engine.upsert_pod(running_pod("busy", "mtt-b", "mtt-b-mthreads-0,Mthreads,8192,4:;"))
    engine.upsert_pod(running_pod("full", "mtt-c", "mtt-c-mthreads-0,Mthreads,49152,16:;"))
    pod = make_pod(mt_container(mem=16, cores=8))
    assert engine.schedule(pod, limit=1).node == engine.schedule(pod).node == "mtt-b"


# ------------------------------------------------------------------------------------ reserve / lock
def test_reserve_then_schedule_sees_the_usage(clock: Clock) -> None:
    engine = engine_with(clock, ("mtt-1", 1))
    a = engine.admit(make_pod(mt_container(gpus=1), name="a"))
    b = make_pod(mt_container(mem=2), name="b")
    decision = engine.schedule(a)
    engine.reserve(a, decision)
    dev = engine.nodes["mtt-1"].by_uuid["mtt-1-mthreads-0"]
    assert (dev.used, dev.usedmem, dev.usedcores) == (1, 49152, 16)
    assert engine.schedule(b).failed == {"mtt-1": "1/1 CardInsufficientMemory"}
    assert engine.schedule(a).node == "mtt-1"  # re-scheduling ignores the pod's own reservation
    engine.unreserve(a)
    assert engine.schedule(b).node == "mtt-1"


def test_no_node_lock(clock: Clock) -> None:
    # HAMi's Mthreads LockNode/ReleaseNodeLock are no-ops: bind takes no lock, even for app containers.
    engine = engine_with(clock, ("mtt-1", 1))
    pod = make_pod(mt_container(mem=2), init=[mt_container("init", mem=2)])
    lock = engine.hook.hami_node_lock(backend=engine.backends["Mthreads"], pod=pod, requests=engine.requests(pod))
    assert lock is None
