"""End to end through the engine: decisions, the Biren allocation annotations, usage, scores and the node lock."""

from __future__ import annotations

import pytest
from biren_testlib import (
    ALLOCATED,
    GPU,
    GPU_POLICY,
    NODE_LOCK,
    T0,
    TO_ALLOCATE,
    VGPU_NODE,
    Clock,
    biren_node,
    container,
    device,
    gpu_container,
    make_engine,
    make_node,
    make_pod,
    running_pod,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice, LockSpec
from hami_core.wire import keys


def used(engine: Engine, node: str, uuid: str) -> tuple[int, int, int]:
    d = engine.nodes[node].by_uuid[uuid]
    return d.used, d.usedmem, d.usedcores


def test_one_card_gets_both_annotations(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(biren_node("n1"))
    decision = engine.schedule(engine.admit(make_pod(gpu_container())))
    value = "n1-card_1,Biren,0,0:;"
    assert decision.annotations == {VGPU_NODE: "n1", keys.VGPU_TIME: str(int(T0)), TO_ALLOCATE: value,
                                    ALLOCATED: value}
    assert decision.devices == {"Biren": ((ContainerDevice("n1-card_1", "Biren", 0, 0, idx=1),),)}


def test_cards_are_used_up_one_task_each(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(biren_node("n1", n=3))
    two = make_pod(gpu_container(num=2), name="two")
    decision = engine.schedule(two)
    assert decision.annotations[ALLOCATED] == "n1-card_2,Biren,0,0:n1-card_1,Biren,0,0:;"
    engine.reserve(two, decision)
    assert used(engine, "n1", "n1-card_2") == (1, 0, 0)
    assert engine.schedule(make_pod(gpu_container(num=2), name="more")).failed == {
        "n1": "1/3 AllocatedCardsInsufficientRequest, 2/3 CardTimeSlicingExhausted"}
    one = make_pod(gpu_container(), name="one")
    assert engine.schedule(one).annotations[ALLOCATED] == "n1-card_0,Biren,0,0:;"


def test_svi_instances_are_placed_like_cards(clock: Clock) -> None:
    # A card in SVI-2 mode served as birentech.com/1-2-gpu: its two instances are two devices.
    engine = make_engine({"resourceCountName": "birentech.com/1-2-gpu"}, clock=clock)
    engine.upsert_node(make_node("svi", [device("card_0", devmem=32512), device("card_1", devmem=32512)]))
    pod = make_pod(container("c", limits={"birentech.com/1-2-gpu": "2"}))
    assert engine.schedule(pod).annotations[ALLOCATED] == "card_1,Biren,0,0:card_0,Biren,0,0:;"


def test_container_positions_are_kept(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(biren_node("n1", n=4))
    pod = make_pod(container("sidecar"), gpu_container("main"), init=[gpu_container("init")])
    decision = engine.schedule(pod)
    # The init container has exited when the app starts, so the app container may take the same card.
    assert decision.annotations[ALLOCATED] == "n1-card_3,Biren,0,0:;;n1-card_3,Biren,0,0:;"
    assert decision.annotations[TO_ALLOCATE] == decision.annotations[ALLOCATED]


def test_more_cards_than_the_node_has(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(biren_node("n1", n=1))
    assert engine.schedule(make_pod(gpu_container(num=2))).failed == {"n1": "NodeInsufficientDevice"}


def test_mutex_policy_through_the_engine(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", [device("shared", count=4), device("idle", index=1, count=4)]))
    engine.upsert_pod(running_pod("busy", "n1", "idle,Biren,0,0:;"))
    pod = make_pod(gpu_container(), annotations={GPU_POLICY: "mutex"})
    assert engine.schedule(pod).annotations[ALLOCATED] == "shared,Biren,0,0:;"
    engine.upsert_pod(running_pod("busy2", "n1", "shared,Biren,0,0:;"))
    assert engine.schedule(pod).failed == {"n1": "2/2 ExclusiveDeviceAllocateConflict"}


def test_node_policy_uses_hamis_default_score(clock: Clock) -> None:
    # ScoreNode adds 0; the default score counts used slots (memory and cores are never booked).
    engine = make_engine(clock=clock)
    engine.upsert_node(biren_node("idle", n=2))
    engine.upsert_node(biren_node("busy", n=2))
    engine.upsert_pod(running_pod("x", "busy", "busy-card_0,Biren,0,0:;"))
    for policy, node in (("binpack", "busy"), ("spread", "idle")):
        decision = engine.schedule(make_pod(gpu_container(), annotations={keys.NODE_SCHEDULER_POLICY: policy}))
        assert decision.node == node
        assert decision.scores == {"busy": pytest.approx(5.0), "idle": 0.0}


def test_usage_is_rebuilt_from_the_allocated_annotation_and_released(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(biren_node("n1"))
    pod = running_pod("p", "n1", "n1-card_0,Biren,0,0:n1-card_1,Biren,0,0:;")
    engine.upsert_pod(pod)
    assert used(engine, "n1", "n1-card_0") == used(engine, "n1", "n1-card_1") == (1, 0, 0)
    engine.remove_pod(pod)
    assert used(engine, "n1", "n1-card_0") == (0, 0, 0)


def test_lock_for_app_containers_only(clock: Clock) -> None:
    engine = make_engine(clock=clock)

    def lock(pod: dict) -> LockSpec | None:
        return engine.hook.hami_node_lock(backend=engine.backends["Biren"], pod=pod, requests=engine.requests(pod))

    assert lock(make_pod(container("cpu"), gpu_container())) == LockSpec(NODE_LOCK)
    assert lock(make_pod(container(requests={GPU: "1"}))) == LockSpec(NODE_LOCK)
    assert lock(make_pod(container("app"), init=[gpu_container("init")])) is None
    assert lock(make_pod(container(limits={GPU: "0"}))) is None


def test_cores_booked_beyond_a_device_do_not_block_it(clock: Clock) -> None:
    # A pod annotated by hand with 150 cores on a two-slot device: HAMi's Biren fit reads no cores and places a second
    # task there (which is why the backend does not declare standard_capacity).
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n1", [device("a", count=2)]))
    engine.upsert_pod(running_pod("odd", "n1", "a,Biren,0,150:;"))
    assert used(engine, "n1", "a") == (1, 0, 150)
    assert engine.schedule(make_pod(gpu_container())).annotations[ALLOCATED] == "a,Biren,0,0:;"
