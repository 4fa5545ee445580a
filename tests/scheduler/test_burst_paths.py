"""What the real control plane's burst (``make bench-e2e``) changed in the scheduler, pinned with fast tests:
pods in flight per node (``--node-inflight-limit``), the bind phase riding on the Binding, a node lock judged afresh
when only a cached copy shows it, node watch events that change nothing registration reads, and the optional
Normal events."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.plugins.types import LockSpec
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.inflight import InFlight
from hami_core.scheduler.nodelock import LockContention, NodeLocker
from hami_core.scheduler.sync import Sync
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock

NODES = ["n1", "n2", "n3"]


class Calls(MemoryCluster):
    """Counts the writes a bind makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pod_patches: list[Any] = []
        self.bindings: list[tuple[str, Any]] = []

    def patch_pod(self, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        self.pod_patches.append(patch)
        return super().patch_pod(namespace, name, patch)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        self.bindings.append((name, annotations))
        super().bind(namespace, name, uid, node, annotations)


def _extender(cluster: MemoryCluster, **kw: Any) -> Extender:
    engine = make_engine()
    for node in cluster.list_nodes():
        engine.upsert_node(node)
    return Extender(engine, cluster, **kw)


def _filter(ext: Extender, cluster: MemoryCluster, name: str) -> str:
    pod = cluster.add_pod(gpu_pod(name, mem=1000, cores=1)) if name not in {
        p["metadata"]["name"] for p in cluster.list_pods()} else cluster.get_pod("default", name)
    [node] = ext.filter({"Pod": pod, "NodeNames": NODES})["NodeNames"]
    return str(node)


def test_binpack_burst_fills_the_best_node_up_to_the_limit_then_the_next() -> None:
    cluster = MemoryCluster(nodes=[nvidia_node(n) for n in NODES])
    ext = _extender(cluster, inflight_limit=2)
    placed = [_filter(ext, cluster, f"p{i}") for i in range(5)]
    # binpack: two in flight on the first node, then the next best, and so on; each pod's node is still its
    # policy's best among nodes that can take one now
    assert placed[0] == placed[1] and placed[2] == placed[3] != placed[0] and placed[4] not in placed[:4]
    # once a pod is through Allocate its node takes pods again
    done = cluster.get_pod("default", "p0")
    done["metadata"].setdefault("annotations", {})[keys.BIND_PHASE] = keys.BIND_PHASE_SUCCESS
    ext.on_pod_event("MODIFIED", done)
    assert _filter(ext, cluster, "p5") == placed[0]


def test_limit_zero_places_as_hami_and_a_busy_node_is_used_when_nothing_else_fits() -> None:
    cluster = MemoryCluster(nodes=[nvidia_node(n) for n in NODES])
    hami = _extender(cluster, inflight_limit=0)
    assert len({_filter(hami, cluster, f"h{i}") for i in range(4)}) == 1  # binpack, whatever is in flight
    only = MemoryCluster(nodes=[nvidia_node("n1")])
    ext = _extender(only, inflight_limit=1)
    pods = [only.add_pod(gpu_pod(f"q{i}", mem=1000)) for i in range(3)]
    assert [ext.filter({"Pod": p, "NodeNames": ["n1"]})["NodeNames"] for p in pods] == [["n1"]] * 3


def test_in_flight_entries_expire_and_go_with_their_pod() -> None:
    now = [1000.0]
    inflight = InFlight(1, lambda: now[0], ttl_s=60)
    a, b = gpu_pod("a"), gpu_pod("b")
    inflight.add(a, "n1")
    assert inflight.busy(b) == {"n1"} and inflight.busy(a) == set()  # a pod is not in its own way
    inflight.add(a, "n2")  # filtered again, elsewhere
    assert inflight.busy(b) == {"n2"}
    inflight.on_pod_event("DELETED", a)
    assert not inflight.busy(b) and len(inflight) == 0
    inflight.add(a, "n1")
    now[0] += 61  # its bind never came
    assert not inflight.busy(b) and len(inflight) == 0


def test_bind_phase_rides_on_the_binding_and_the_filtered_pod_is_not_read_again() -> None:
    cluster = Calls(nodes=[nvidia_node("n1")])
    ext = _extender(cluster)
    pod = cluster.add_pod(gpu_pod("p", mem=1000))
    ext.filter({"Pod": pod, "NodeNames": ["n1"]})
    reads: list[str] = []
    original = cluster.get_pod
    cluster.get_pod = lambda ns, name: reads.append(name) or original(ns, name)  # type: ignore[method-assign]
    patches_before = len(cluster.pod_patches)
    assert ext.bind({"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                     "Node": "n1"}) == {"Error": ""}
    assert len(cluster.pod_patches) == patches_before  # no bind-phase patch: one write, the Binding
    assert reads == ["p"]  # once, as of the lock (a cluster with a watch cache: none)
    [(name, annos)] = cluster.bindings
    assert name == "p" and annos[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING and annos[keys.BIND_TIME].isdigit()
    stored = original("default", "p")
    assert stored["spec"]["nodeName"] == "n1" and stored["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"


def test_a_cached_node_showing_our_own_lock_is_read_again() -> None:
    """A watch cache's copy can show this pod's lock after it was released and taken by another pod; trusting it
    let two pods bind under one lock (found by the two-replica chaos soak)."""
    cluster = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod("p"), gpu_pod("q")])
    locker = NodeLocker(cluster)
    spec = LockSpec(keys.NODE_LOCK)
    locker.acquire("n", gpu_pod("p"), spec)
    stale = cluster.get_node("n")  # shows p's lock
    locker.release("n", gpu_pod("p"), spec)
    locker.acquire("n", gpu_pod("q"), spec)
    with pytest.raises(LockContention):
        locker.acquire("n", gpu_pod("p"), spec, stale, seen_fresh=False)
    assert decode_node_lock(cluster.get_node("n")["metadata"]["annotations"][keys.NODE_LOCK]).owned_by("default", "q")
    with pytest.raises(LockContention):  # trusted as fresh, the stale copy would have said "yours"
        locker.acquire("n", gpu_pod("p"), spec, cluster.get_node("n"))


def test_node_events_that_change_only_a_lock_do_not_register_the_node_again() -> None:
    cluster = MemoryCluster(nodes=[nvidia_node("n")])
    engine = make_engine()
    sync = Sync(engine, cluster)
    registered: list[str] = []
    original = engine.upsert_node
    engine.upsert_node = lambda node: registered.append(node["metadata"]["name"]) or original(node)  # type: ignore
    node = cluster.get_node("n")
    sync.on_node("ADDED", node)
    locked = {**node, "metadata": {**node["metadata"], "resourceVersion": "999",
                                   "annotations": {**node["metadata"]["annotations"], keys.NODE_LOCK: "x"}}}
    sync.on_node("MODIFIED", locked)
    assert registered == ["n"]
    changed = {**locked, "status": {"allocatable": {"nvidia.com/gpu": "0"}}}
    sync.on_node("MODIFIED", changed)
    assert registered == ["n", "n"]


def test_normal_events_can_be_turned_off_warnings_stay() -> None:
    cluster = MemoryCluster(nodes=[nvidia_node("n1", gpus=1, mem=1000)])
    ext = _extender(cluster, normal_events=False)
    ok = cluster.add_pod(gpu_pod("ok", mem=500))
    ext.filter({"Pod": ok, "NodeNames": ["n1"]})
    too_big = cluster.add_pod(gpu_pod("big", mem=5000))
    ext.filter({"Pod": too_big, "NodeNames": ["n1"]})
    reasons = {e["reason"] for e in cluster.events}
    assert "FilteringSucceed" not in reasons and "FilteringFailed" in reasons
