"""End to end through the engine: decision annotations, usage from allocated pods, reservations, the node
lock and node scoring (vendors A.4, A.6, A.9, F.2, F.3)."""

from __future__ import annotations

from typing import Any

import pytest
from iluvatar_testlib import (
    ALLOCATED,
    T0,
    TO_ALLOCATE,
    VGPU_NODE,
    Clock,
    card,
    container,
    csv,
    ilu_container,
    make_engine,
    make_node,
    make_pod,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice, LockSpec

BI_REGISTER = "hami.io/node-BI-V150-register"
BI_ALLOCATED = "hami.io/BI-V150-devices-allocated"
BI_TO_ALLOCATE = "hami.io/BI-V150-devices-to-allocate"


def one_card_engine(clock: Clock, uuid: str = "ilu-0", devmem: int = 8192, count: int = 10) -> Engine:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", csv(card(uuid, devmem=devmem, count=count))))
    return engine


def usage_of(engine: Engine, node: str, uuid: str) -> tuple[int, int, int]:
    d = engine.nodes[node].by_uuid[uuid]
    return d.used, d.usedmem, d.usedcores


# ------------------------------------------------------------------------------------ decision annotations
def test_decision_annotations_exactly(clock: Clock) -> None:
    # 64 units = 16384 MiB: more than an 8192 MiB card has.
    assert one_card_engine(clock).schedule(make_pod(ilu_container(mem=64, cores=50))).failed == {
        "n1": "1/1 CardInsufficientMemory"}
    value = "ilu-0,MR-V100,16384,50:;"
    decision = one_card_engine(clock, devmem=32768).schedule(make_pod(ilu_container(mem=64, cores=50)))
    assert decision.node == "n1"
    assert decision.annotations == {VGPU_NODE: "n1", "hami.io/vgpu-time": str(int(T0)), TO_ALLOCATE: value,
                                    ALLOCATED: value}
    assert decision.devices == {"MR-V100": ((ContainerDevice("ilu-0", "MR-V100", 16384, 50, idx=0),),)}


def test_whole_card_memory_when_no_memory_is_asked(clock: Clock) -> None:
    decision = one_card_engine(clock).schedule(make_pod(ilu_container()))
    assert decision.annotations[ALLOCATED] == "ilu-0,MR-V100,8192,0:;"


def test_container_without_iluvatar_gets_an_empty_entry(clock: Clock) -> None:
    pod = make_pod(container("sidecar"), ilu_container("gpu", mem=4), container("tail"),
                   init=[container("init")])
    decision = one_card_engine(clock).schedule(pod)
    assert decision.annotations[ALLOCATED] == ";;ilu-0,MR-V100,1024,0:;;"
    assert decision.annotations[TO_ALLOCATE] == decision.annotations[ALLOCATED]


def test_two_containers_share_a_card_and_do_not_overbook_it(clock: Clock) -> None:
    pod = make_pod(ilu_container("a", mem=12, cores=30), ilu_container("b", mem=20, cores=70))
    decision = one_card_engine(clock).schedule(pod)
    assert decision.annotations[ALLOCATED] == "ilu-0,MR-V100,3072,30:;ilu-0,MR-V100,5120,70:;"
    pod = make_pod(ilu_container("a", mem=12), ilu_container("b", mem=21))
    assert one_card_engine(clock).schedule(pod).failed == {"n1": "1/1 CardInsufficientMemory"}


def test_two_chips_in_one_pod_write_two_pairs(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", {"hami.io/node-MR-V100-register": csv(card("mr-0")),
                                        BI_REGISTER: csv(card("bi-0", type="BI-V150", devmem=32768))}))
    pod = make_pod(ilu_container("a", mem=4), ilu_container("b", mem=8, chip="BI-V150"))
    decision = engine.schedule(pod)
    assert decision.node == "n1"
    assert {k: v for k, v in decision.annotations.items() if k.startswith("hami.io/") and "devices" in k} == {
        TO_ALLOCATE: "mr-0,MR-V100,1024,0:;;", ALLOCATED: "mr-0,MR-V100,1024,0:;;",
        BI_TO_ALLOCATE: ";bi-0,BI-V150,2048,0:;", BI_ALLOCATED: ";bi-0,BI-V150,2048,0:;"}


def test_chip_not_on_the_node(clock: Clock) -> None:
    engine = one_card_engine(clock)
    decision = engine.schedule(make_pod(ilu_container(mem=4, chip="BI-V150")))
    assert decision.node is None
    assert decision.failed == {"n1": "NodeInsufficientDevice"}


def test_pod_without_iluvatar_is_not_ours(clock: Clock) -> None:
    decision = one_card_engine(clock).schedule(make_pod(container()))
    assert decision.skipped and decision.node is None


# ------------------------------------------------------------------------------------ usage from allocated pods
def test_spec_allocation_vector_is_booked(clock: Clock) -> None:
    # F.2's example value: a device booked with 0 MiB and 0 cores still takes a slot.
    engine = one_card_engine(clock, uuid="k8s-gpu-iluvatar-0", count=1)
    engine.upsert_pod(running_pod("old", "n1", "k8s-gpu-iluvatar-0,MR-V100,0,0:;"))
    assert usage_of(engine, "n1", "k8s-gpu-iluvatar-0") == (1, 0, 0)
    assert engine.schedule(make_pod(ilu_container(mem=1))).failed == {"n1": "1/1 CardTimeSlicingExhausted"}
    engine.remove_pod(running_pod("old", "n1", ""))
    assert usage_of(engine, "n1", "k8s-gpu-iluvatar-0") == (0, 0, 0)


def test_allocations_of_each_chip_are_read_from_their_own_key(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", {"hami.io/node-MR-V100-register": csv(card("mr-0")),
                                        BI_REGISTER: csv(card("bi-0", type="BI-V150"))}))
    engine.upsert_pod(running_pod("old", "n1", {ALLOCATED: "mr-0,MR-V100,1024,10:;;",
                                                BI_ALLOCATED: ";bi-0,BI-V150,2048,20:;"}, containers=2))
    assert usage_of(engine, "n1", "mr-0") == (1, 1024, 10)
    assert usage_of(engine, "n1", "bi-0") == (1, 2048, 20)


def test_undecodable_allocation_quarantines_the_node(clock: Clock) -> None:
    engine = one_card_engine(clock)
    engine.upsert_pod(running_pod("broken", "n1", "ilu-0,MR-V100,lots,0:;"))
    decision = engine.schedule(make_pod(ilu_container(mem=1)))
    assert decision.node is None
    assert "undecodable allocation" in decision.failed["n1"]
    assert ALLOCATED in decision.failed["n1"]


# ------------------------------------------------------------------------------------ reservations
def test_reserve_then_schedule_sees_the_usage(clock: Clock) -> None:
    engine = one_card_engine(clock)
    a = make_pod(ilu_container(mem=20, cores=10), name="a")
    b = make_pod(ilu_container(mem=20, cores=10), name="b")
    decision = engine.schedule(a)
    assert usage_of(engine, "n1", "ilu-0") == (0, 0, 0)
    engine.reserve(a, decision)
    assert usage_of(engine, "n1", "ilu-0") == (1, 5120, 10)
    assert engine.schedule(b).failed == {"n1": "1/1 CardInsufficientMemory"}
    engine.unreserve(a)
    assert usage_of(engine, "n1", "ilu-0") == (0, 0, 0)
    assert engine.schedule(b).node == "n1"


def test_reserve_then_pod_update_books_once(clock: Clock) -> None:
    engine = one_card_engine(clock)
    a = make_pod(ilu_container(mem=8, cores=10), name="a")
    decision = engine.schedule(a)
    engine.reserve(a, decision)
    placed = make_pod(ilu_container(mem=8, cores=10), name="a", annotations=dict(decision.annotations))
    engine.upsert_pod(placed)
    assert usage_of(engine, "n1", "ilu-0") == (1, 2048, 10)
    placed["status"] = {"phase": "Succeeded"}
    engine.upsert_pod(placed)
    assert usage_of(engine, "n1", "ilu-0") == (0, 0, 0)


def test_split_count_fills_up(clock: Clock) -> None:
    engine = one_card_engine(clock, count=3)
    for i in range(3):
        pod = make_pod(ilu_container(mem=1), name=f"p{i}")
        decision = engine.schedule(pod)
        assert decision.node == "n1", decision.failed
        engine.reserve(pod, decision)
    assert engine.schedule(make_pod(ilu_container(mem=1), name="p3")).failed == {
        "n1": "1/1 CardTimeSlicingExhausted"}


def test_whole_memory_pod_blocks_the_card(clock: Clock) -> None:
    engine = one_card_engine(clock)
    whole = engine.admit(make_pod(ilu_container(), name="whole"))
    decision = engine.schedule(whole)
    engine.reserve(whole, decision)
    # Cores stay shareable (default 0), memory does not.
    assert usage_of(engine, "n1", "ilu-0") == (1, 8192, 0)
    assert engine.schedule(make_pod(ilu_container(mem=1), name="small")).failed == {
        "n1": "1/1 CardInsufficientMemory"}


def test_init_and_app_containers_count_peak_plus_sum(clock: Clock) -> None:
    engine = one_card_engine(clock, devmem=32768)
    pod = make_pod(ilu_container("c1", mem=16, cores=20), ilu_container("c2", mem=12, cores=10),
                   init=[ilu_container("c0", mem=20, cores=20)], name="mixed")
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == (
        "ilu-0,MR-V100,5120,20:;ilu-0,MR-V100,4096,20:;ilu-0,MR-V100,3072,10:;")
    engine.reserve(pod, decision)
    assert usage_of(engine, "n1", "ilu-0") == (2, 7168, 30)


# ------------------------------------------------------------------------------------ node lock (A.6)
def lock(engine: Engine, backend: str, pod: dict[str, Any]) -> LockSpec | None:
    return engine.hook.hami_node_lock(backend=engine.backends[backend], pod=pod, requests=engine.requests(pod))


def test_app_container_takes_the_shared_lock() -> None:
    engine = make_engine()
    pod = make_pod(ilu_container(mem=4))
    assert lock(engine, "MR-V100", pod) == LockSpec("hami.io/mutex.lock", owned=True, expiry_s=None)


def test_no_lock_for_a_chip_the_pod_does_not_use() -> None:
    engine = make_engine()
    pod = make_pod(ilu_container(mem=4))
    assert lock(engine, "BI-V150", pod) is None
    assert lock(engine, "MR-V100", make_pod(container())) is None


def test_init_only_pod_takes_no_lock() -> None:
    # HAMi's LockNode looks at p.Spec.Containers only.
    engine = make_engine()
    pod = make_pod(container("app"), init=[ilu_container("init", mem=4)])
    assert lock(engine, "MR-V100", pod) is None


def test_dropped_request_takes_no_lock() -> None:
    engine = make_engine()
    assert lock(engine, "MR-V100", make_pod(ilu_container(mem="16Gi"))) is None


def test_two_chips_share_one_lock_annotation() -> None:
    engine = make_engine()
    pod = make_pod(ilu_container("a", mem=4), ilu_container("b", mem=4, chip="BI-V150"))
    assert lock(engine, "MR-V100", pod) == lock(engine, "BI-V150", pod) == LockSpec("hami.io/mutex.lock")


# ------------------------------------------------------------------------------------ node score (A.9)
def busy_cluster(clock: Clock) -> Engine:
    engine = make_engine(clock=clock)
    for name in ("n1", "n2"):
        engine.upsert_node(make_node(name, csv(card(f"{name}-0"), card(f"{name}-1", index=1))))
    engine.upsert_pod(running_pod("busy", "n2", "n2-0,MR-V100,4096,50:;"))
    return engine


@pytest.mark.parametrize(("policy", "node"), [("binpack", "n2"), ("spread", "n1")])
def test_iluvatar_adds_nothing_to_the_default_node_score(clock: Clock, policy: str, node: str) -> None:
    pod = make_pod(ilu_container(mem=4), annotations={"hami.io/node-scheduler-policy": policy})
    decision = busy_cluster(clock).schedule(pod)
    assert decision.node == node
    # 10 x (1/20 + 50/200 + 4096/16384) on n2, and 0 on the idle n1: ScoreNode is 0.
    assert decision.scores == {"n1": pytest.approx(0.0), "n2": pytest.approx(5.5)}
