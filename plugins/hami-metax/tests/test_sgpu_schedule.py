"""MetaX sGPU end to end through the engine: decision annotations, jittery QoS, app classes, lock,
reservations (vendors G.2, A.4, A.6)."""

from __future__ import annotations

import json

import pytest
from metax_testlib import (
    VGPU_NODE,
    Clock,
    InProcess,
    container,
    make_engine,
    make_pod,
    running_pod,
    sdev,
    sgpu_container,
    sgpu_node,
)

from hami_core.engine.facade import Engine
from hami_core.plugins.types import LockSpec
from hami_metax import sgpu as mx

APP = mx.APP_CLASS
QOS = mx.QOS_POLICY
TO_ALLOCATE = mx.SGPU_TO_ALLOCATE
ALLOCATED = mx.SGPU_ALLOCATED


def one_card(clock: Clock, *, qos: str = "best-effort", count: int = 16) -> Engine:
    engine = make_engine(clock=clock)
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-1", qos=qos, count=count)]))
    return engine


# ------------------------------------------------------------------------------------ annotations
def test_decision_annotations(clock: Clock) -> None:
    engine = one_card(clock)
    pod = engine.admit(make_pod(sgpu_container("gpu", mem=4, cores=60), container("sidecar")))
    decision = engine.schedule(pod)
    predicate = decision.annotations.pop(mx.PREDICATE_TIME)
    assert predicate == str(int(clock()) * 1_000_000_000)  # the decision time (engine clock) in nanoseconds
    value = "GPU-1,Metax-SGPU,4096,60:;;"
    assert decision.annotations == {
        VGPU_NODE: "s1", "hami.io/vgpu-time": "1750000000",
        TO_ALLOCATE: value, ALLOCATED: value,
        mx.SGPU_DEVICES_ALLOCATED: '[[{"uuid":"GPU-1","compute":60,"vRam":4096}],[]]',
    }


def test_whole_card_request_books_all_memory_and_cores(clock: Clock) -> None:
    decision = one_card(clock).schedule(make_pod(sgpu_container()))
    assert decision.annotations[ALLOCATED] == "GPU-1,Metax-SGPU,32768,100:;"
    assert decision.annotations[mx.SGPU_DEVICES_ALLOCATED] == '[[{"uuid":"GPU-1","compute":100,"vRam":32768}]]'


def test_online_pod_books_memory_only(clock: Clock) -> None:
    engine = one_card(clock)
    pod = engine.admit(make_pod(sgpu_container(mem=1, cores=40), annotations={APP: "online"}))
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == "GPU-1,Metax-SGPU,1024,0:;"
    assert decision.annotations[mx.SGPU_DEVICES_ALLOCATED] == '[[{"uuid":"GPU-1","vRam":1024}]]'


def test_metax_json_follows_container_positions(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-1"), sdev("GPU-2")]))
    pod = make_pod(sgpu_container("a", count=2, mem=2, cores=0), init=[sgpu_container("i", mem=1, cores=10)])
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == ("GPU-2,Metax-SGPU,1024,10:;"
                                               "GPU-2,Metax-SGPU,2048,0:GPU-1,Metax-SGPU,2048,0:;")
    assert json.loads(decision.annotations[mx.SGPU_DEVICES_ALLOCATED]) == [
        [{"uuid": "GPU-2", "compute": 10, "vRam": 1024}],
        [{"uuid": "GPU-2", "vRam": 2048}, {"uuid": "GPU-1", "vRam": 2048}]]


def test_nothing_fits(clock: Clock) -> None:
    decision = one_card(clock).schedule(make_pod(sgpu_container(mem=64)))
    assert decision.node is None
    assert decision.failed == {"s1": "1/1 CardInsufficientMemory"}
    assert decision.annotations == {}


# ------------------------------------------------------------------------------------ jittery QoS
def test_decision_records_the_expected_qos(clock: Clock) -> None:
    engine = one_card(clock, qos="fixed-share")
    sgpu = engine.backends["Metax-SGPU"]
    engine.schedule(engine.admit(make_pod(sgpu_container(cores=30), name="shared")))
    assert sgpu.jittery.snapshot() == {"GPU-1": "best-effort"}
    engine.schedule(engine.admit(make_pod(sgpu_container(), name="exclusive")))
    assert sgpu.jittery.snapshot() == {"GPU-1": ""}
    engine.schedule(engine.admit(make_pod(sgpu_container(cores=30), name="fixed", annotations={QOS: "fixed-share"})))
    # Registered QoS already matches: nothing new to expect, the old entry stays until a registration.
    assert sgpu.jittery.snapshot() == {"GPU-1": ""}


def test_online_decisions_expect_no_qos_change(clock: Clock) -> None:
    engine = one_card(clock, qos="fixed-share")
    engine.schedule(engine.admit(make_pod(sgpu_container(mem=1), annotations={APP: "online"})))
    assert engine.backends["Metax-SGPU"].jittery.snapshot() == {}


def test_jittery_qos_guards_the_card_until_the_device_plugin_catches_up(clock: Clock) -> None:
    engine = one_card(clock, qos="fixed-share")
    first = engine.admit(make_pod(sgpu_container(mem=4, cores=30), name="first"))
    engine.reserve(first, engine.schedule(first))
    fixed = engine.admit(make_pod(sgpu_container(mem=4, cores=30), name="fixed", annotations={QOS: "fixed-share"}))
    best = engine.admit(make_pod(sgpu_container(mem=4, cores=30), name="best"))
    # The card still registers fixed-share, but the first pod switches it to best-effort.
    assert engine.schedule(fixed).failed == {"s1": "1/1 CardQosPolicyMismatch"}
    assert engine.schedule(best).node == "s1"
    # The device plugin reports the switch: the cache entry goes, the registration rules.
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-1", qos="best-effort")]))
    assert engine.backends["Metax-SGPU"].jittery.snapshot() == {}
    assert engine.schedule(fixed).failed == {"s1": "1/1 CardQosPolicyMismatch"}
    assert engine.schedule(best).node == "s1"


def test_two_containers_share_a_card_after_switching_its_qos(clock: Clock) -> None:
    # The second container sees the QoS the first one gave the card in this cycle (AddResourceUsage).
    engine = one_card(clock, qos="fixed-share")
    pod = engine.admit(make_pod(sgpu_container("a", mem=4, cores=30), sgpu_container("b", mem=4, cores=30)))
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == "GPU-1,Metax-SGPU,4096,30:;GPU-1,Metax-SGPU,4096,30:;"
    assert engine.backends["Metax-SGPU"].jittery.snapshot() == {"GPU-1": "best-effort"}


# ------------------------------------------------------------------------------------ app classes
def classed_engine(clock: Clock) -> Engine:
    """GPU-1 hosts an online pod, GPU-2 a normal (unclassed) one."""
    engine = make_engine(clock=clock)
    engine.upsert_node(sgpu_node("s1", [sdev("GPU-1"), sdev("GPU-2")]))
    engine.upsert_pod(running_pod("online", "s1", "GPU-1,Metax-SGPU,1024,0:;", annotations={APP: "online"}))
    engine.upsert_pod(running_pod("normal", "s1", "GPU-2,Metax-SGPU,1024,10:;", annotations={QOS: "best-effort"}))
    return engine


def test_app_classes_of_running_pods(clock: Clock) -> None:
    engine = classed_engine(clock)
    online = engine.admit(make_pod(sgpu_container(mem=1), name="o", annotations={APP: "online"}))
    offline = engine.admit(make_pod(sgpu_container(mem=1, cores=10), name="f", annotations={APP: "offline"}))
    normal = engine.admit(make_pod(sgpu_container(mem=1, cores=10), name="n"))
    assert engine.schedule(online).annotations[ALLOCATED] == "GPU-1,Metax-SGPU,1024,0:;"
    assert engine.schedule(offline).failed == {"s1": "2/2 CardAppClassMismatch"}
    assert engine.schedule(normal).annotations[ALLOCATED] == "GPU-2,Metax-SGPU,1024,10:;"


def test_a_card_freed_of_its_online_pod_takes_anyone(clock: Clock) -> None:
    engine = classed_engine(clock)
    offline = engine.admit(make_pod(sgpu_container(mem=1, cores=10), name="f", annotations={APP: "offline"}))
    engine.remove_pod(running_pod("online", "s1", "GPU-1,Metax-SGPU,1024,0:;", annotations={APP: "online"}))
    assert engine.schedule(offline).annotations[ALLOCATED] == "GPU-1,Metax-SGPU,1024,10:;"


def test_pod_update_can_change_its_class(clock: Clock) -> None:
    engine = classed_engine(clock)
    normal = engine.admit(make_pod(sgpu_container(mem=1, cores=10), name="n"))
    # The pod on GPU-2 is updated to the offline class: no card hosts normal pods any more.
    engine.upsert_pod(running_pod("normal", "s1", "GPU-2,Metax-SGPU,1024,10:;", annotations={APP: "offline"}))
    assert engine.schedule(normal).failed == {"s1": "2/2 CardAppClassMismatch"}


def test_reserved_decision_counts_for_app_class(clock: Clock) -> None:
    engine = one_card(clock)
    online = engine.admit(make_pod(sgpu_container(mem=1), name="o", annotations={APP: "online"}))
    engine.reserve(online, engine.schedule(online))
    normal = engine.admit(make_pod(sgpu_container(mem=1, cores=10), name="n"))
    assert engine.schedule(normal).failed == {"s1": "1/1 CardAppClassMismatch"}
    # Re-scheduling the online pod ignores its own reservation and class.
    assert engine.schedule(online).node == "s1"
    engine.unreserve(online)
    assert engine.schedule(normal).node == "s1"


def test_memory_cluster_keeps_classes_in_step(clock: Clock) -> None:
    cluster = InProcess(make_engine(clock=clock))
    cluster.add_node(sgpu_node("s1", [sdev("GPU-1")]))
    placed = cluster.submit(make_pod(sgpu_container(mem=1), name="o", annotations={APP: "online"}))
    assert placed.node == "s1"
    assert cluster.submit(make_pod(sgpu_container(mem=1, cores=10), name="n")).decision.failed == {
        "s1": "1/1 CardAppClassMismatch"}
    cluster.delete_pod("uid-o")
    assert cluster.submit(make_pod(sgpu_container(mem=1, cores=10), name="n2")).node == "s1"


# ------------------------------------------------------------------------------------ lock and reservations
def test_lock_only_when_an_app_container_requests_sgpu(clock: Clock) -> None:
    engine = one_card(clock)
    sgpu = engine.backends["Metax-SGPU"]

    def lock(pod: dict) -> LockSpec | None:
        return engine.hook.hami_node_lock(backend=sgpu, pod=pod, requests=engine.requests(pod))

    assert lock(make_pod(sgpu_container())) == LockSpec("hami.io/mutex.lock")
    assert lock(make_pod(container("cpu"), sgpu_container("gpu"))) == LockSpec("hami.io/mutex.lock", owned=True)
    assert lock(make_pod(container("cpu"), init=[sgpu_container("init")])) is None
    assert lock(make_pod(container("cpu"))) is None


def test_split_count_fills_up(clock: Clock) -> None:
    engine = one_card(clock, count=2)
    for name in ("a", "b"):
        pod = engine.admit(make_pod(sgpu_container(mem=1, cores=10), name=name))
        decision = engine.schedule(pod)
        assert decision.node == "s1", decision.failed
        engine.reserve(pod, decision)
    card = engine.nodes["s1"].by_uuid["GPU-1"]
    assert (card.used, card.usedmem, card.usedcores) == (2, 2048, 20)
    assert engine.schedule(engine.admit(make_pod(sgpu_container(mem=1, cores=10), name="c"))).failed == {
        "s1": "1/1 CardTimeSlicingExhausted"}
    # A pod that skipped admission has no QoS: it only shares cards whose QoS is unset.
    assert engine.schedule(make_pod(sgpu_container(mem=1, cores=10), name="d")).failed == {
        "s1": "1/1 CardQosPolicyMismatch"}


def test_exclusive_pod_blocks_the_card(clock: Clock) -> None:
    engine = one_card(clock)
    whole = engine.admit(make_pod(sgpu_container(), name="whole"))
    engine.reserve(whole, engine.schedule(whole))
    assert engine.schedule(engine.admit(make_pod(sgpu_container(mem=0, cores=0), name="zero"))).failed == {
        "s1": "1/1 CardInsufficientMemory"}


def test_running_pod_books_its_share(clock: Clock) -> None:
    engine = one_card(clock)
    engine.upsert_pod(running_pod("old", "s1", "GPU-1,Metax-SGPU,30000,50:;", annotations={QOS: "best-effort"}))
    card = engine.nodes["s1"].by_uuid["GPU-1"]
    assert (card.used, card.usedmem, card.usedcores) == (1, 30000, 50)
    assert engine.schedule(engine.admit(make_pod(sgpu_container(mem=3, cores=10)))).failed == {
        "s1": "1/1 CardInsufficientMemory"}
    assert engine.schedule(engine.admit(make_pod(sgpu_container(mem=2, cores=10)))).node == "s1"


# HAMi's decoder reads a negative (in int32) as written; a non-number or an out-of-range one is undecodable.
@pytest.mark.parametrize("value", ["GPU-1,Metax-SGPU,1024:;", "GPU-1,Metax-SGPU,x5,10:;",
                                   "GPU-1,Metax-SGPU,4294967296,10:;"])
def test_undecodable_allocation_quarantines_the_node(clock: Clock, value: str) -> None:
    engine = one_card(clock)
    engine.upsert_pod(running_pod("broken", "s1", value))
    decision = engine.schedule(make_pod(sgpu_container(mem=1)))
    assert decision.failed["s1"].startswith("node quarantined: pod default/broken has an undecodable allocation: "
                                            "hami.io/metax-sgpu-devices-allocated: ")
