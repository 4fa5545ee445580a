"""End to end through the engine: decisions, pod annotations, usage, scores and locks
(vendors A.4, A.6, A.9, C.3, C.7, C.8 and the C.9 PatchAnnotations vectors)."""

from __future__ import annotations

import json

import pytest
from ascend_testlib import (
    HAMI_CORE,
    NODE_POLICY,
    T0,
    allocated_key,
    chips,
    container,
    make_engine,
    make_node,
    make_pod,
    npu_container,
    reg,
    running_pod,
    to_allocate_key,
)

from hami_ascend.backend import NODE_VNPU_CORE, PREDICATE_TIME
from hami_core.plugins.types import ContainerDevice, LockSpec

A = "Ascend910A"
B3 = "Ascend910B3"
C = "Ascend910C"


def merged(answers: list) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in reversed(answers):  # registration order, as the engine applies them
        out.update(part or {})
    return out


# ------------------------------------------------------------------------------------ PatchAnnotations
@pytest.mark.parametrize(("annotations", "runtime"), [
    (None, '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]'),
    (HAMI_CORE, '[{"UUID":"device-0","memory":8738,"core":1}]'),
])
def test_patch_annotations_vectors(annotations, runtime: str) -> None:
    engine = make_engine()
    pod = make_pod(container(), annotations=annotations)
    devices = ((ContainerDevice("device-0", "Ascend", 8738, 1),),)
    out = merged(engine.hook.hami_allocation_annotations(backend=engine.backends[A], pod=pod, devices=devices,
                                                         node="n", now=T0 + 0.75))
    assert out == {PREDICATE_TIME: "1750000000","hami.io/Ascend910A-devices-to-allocate": "device-0,Ascend,8738,1:;",
                   "hami.io/Ascend910A-devices-allocated": "device-0,Ascend,8738,1:;",
                   "huawei.com/Ascend910A": runtime}


def test_zero_cores_and_whole_cards_leave_keys_out() -> None:
    engine = make_engine()
    devices = ((ContainerDevice("device-0", A, 8738, 0), ContainerDevice("device-1", A, 32768, 0)),)
    out = merged(engine.hook.hami_allocation_annotations(backend=engine.backends[A], pod=make_pod(container()),
                                                         devices=devices, node="n", now=T0))
    assert out["huawei.com/Ascend910A"] == ('[{"UUID":"device-0","temp":"vir08","memory":8738},'
                                           '{"UUID":"device-1","memory":32768}]')


# ------------------------------------------------------------------------------------ decisions
def b3_node(name: str = "n", n: int = 1, **annotations: str) -> dict:
    return make_node(name, {B3: chips(B3, n, devmem=65536, devcore=20)}, annotations=annotations)


def test_template_pod_decision_annotations(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(b3_node())
    pod = engine.admit(make_pod(npu_container(B3, 1, 10000)))
    clock.now += 0.5
    decision = engine.schedule(pod)
    assert decision.node == "n"
    assert decision.annotations == {
        "hami.io/vgpu-node": "n",
        "hami.io/vgpu-time": "1750000000",
        PREDICATE_TIME: "1750000000",
        to_allocate_key(B3): "npu-0,Ascend910B3,16384,0:;",
        allocated_key(B3): "npu-0,Ascend910B3,16384,0:;",
        "huawei.com/Ascend910B3": '[{"UUID":"npu-0","temp":"vir05_1c_16g","memory":16384}]',
    }


def test_containers_keep_their_positions(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(b3_node(n=2))
    pod = engine.admit(make_pod(container("cpu"), npu_container(B3, 2, name="npu"), container("tail")))
    decision = engine.schedule(pod)
    value = ";npu-1,Ascend910B3,65536,0:npu-0,Ascend910B3,65536,0:;;"
    assert decision.annotations[allocated_key(B3)] == decision.annotations[to_allocate_key(B3)] == value
    assert decision.annotations["huawei.com/Ascend910B3"] == (
        '[{"UUID":"npu-1","memory":65536},{"UUID":"npu-0","memory":65536}]')


def test_later_containers_see_the_earlier_ones_usage(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(b3_node(n=2))
    half = [npu_container(B3, 1, 32768, name=f"c{i}") for i in range(4)]
    decision = engine.schedule(engine.admit(make_pod(*half)))
    # spread: each container takes the least used chip (ties: the last registered one).
    assert decision.annotations[allocated_key(B3)] == (
        "npu-1,Ascend910B3,32768,0:;npu-0,Ascend910B3,32768,0:;npu-1,Ascend910B3,32768,0:;"
        "npu-0,Ascend910B3,32768,0:;")
    assert json.loads(decision.annotations["huawei.com/Ascend910B3"]) == [
        {"UUID": f"npu-{i}", "temp": "vir10_3c_32g", "memory": 32768} for i in (1, 0, 1, 0)]
    too_many = engine.schedule(engine.admit(make_pod(*half, npu_container(B3, 1, 32768, name="c4"))))
    assert too_many.failed == {"n": "2/2 CardInsufficientMemory"}


def test_hami_core_pod_needs_a_hami_core_node(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(b3_node("plain", n=2))
    engine.upsert_node(b3_node("soft", n=2, **{NODE_VNPU_CORE: "true"}))
    pod = engine.admit(make_pod(npu_container(B3, 1, 15360, cores=20), annotations=HAMI_CORE))
    decision = engine.schedule(pod)
    assert decision.node == "soft"
    assert decision.failed == {"plain": "1/2 ModeNotFit"}
    uuid = decision.devices[B3][0][0].uuid
    assert decision.annotations[allocated_key(B3)] == f"{uuid},Ascend910B3,15360,20:;"
    assert decision.annotations["huawei.com/Ascend910B3"] == f'[{{"UUID":"{uuid}","memory":15360,"core":20}}]'


def test_running_pods_are_booked(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", {A: [reg("npu-0", count=4, devmem=32768, devcore=30)]}))
    engine.upsert_pod(running_pod("old", "n", A, "npu-0,Ascend910A,17476,0:;"))
    assert engine.schedule(engine.admit(make_pod(npu_container(A, 1, 17476)))).failed == {
        "n": "1/1 CardInsufficientMemory"}
    assert engine.schedule(engine.admit(make_pod(npu_container(A, 1, 8738)))).node == "n"
    engine.remove_pod(running_pod("old", "n", A, "npu-0,Ascend910A,17476,0:;"))
    assert engine.schedule(engine.admit(make_pod(npu_container(A, 1, 17476)))).node == "n"


def test_reserve_then_schedule(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", {A: [reg("npu-0", count=4, devmem=32768, devcore=30)]}))
    first = engine.admit(make_pod(npu_container(A, 1), name="first"))
    decision = engine.schedule(first)
    assert decision.annotations[allocated_key(A)] == "npu-0,Ascend910A,32768,0:;"
    engine.reserve(first, decision)
    second = engine.admit(make_pod(npu_container(A, 1, 2184), name="second"))
    assert engine.schedule(second).failed == {"n": "1/1 CardInsufficientMemory"}
    engine.unreserve(first)
    assert engine.schedule(second).node == "n"


def test_split_count_limits_tasks_per_chip(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", {A: [reg("npu-0", count=2, devmem=32768, devcore=30)]}))
    for i in range(2):
        pod = engine.admit(make_pod(npu_container(A, 1, 2184), name=f"p{i}"))
        engine.reserve(pod, engine.schedule(pod))
    third = engine.admit(make_pod(npu_container(A, 1, 2184), name="p2"))
    assert engine.schedule(third).failed == {"n": "1/1 CardTimeSlicingExhausted"}


def test_910c_module_pairs_through_the_engine(clock) -> None:
    engine = make_engine(clock=clock)
    devices = [reg(f"c-{i}", index=i, count=1, devmem=65536, devcore=20, type=C, network=0) for i in (0, 2, 3, 5)]
    engine.upsert_node(make_node("n", {C: devices}))
    pod = engine.admit(make_pod(npu_container(C, 1)))
    decision = engine.schedule(pod)
    assert decision.node == "n"
    assert sorted(d.uuid for d in decision.devices[C][0]) == ["c-2", "c-3"]
    four = engine.schedule(engine.admit(make_pod(npu_container(C, 4))))
    assert four.failed == {"n": "2/4 AllocatedCardsInsufficientRequest"}


def test_two_chips_in_one_pod(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", {A: [reg("a-0")], "Ascend310P": [reg("p-0", type="Ascend310P", devmem=21527,
                                                                          devcore=8)]}))
    pod = engine.admit(make_pod(npu_container(A, 1, 8738, name="a"), npu_container("Ascend310P", 1, 6000, name="p")))
    annos = engine.schedule(pod).annotations
    assert annos[allocated_key(A)] == "a-0,Ascend910A,8738,0:;;"
    assert annos[allocated_key("Ascend310P")] == ";p-0,Ascend310P,6144,0:;"
    assert annos["huawei.com/Ascend910A"] == '[{"UUID":"a-0","temp":"vir08","memory":8738}]'
    assert annos["huawei.com/Ascend310P"] == '[{"UUID":"p-0","temp":"vir02","memory":6144}]'


# ------------------------------------------------------------------------------------ node score
def topology_engine(clock) -> object:
    """Two 8-chip 910B3 nodes, chips 0-3 on NetworkID 0 and 4-7 on 1, four chips busy on each:
    ``aligned`` has its free chips on one network, ``split`` two on each."""
    engine = make_engine(clock=clock)
    for name, busy in (("aligned", (4, 5, 6, 7)), ("split", (0, 1, 4, 5))):
        engine.upsert_node(make_node(name, {B3: chips(B3, 8, devmem=65536, devcore=20, network=True)}))
        for i in busy:
            engine.upsert_pod(running_pod(f"{name}-{i}", name, B3, f"npu-{i},Ascend910B3,65536,0:;"))
    return engine


def test_topology_score_prefers_one_network_under_binpack(clock) -> None:
    engine = topology_engine(clock)
    decision = engine.schedule(engine.admit(make_pod(npu_container(B3, 4))))
    assert decision.node == "aligned"
    # Same default score; ScoreNode adds 10 x 4/4 on aligned and 10 x 2/4 on split.
    assert decision.scores["aligned"] - decision.scores["split"] == pytest.approx(5.0)
    assert sorted(d.uuid for d in decision.devices[B3][0]) == ["npu-0", "npu-1", "npu-2", "npu-3"]


def test_topology_score_is_added_raw_so_spread_prefers_the_lower(clock) -> None:
    # HAMi adds Ascend's ScoreNode as is (not policy neutral): spread then picks the lower total.
    engine = topology_engine(clock)
    decision = engine.schedule(engine.admit(make_pod(npu_container(B3, 4), annotations={NODE_POLICY: "spread"})))
    assert decision.node == "split"
    assert decision.scores["aligned"] - decision.scores["split"] == pytest.approx(5.0)


def test_no_topology_score_without_network_ids(clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("a", {B3: chips(B3, 2, devmem=65536, devcore=20)}))
    engine.upsert_node(make_node("b", {"Ascend310P": chips("Ascend310P", 2, devmem=21527, devcore=8,
                                                           network=True)}))
    assert engine.schedule(engine.admit(make_pod(npu_container(B3, 2)))).scores == {"a": 0.0}
    assert engine.schedule(engine.admit(make_pod(npu_container("Ascend310P", 2)))).scores == {"b": 0.0}


# ------------------------------------------------------------------------------------ node lock
def test_lock_when_an_app_container_requests_the_chip() -> None:
    engine = make_engine()
    backend = engine.backends[A]
    pod = make_pod(container("cpu"), npu_container(A, 1, 8738))
    assert engine.hook.hami_node_lock(backend=backend, pod=pod, requests=engine.requests(pod)) == LockSpec(
        "hami.io/mutex.lock")
    init_only = make_pod(container("cpu"), init=[npu_container(A, 1, 8738, name="init")])
    assert engine.hook.hami_node_lock(backend=backend, pod=init_only, requests=engine.requests(init_only)) is None
    other = make_pod(npu_container(B3, 1))
    assert engine.hook.hami_node_lock(backend=backend, pod=other, requests=engine.requests(other)) is None
