"""End to end through the engine: decisions, annotations, existing usage and reservations
(vendors A.4, A.7, A.9, D.2-D.5; scheduler §6-§7)."""

from __future__ import annotations

import pytest
from cambricon_testlib import (
    ALLOCATED,
    ASSIGNED,
    GPU_POLICY,
    NODE_POLICY,
    PROFILE,
    T0,
    TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
    Clock,
    container,
    make_engine,
    make_node,
    make_pod,
    mlu_container,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice


def one_node(clock: Clock, cores: int = 400, vmemory: int = 768, name: str = "n1") -> Engine:
    """``cores / 100`` MLUs of ``vmemory x 256 x 100 / cores`` MiB each (400 / 768: four 48 GiB cards)."""
    engine = make_engine(clock=clock)
    assert engine.upsert_node(make_node(name, cores, vmemory)).devices == {"MLU": -(-cores // 100)}
    return engine


def usage_of(engine: Engine, node: str, uuid: str) -> tuple[int, int, int]:
    d = engine.nodes[node].by_uuid[uuid]
    return d.used, d.usedmem, d.usedcores


def test_hami_patch_vector_through_the_engine(clock: Clock) -> None:
    # vendors D.7: leading container without MLU, 1000 units of memory and 1 core on device 0.
    engine = one_node(clock, cores=100, vmemory=1000, name="n")
    pod = make_pod(container("sidecar"), mlu_container("mlu", mem=1000, cores=1))
    decision = engine.schedule(pod)
    assert decision.node == "n"
    assert decision.annotations == {
        VGPU_NODE: "n", VGPU_TIME: str(int(T0)),
        TO_ALLOCATE: ";n-cambricon-mlu-0,MLU,256000,1:;",
        ALLOCATED: ";n-cambricon-mlu-0,MLU,256000,1:;",
        ASSIGNED: "false", PROFILE: "0_1_1000",
    }
    assert decision.devices == {"MLU": ((), (ContainerDevice("n-cambricon-mlu-0", "MLU", 256000, 1, idx=0),))}


def test_spread_prefers_the_last_idle_card(clock: Clock) -> None:
    decision = one_node(clock).schedule(make_pod(mlu_container(mem=20, cores=10)))
    assert decision.annotations[ALLOCATED] == "n1-cambricon-mlu-3,MLU,5120,10:;"
    assert decision.annotations[PROFILE] == "3_10_20"


@pytest.mark.parametrize(("policy", "device"), [("binpack", "n1-cambricon-mlu-1"), ("spread", "n1-cambricon-mlu-3")])
def test_gpu_policy_with_existing_usage(clock: Clock, policy: str, device: str) -> None:
    engine = one_node(clock)
    engine.upsert_pod(running_pod("old", "n1", "n1-cambricon-mlu-1,MLU,10240,30:;"))
    assert usage_of(engine, "n1", "n1-cambricon-mlu-1") == (1, 10240, 30)
    decision = engine.schedule(make_pod(mlu_container(mem=20, cores=10), annotations={GPU_POLICY: policy}))
    assert decision.annotations[ALLOCATED] == f"{device},MLU,5120,10:;"


def test_bare_count_takes_a_whole_idle_card(clock: Clock) -> None:
    engine = one_node(clock)
    engine.upsert_pod(running_pod("old", "n1", "n1-cambricon-mlu-3,MLU,256,5:;"))
    decision = engine.schedule(make_pod(mlu_container()))
    assert decision.annotations[ALLOCATED] == "n1-cambricon-mlu-2,MLU,49152,100:;"
    assert decision.annotations[PROFILE] == "2_100_192"


def test_whole_cards_run_out(clock: Clock) -> None:
    engine = one_node(clock)
    for i in range(4):
        pod = make_pod(mlu_container(), name=f"whole-{i}")
        decision = engine.schedule(pod)
        assert decision.node == "n1"
        engine.reserve(pod, decision)
    decision = engine.schedule(make_pod(mlu_container(), name="whole-4"))
    assert decision.node is None
    assert decision.failed == {"n1": "4/4 CardInsufficientMemory"}
    # Nor does a small shared request: every card's memory is booked.
    decision = engine.schedule(make_pod(mlu_container(mem=1, cores=0), name="tiny"))
    assert decision.failed == {"n1": "4/4 CardInsufficientMemory"}


def test_more_cards_than_the_node_has(clock: Clock) -> None:
    decision = one_node(clock, cores=200, vmemory=384).schedule(make_pod(mlu_container(count=3)))
    assert decision.node is None
    assert decision.failed == {"n1": "NodeInsufficientDevice"}


def test_two_cards_for_one_container(clock: Clock) -> None:
    decision = one_node(clock).schedule(make_pod(mlu_container(count=2, mem=8, cores=50)))
    assert decision.annotations[ALLOCATED] == "n1-cambricon-mlu-3,MLU,2048,50:n1-cambricon-mlu-2,MLU,2048,50:;"
    assert decision.annotations[PROFILE] == "3_50_8"


def test_init_and_app_containers(clock: Clock) -> None:
    pod = make_pod(mlu_container("app", mem=40, cores=20), container("sidecar"),
                   init=[mlu_container("init", mem=100, cores=100)])
    decision = one_node(clock).schedule(pod)
    assert decision.annotations[ALLOCATED] == ("n1-cambricon-mlu-3,MLU,25600,100:;n1-cambricon-mlu-3,MLU,10240,20:;;")
    assert decision.annotations[PROFILE] == "3_100_100"


def test_node_policy_binpack_and_spread(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("busy", 200, 384))
    engine.upsert_node(make_node("idle", 200, 384))
    engine.upsert_pod(running_pod("old", "busy", "busy-cambricon-mlu-0,MLU,12288,50:;"))
    pod = make_pod(mlu_container(mem=20, cores=10))
    assert engine.schedule(pod).node == "busy"
    spread = make_pod(mlu_container(mem=20, cores=10), annotations={NODE_POLICY: "spread"})
    assert engine.schedule(spread).node == "idle"


def test_best_first_with_capacity_prefilter_agrees(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    for i in range(6):
        engine.upsert_node(make_node(f"n{i}", 200, 384))
    for i in range(5):
        engine.upsert_pod(running_pod(f"whole-{i}-a", f"n{i}", f"n{i}-cambricon-mlu-0,MLU,49152,100:;"))
        engine.upsert_pod(running_pod(f"whole-{i}-b", f"n{i}", f"n{i}-cambricon-mlu-1,MLU,49152,100:;"))
    pod = make_pod(mlu_container())
    full = engine.schedule(pod)
    assert full.node == "n5"
    assert set(full.failed) == {f"n{i}" for i in range(5)}
    assert engine.schedule(pod, limit=1).node == "n5"


def test_reserve_then_schedule_sees_the_usage(clock: Clock) -> None:
    engine = one_node(clock, cores=100, vmemory=192)
    a = make_pod(mlu_container(mem=128, cores=40), name="a")
    b = make_pod(mlu_container(mem=128, cores=40), name="b")
    decision = engine.schedule(a)
    assert usage_of(engine, "n1", "n1-cambricon-mlu-0") == (0, 0, 0)
    engine.reserve(a, decision)
    assert usage_of(engine, "n1", "n1-cambricon-mlu-0") == (1, 32768, 40)
    assert engine.schedule(b).failed == {"n1": "1/1 CardInsufficientMemory"}
    # Re-scheduling the reserved pod ignores its own reservation (HAMi drops it when filtering again).
    assert engine.schedule(a).node == "n1"
    engine.unreserve(a)
    assert engine.schedule(b).node == "n1"


def test_scheduled_pod_update_books_once_and_deletion_frees(clock: Clock) -> None:
    engine = one_node(clock, cores=100, vmemory=192)
    a = make_pod(mlu_container(mem=64, cores=40), name="a")
    decision = engine.schedule(a)
    engine.reserve(a, decision)
    a["metadata"]["annotations"] = dict(decision.annotations)
    engine.upsert_pod(a)
    assert usage_of(engine, "n1", "n1-cambricon-mlu-0") == (1, 16384, 40)
    engine.remove_pod(a)
    assert usage_of(engine, "n1", "n1-cambricon-mlu-0") == (0, 0, 0)


def test_undecodable_allocation_quarantines_the_node(clock: Clock) -> None:
    engine = one_node(clock)
    engine.upsert_pod(running_pod("bad", "n1", "n1-cambricon-mlu-0,MLU:;"))
    decision = engine.schedule(make_pod(mlu_container(mem=1, cores=1)))
    assert decision.node is None
    assert decision.failed["n1"].startswith("node quarantined: pod default/bad has an undecodable allocation")
