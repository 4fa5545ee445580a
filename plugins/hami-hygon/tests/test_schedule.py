"""End to end through the engine: decisions, DCU allocation annotations, usage, reservations and the node
lock (vendors A.4, A.6, A.7, A.9, E.3, E.4). The NVIDIA + Hygon pod is in ``test_two_vendors``."""

from __future__ import annotations

from typing import Any

import pytest
from hygon_testlib import (
    ALLOCATED,
    DCUMEM,
    DCUNUM,
    GPU_POLICY,
    NODE_LOCK,
    NODE_POLICY,
    T0,
    TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
    Clock,
    container,
    csv_device,
    dcu_container,
    dcu_node,
    make_engine,
    make_node,
    make_pod,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice, LockSpec

CARD = 65520


def usage_of(engine: Engine, node: str, uuid: str) -> tuple[int, int, int]:
    d = engine.nodes[node].by_uuid[uuid]
    return d.used, d.usedmem, d.usedcores


def one_card_engine(clock: Clock, *, count: int = 4, hygon: dict[str, Any] | None = None) -> Engine:
    engine = make_engine(hygon, clock=clock)
    engine.upsert_node(make_node("n1", csv_device("DCU-a", count=count), allocatable=count))
    return engine


# ------------------------------------------------------------------------------------ decisions and annotations
def test_bare_count_books_a_whole_exclusive_card(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(dcu_node("n1"))
    pod = engine.admit(make_pod(dcu_container(num=1), name="whole"))
    decision = engine.schedule(pod)
    assert decision.node == "n1"
    # Both cards idle: spread keeps registration order as the tie-break, so the last card is tried first.
    value = f"n1-dcu-1,DCU,{CARD},100:;"
    assert decision.annotations == {VGPU_NODE: "n1", VGPU_TIME: str(int(T0)), TO_ALLOCATE: value, ALLOCATED: value}
    assert decision.devices == {"DCU": ((ContainerDevice("n1-dcu-1", "DCU", CARD, 100, idx=1),),)}


def test_use_exclusive_card_example_takes_two_cards(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(dcu_node("n1"))
    decision = engine.schedule(make_pod(dcu_container(num=2)))
    assert decision.annotations[ALLOCATED] == f"n1-dcu-1,DCU,{CARD},100:n1-dcu-0,DCU,{CARD},100:;"
    engine.reserve(make_pod(dcu_container(num=2)), decision)
    assert usage_of(engine, "n1", "n1-dcu-0") == usage_of(engine, "n1", "n1-dcu-1") == (1, CARD, 100)
    small = make_pod(dcu_container(mem=1, cores=1), name="small")
    assert engine.schedule(small).failed == {"n1": "2/2 CardInsufficientMemory"}


def test_vdcu_pods_share_a_card_up_to_its_split_count(clock: Clock) -> None:
    engine = one_card_engine(clock, count=4)
    for i in range(4):
        pod = make_pod(dcu_container(mem=2000, cores=25), name=f"v{i}")
        decision = engine.schedule(pod)
        assert decision.annotations[ALLOCATED] == "DCU-a,DCU,2000,25:;", decision.failed
        engine.reserve(pod, decision)
    assert usage_of(engine, "n1", "DCU-a") == (4, 8000, 100)
    assert engine.schedule(make_pod(dcu_container(mem=1, cores=0), name="v4")).failed == {
        "n1": "1/1 CardTimeSlicingExhausted"}


def test_whole_card_after_a_vdcu_is_an_exclusive_conflict(clock: Clock) -> None:
    engine = one_card_engine(clock)
    engine.upsert_pod(running_pod("shared", "n1", "DCU-a,DCU,2000,0:;"))
    assert engine.schedule(make_pod(dcu_container(mem=1000))).failed == {"n1": "1/1 ExclusiveDeviceAllocateConflict"}
    assert engine.schedule(make_pod(dcu_container())).failed == {"n1": "1/1 CardInsufficientMemory"}
    assert engine.schedule(make_pod(dcu_container(mem=1000, cores=100))).failed == {
        "n1": "1/1 ExclusiveDeviceAllocateConflict"}
    assert engine.schedule(make_pod(dcu_container(mem=1000, cores=60))).node == "n1"


def test_container_positions_are_kept(clock: Clock) -> None:
    engine = one_card_engine(clock)
    pod = make_pod(container("sidecar"), dcu_container("main", mem=1000, cores=10), container("tail"),
                   init=[dcu_container("init", mem=3000, cores=20)])
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == "DCU-a,DCU,3000,20:;;DCU-a,DCU,1000,10:;;"
    assert decision.annotations[TO_ALLOCATE] == decision.annotations[ALLOCATED]
    engine.reserve(pod, decision)
    # Init containers count as a peak, app containers as a sum (A.4).
    assert usage_of(engine, "n1", "DCU-a") == (1, 3000, 20)


def test_gpu_policy_picks_the_card_by_existing_usage(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(dcu_node("n1"))
    engine.upsert_pod(running_pod("busy", "n1", "n1-dcu-0,DCU,10000,30:;"))
    for policy, card in (("binpack", "n1-dcu-0"), ("spread", "n1-dcu-1")):
        pod = make_pod(dcu_container(mem=1000, cores=10), annotations={GPU_POLICY: policy})
        assert engine.schedule(pod).annotations[ALLOCATED] == f"{card},DCU,1000,10:;"


def test_node_policy_and_default_scores(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(dcu_node("idle", n=1))
    engine.upsert_node(dcu_node("busy", n=1))
    engine.upsert_pod(running_pod("x", "busy", f"busy-dcu-0,DCU,{CARD // 2},50:;"))
    for policy, node in (("binpack", "busy"), ("spread", "idle")):
        decision = engine.schedule(make_pod(dcu_container(mem=1000, cores=10), annotations={NODE_POLICY: policy}))
        assert decision.node == node
        # HAMi's default node score (DCU's ScoreNode adds 0): 10 x (1/4 + 50/100 + 32760/65520).
        assert decision.scores == {"busy": pytest.approx(12.5), "idle": 0.0}


def test_type_and_uuid_annotations_through_the_engine(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("mixed", csv_device("K-0", type="DCU-K100_AI")
                                 + csv_device("Z-0", index=1, type="DCU-Z100L")))
    by_type = make_pod(dcu_container(mem=100), annotations={"hygon.com/use-dcutype": "K100"})
    assert engine.schedule(by_type).annotations[ALLOCATED] == "K-0,DCU,100,100:;"
    by_uuid = make_pod(dcu_container(mem=100), annotations={"hygon.com/nouse-gpuuuid": "Z-0"})
    assert engine.schedule(by_uuid).annotations[ALLOCATED] == "K-0,DCU,100,100:;"
    nothing = make_pod(dcu_container(mem=100), annotations={"hygon.com/use-dcutype": "BW"})
    assert engine.schedule(nothing).failed == {"mixed": "2/2 CardTypeMismatch"}


def test_more_cards_than_the_node_has(clock: Clock) -> None:
    engine = one_card_engine(clock)
    assert engine.schedule(make_pod(dcu_container(num=2))).failed == {"n1": "NodeInsufficientDevice"}


def test_memory_factor_reaches_the_annotation(clock: Clock) -> None:
    engine = one_card_engine(clock, hygon={"memoryFactor": 1024})
    decision = engine.schedule(make_pod(dcu_container(mem=16, cores=30)))
    assert decision.annotations[ALLOCATED] == "DCU-a,DCU,16384,30:;"


def test_pod_without_dcus_is_skipped(clock: Clock) -> None:
    decision = one_card_engine(clock).schedule(make_pod(container(limits={"cpu": "1"})))
    assert decision.skipped
    assert decision.annotations == {}


def test_allocation_annotations_hook_matches_upstream_patch_annotations(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    devices = ((ContainerDevice("test1", "DCU", 2048, 1, idx=1),),)
    parts = engine.hook.hami_allocation_annotations(backend=engine.backends["DCU"], pod=make_pod(), devices=devices,
                                                    node="n", now=0.0)
    merged: dict[str, str] = {}
    for part in reversed(parts):
        merged.update(part or {})
    assert merged == {TO_ALLOCATE: "test1,DCU,2048,1:;", ALLOCATED: "test1,DCU,2048,1:;"}


# ------------------------------------------------------------------------------------ reservations
def test_reserve_then_schedule_sees_the_usage(clock: Clock) -> None:
    engine = one_card_engine(clock)
    a = make_pod(dcu_container(mem=40000, cores=10), name="a")
    b = make_pod(dcu_container(mem=40000, cores=10), name="b")
    decision = engine.schedule(a)
    assert usage_of(engine, "n1", "DCU-a") == (0, 0, 0)  # schedule alone changes nothing
    engine.reserve(a, decision)
    assert usage_of(engine, "n1", "DCU-a") == (1, 40000, 10)
    assert engine.schedule(b).failed == {"n1": "1/1 CardInsufficientMemory"}
    # Re-scheduling the reserved pod ignores its own reservation.
    assert engine.schedule(a).node == "n1"
    engine.unreserve(a)
    assert usage_of(engine, "n1", "DCU-a") == (0, 0, 0)
    assert engine.schedule(b).node == "n1"


def test_reserved_pod_seen_by_the_informer_books_once_and_releases_when_done(clock: Clock) -> None:
    engine = one_card_engine(clock)
    a = make_pod(dcu_container(mem=3000, cores=10), name="a")
    decision = engine.schedule(a)
    engine.reserve(a, decision)
    placed = make_pod(dcu_container(mem=3000, cores=10), name="a", annotations=dict(decision.annotations))
    engine.upsert_pod(placed)
    assert usage_of(engine, "n1", "DCU-a") == (1, 3000, 10)
    placed["status"] = {"phase": "Succeeded"}
    engine.upsert_pod(placed)
    assert usage_of(engine, "n1", "DCU-a") == (0, 0, 0)


# ------------------------------------------------------------------------------------ node lock (A.6, E.4)
def lock(engine: Engine, pod: dict[str, Any]) -> LockSpec | None:
    return engine.hook.hami_node_lock(backend=engine.backends["DCU"], pod=pod, requests=engine.requests(pod))


def test_app_container_takes_the_shared_node_lock(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    assert lock(engine, make_pod(container("cpu"), dcu_container())) == LockSpec(NODE_LOCK)
    # Upstream LockNode test: the count in requests only also locks.
    assert lock(engine, make_pod(container(requests={DCUNUM: "1"}))) == LockSpec(NODE_LOCK)


def test_no_lock_without_dcu_app_containers(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    assert lock(engine, make_pod(container())) is None
    # HAMi checks regular containers only.
    assert lock(engine, make_pod(container("app"), init=[dcu_container("init")])) is None
    # A dropped request (bad count) does not lock either.
    assert lock(engine, make_pod(container(limits={DCUNUM: "0", DCUMEM: "10"}))) is None
