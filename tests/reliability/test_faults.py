"""Faults on every write the scheduler makes, watch drops, a scheduler killed mid-cycle, deleted nodes and lock
owners. Each case ends with the pod bound on exactly the devices its annotations name (and the node lock released
by its Allocate), or pending with a clear Warning event and no lock left behind.

Everything goes through the official client over real HTTP to the in-test API server
(``tests/kubeapi/fake_apiserver.py``), whose :meth:`~kubeapi.fake_apiserver.FakeApiServer.inject` strikes chosen
requests; Allocate is the real :class:`~hami_core.node.allocate.Allocator` on the device plugin's own client.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime
from typing import Any

import pytest
from kubeapi.fake_apiserver import FakeApiServer
from reliability.rel_helpers import (
    Driver,
    check_capacity,
    device_usage,
    fresh_engine,
    gpu_pod,
    kube_cluster,
    ledger_view,
    nvidia_node,
    start_replica,
    wait_until,
)

from hami_core.cluster.memory import MemoryCluster
from hami_core.engine.pods import annotations
from hami_core.plugins.types import LockSpec
from hami_core.scheduler.app import Scheduler
from hami_core.scheduler.nodelock import LockContention, NodeLocker
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock, encode_node_lock

#: (what, method, path, body) of every write the scheduler makes in a filter/bind cycle
WRITES = {
    "pod allocation patch": ("PATCH", "/pods/", keys.VGPU_NODE),
    "node lock patch": ("PATCH", "/nodes/", f'{keys.NODE_LOCK}": "'),
    # the bind phase rides on the Binding (kube-apiserver merges its annotations into the pod): one write
    "binding with the bind phase": ("POST", "/binding", keys.BIND_PHASE_ALLOCATING),
    "event": ("POST", "/events", ""),
}
#: the timeout case answers 1.5 s late, past the replica's 1 s request timeout
FAULTS = {"409": {"status": 409}, "500": {"status": 500}, "lost": {"lost": True}, "timeout": {"delay_s": 1.5}}


def _setup(server: FakeApiServer, nodes: tuple[str, ...] = ("n1",), **kw: Any) -> Scheduler:
    for name in nodes:
        server.create("nodes", "", nvidia_node(name, gpus=1))
    return start_replica(server, **kw)


def _consistent(server: FakeApiServer, *replicas: Scheduler) -> None:
    """The API server's state has no over-committed device and every replica's ledger equals it."""
    final = fresh_engine(server)
    assert check_capacity(final) == []
    for svc in replicas:
        def same(svc: Scheduler = svc) -> bool:
            with svc.lock:
                return ledger_view(svc.engine) == ledger_view(final) and device_usage(svc.engine) == device_usage(
                    final)
        assert wait_until(same), (ledger_view(svc.engine), ledger_view(final))


def _bound_on_its_devices(server: FakeApiServer, name: str, node: str) -> None:
    pod = server.get("pods", "default", name)
    annos = annotations(pod)
    assert pod["spec"]["nodeName"] == node and annos[keys.VGPU_NODE] == node
    assert annos[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS  # Allocate found it and finished
    assert annos[keys.VGPU_DEVICES_ALLOCATED].startswith(f"GPU-{node}-0,NVIDIA,")
    assert keys.NODE_LOCK not in annotations(server.get("nodes", "", node))  # released by Allocate


def _events(server: FakeApiServer, svc: Scheduler, reason: str) -> list[str]:
    assert svc.cluster.flush_events(20.0)  # events are posted from a background thread
    return [e["message"] for e in server.list("events", "default")[0] if e["reason"] == reason]


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_transient_fault_on_any_write_still_binds_the_pod(server: FakeApiServer, write: str, fault: str) -> None:
    svc = _setup(server, request_timeout_s=1.0)
    try:
        pod = server.create("pods", "default", gpu_pod("p", mem=8000))
        method, path, body = WRITES[write]
        injected = server.inject(method, path, body_contains=body, **FAULTS[fault])
        outcome = Driver([svc], kube_cluster(server), ["n1"], max_attempts=3).run([pod], threads=1)
        assert injected.hits == 1, "the fault never struck"
        assert outcome.bound == {"p": "n1"}, outcome
        _bound_on_its_devices(server, "p", "n1")
        _consistent(server, svc)
    finally:
        svc.stop()


@pytest.mark.parametrize("write", ["pod allocation patch", "node lock patch", "binding with the bind phase"])
def test_a_write_that_always_fails_leaves_the_pod_pending_with_an_event(server: FakeApiServer, write: str) -> None:
    svc = _setup(server)
    try:
        pod = server.create("pods", "default", gpu_pod("p", mem=8000))
        method, path, body = WRITES[write]
        server.inject(method, path, body_contains=body, status=500, count=None)
        outcome = Driver([svc], kube_cluster(server), ["n1"], max_attempts=2).run([pod], threads=1)
        assert outcome.pending and not outcome.bound
        stored = server.get("pods", "default", "p")
        assert not stored["spec"].get("nodeName")
        failed = _events(server, svc, "FilteringFailed" if write == "pod allocation patch" else "BindingFailed")
        assert failed and all("HTTP 500" in m for m in failed), failed
        assert keys.NODE_LOCK not in annotations(server.get("nodes", "", "n1"))
        server.clear_faults()
        _consistent(server, svc)
        # once the API server heals, the next scheduling cycle binds it
        assert Driver([svc], kube_cluster(server), ["n1"]).run([pod], threads=1).bound == {"p": "n1"}
        _bound_on_its_devices(server, "p", "n1")
    finally:
        svc.stop()


def test_events_failing_for_good_do_not_stop_scheduling(server: FakeApiServer) -> None:
    svc = _setup(server)
    try:
        server.inject("POST", "/events", status=500, count=None)
        pod = server.create("pods", "default", gpu_pod("p", mem=8000))
        assert Driver([svc], kube_cluster(server), ["n1"]).run([pod], threads=1).bound == {"p": "n1"}
        _bound_on_its_devices(server, "p", "n1")
    finally:
        svc.stop()


def test_dropped_and_compacted_watches_converge_and_never_double_allocate(server: FakeApiServer) -> None:
    a, b = _setup(server), start_replica(server)
    try:
        dp = kube_cluster(server)
        first = [server.create("pods", "default", gpu_pod(f"a{i}", mem=6000)) for i in range(3)]
        with server.missed_events():  # replica b misses these bindings; its watch must relist
            assert len(Driver([a], dp, ["n1"]).run(first, threads=1).bound) == 3
        server.break_watches()
        late = [server.create("pods", "default", gpu_pod(f"b{i}", mem=6000)) for i in range(2)]
        outcome = Driver([b], dp, ["n1"], max_attempts=6).run(late, threads=1)
        assert len(outcome.bound) == 1 and len(outcome.pending) == 1  # 24,576 MiB: only four 6,000 MiB pods fit
        _consistent(server, a, b)
    finally:
        a.stop()
        b.stop()


def test_scheduler_killed_between_filter_and_bind(server: FakeApiServer) -> None:
    a = _setup(server, nodes=("n1", "n2"))
    pod = server.create("pods", "default", gpu_pod("p", mem=8000))
    [node] = a.extender.filter({"Pod": pod, "NodeNames": ["n1", "n2"]})["NodeNames"]
    a.stop()  # dies before kube-scheduler's bind reaches it
    b = start_replica(server)
    try:
        with b.lock:  # the successor books the filtered pod from its annotations before any decision
            assert [v[0] for v in ledger_view(b.engine).values()] == [node]
        meta = pod["metadata"]
        assert b.extender.bind({"PodName": "p", "PodNamespace": "default", "PodUID": meta["uid"],
                                "Node": node}) == {"Error": ""}
        Driver([b], kube_cluster(server), []).allocate_pod(node, "default", "p")
        _bound_on_its_devices(server, "p", node)
        # another pod filtered now cannot take what p holds
        other = server.create("pods", "default", gpu_pod("q", mem=20000))
        assert b.extender.filter({"Pod": other, "NodeNames": [node]})["NodeNames"] is None
        _consistent(server, b)
    finally:
        b.stop()


def test_scheduler_killed_between_bind_and_allocate(server: FakeApiServer) -> None:
    a = _setup(server)
    pod = server.create("pods", "default", gpu_pod("p", mem=8000))
    assert Driver([a], kube_cluster(server), ["n1"], allocate=False).run([pod], threads=1).bound == {"p": "n1"}
    a.stop()
    b = start_replica(server)
    try:
        assert decode_node_lock(annotations(server.get("nodes", "", "n1"))[keys.NODE_LOCK]).owned_by("default", "p")
        Driver([b], kube_cluster(server), []).allocate_pod("n1", "default", "p")  # Allocate arrives late
        _bound_on_its_devices(server, "p", "n1")
        _consistent(server, b)
    finally:
        b.stop()


def test_lock_of_a_pod_still_waiting_for_allocate_is_kept_past_its_expiry(server: FakeApiServer) -> None:
    """HAMi #3097: p is bound to n1 and its Allocate has not come (kubelet slow or down). Past the 5 minute
    expiry its lock is kept (a second pod bound now would leave two pods waiting on n1, whose Allocates could
    swap devices); p's late Allocate gets p's own devices, after which q is bound."""
    a = _setup(server)
    pod = server.create("pods", "default", gpu_pod("p", mem=8000))
    assert Driver([a], kube_cluster(server), ["n1"], allocate=False).run([pod], threads=1).bound == {"p": "n1"}
    a.stop()
    now = [time.time()]
    b = start_replica(server, clock=lambda: now[0], lock_timeout_s=300, lock_wait_s=0)  # refused, not waiting
    b.extender.locker.clock = lambda: now[0]
    try:
        second = server.create("pods", "default", gpu_pod("q", mem=8000))
        outcome = Driver([b], kube_cluster(server), ["n1"], max_attempts=1).run([second], threads=1)
        assert outcome.pending and "node lock contention" in outcome.pending["q"]  # within the expiry: held
        now[0] += 301  # past the 5 minute expiry, without sleeping
        outcome = Driver([b], kube_cluster(server), ["n1"], max_attempts=1).run([second], threads=1)
        # the lock's time has whole seconds: 301 s on the fake clock reads as 5m1s or 5m2s
        assert re.match(r"node n1 is locked by pod default/p, which is bound there and still waits for its device "
                        r"plugin's Allocate \(locked 5m[12]s ago, past the 5m0s expiry", outcome.pending["q"])
        assert decode_node_lock(annotations(server.get("nodes", "", "n1"))[keys.NODE_LOCK]).owned_by("default", "p")
        Driver([b], kube_cluster(server), []).allocate_pod("n1", "default", "p")  # the Allocate comes at last
        _bound_on_its_devices(server, "p", "n1")
        assert Driver([b], kube_cluster(server), ["n1"]).run([second], threads=1).bound == {"q": "n1"}
        _bound_on_its_devices(server, "q", "n1")
        _consistent(server, b)
    finally:
        b.stop()


@pytest.mark.parametrize("holder", ["never bound", "allocated, release lost"])
def test_expired_lock_of_a_pod_that_waits_for_no_allocate_is_broken(server: FakeApiServer, holder: str) -> None:
    """What expiry is for: the scheduler that took the lock died before the Binding (the holder is not bound), or
    the holder was allocated but its lock release was lost. Within the expiry the lock holds; past it (fake clock,
    no sleep) the next bind breaks it and binds."""
    a = _setup(server)
    p = server.create("pods", "default", gpu_pod("p", mem=8000))
    if holder == "never bound":
        a.stop()
        lock = encode_node_lock(datetime.now().astimezone(), "default", "p")
        server.patch("nodes", "", "n1", {"metadata": {"annotations": {keys.NODE_LOCK: lock}}})
    else:
        assert Driver([a], kube_cluster(server), ["n1"], allocate=False).run([p], threads=1).bound == {"p": "n1"}
        a.stop()
        lock = annotations(server.get("nodes", "", "n1"))[keys.NODE_LOCK]
        Driver([a], kube_cluster(server), []).allocate_pod("n1", "default", "p")
        server.patch("nodes", "", "n1", {"metadata": {"annotations": {keys.NODE_LOCK: lock}}})  # as if not released
    now = [time.time()]
    b = start_replica(server, clock=lambda: now[0], lock_timeout_s=300, lock_wait_s=0)
    b.extender.locker.clock = lambda: now[0]
    try:
        second = server.create("pods", "default", gpu_pod("q", mem=8000))
        outcome = Driver([b], kube_cluster(server), ["n1"], max_attempts=1).run([second], threads=1)
        assert outcome.pending["q"] == "node n1 has been locked within 5m0s: node lock contention"
        now[0] += 301
        assert Driver([b], kube_cluster(server), ["n1"]).run([second], threads=1).bound == {"q": "n1"}
        _bound_on_its_devices(server, "q", "n1")
        _consistent(server, b)
    finally:
        b.stop()


def test_a_bind_waits_for_the_lock_and_wakes_on_the_node_watch(server: FakeApiServer) -> None:
    """``--node-lock-wait`` over the real watch: q's bind finds n1 locked by p (bound, Allocate not yet come)
    and waits instead of failing; the device plugin's Allocate (its own API client) releases the lock, the Node
    watch delivers that to the replica, and the waiting bind takes the lock and binds. The fallback poll and the
    wait are set to a minute, so only the watch event can wake the bind before the test's deadline."""
    a = _setup(server)
    try:
        a.extender.locker.poll_s = a.extender.locker.wait_s = 60.0
        p = server.create("pods", "default", gpu_pod("p", mem=4000))
        assert Driver([a], kube_cluster(server), ["n1"], allocate=False).run([p], threads=1).bound == {"p": "n1"}
        q = server.create("pods", "default", gpu_pod("q", mem=4000))
        outcome: list[Any] = []
        binder = threading.Thread(target=lambda: outcome.append(
            Driver([a], kube_cluster(server), ["n1"], max_attempts=1, allocate=False).run([q], threads=1)))
        binder.start()
        assert wait_until(lambda: a.extender.locker.contended == 1, timeout_s=10)  # found it locked
        assert decode_node_lock(annotations(server.get("nodes", "", "n1"))[keys.NODE_LOCK]).owned_by("default", "p")
        Driver([a], kube_cluster(server), []).allocate_pod("n1", "default", "p")  # p's Allocate: lock released
        binder.join(20)
        assert not binder.is_alive()
        assert outcome[0].bound == {"q": "n1"} and not outcome[0].pending
        assert decode_node_lock(annotations(server.get("nodes", "", "n1"))[keys.NODE_LOCK]).owned_by("default", "q")
        assert a.extender.locker.waiting("n1") == 0
    finally:
        a.stop()


@pytest.mark.parametrize("end", ["deleted", "Succeeded", "Failed"])
def test_lock_owner_deleted_or_finished_is_broken_by_the_next_bind(server: FakeApiServer, end: str) -> None:
    svc = _setup(server)
    try:
        dp = kube_cluster(server)
        holder = server.create("pods", "default", gpu_pod("holder", mem=4000))
        assert Driver([svc], dp, ["n1"], allocate=False).run([holder], threads=1).bound == {"holder": "n1"}
        if end == "deleted":
            server.delete("pods", "default", "holder")
        else:
            server.patch("pods", "default", "holder", {"status": {"phase": end}})
        pod = server.create("pods", "default", gpu_pod("p", mem=8000))
        assert Driver([svc], dp, ["n1"]).run([pod], threads=1).bound == {"p": "n1"}
        _bound_on_its_devices(server, "p", "n1")
        _consistent(server, svc)
    finally:
        svc.stop()


def test_node_deleted_with_a_lock_on_it(server: FakeApiServer) -> None:
    svc = _setup(server, nodes=("n1", "n2"))
    try:
        dp = kube_cluster(server)
        holder = server.create("pods", "default", gpu_pod("holder", mem=4000))
        assert Driver([svc], dp, ["n1"], allocate=False).run([holder], threads=1).bound == {"holder": "n1"}
        late = server.create("pods", "default", gpu_pod("late", mem=4000))
        assert svc.extender.filter({"Pod": late, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
        server.delete("nodes", "", "n1")  # with holder's lock on it
        result = svc.extender.bind({"PodName": "late", "PodNamespace": "default", "PodUID": late["metadata"]["uid"],
                                    "Node": "n1"})
        assert "not found" in result["Error"]
        assert _events(server, svc, "BindingFailed") == ["failed to get node n1"]
        assert wait_until(lambda: "n1" not in svc.engine.nodes)
        # kube-scheduler's next cycle puts it elsewhere; the re-created node (no lock) takes pods again
        assert Driver([svc], dp, ["n1", "n2"]).run([late], threads=1).bound == {"late": "n2"}
        server.delete("pods", "default", "holder")  # the pod garbage collector deletes a deleted node's pods
        server.create("nodes", "", nvidia_node("n1", gpus=1))
        again = server.create("pods", "default", gpu_pod("again", mem=4000))
        assert wait_until(lambda: "n1" in svc.engine.nodes)
        assert Driver([svc], dp, ["n1"]).run([again], threads=1).bound == {"again": "n1"}
        _bound_on_its_devices(server, "again", "n1")
    finally:
        svc.stop()


class StaleReads(MemoryCluster):
    """``get_node`` answers from a snapshot taken earlier (a scheduler that read the node a moment ago)."""

    def __init__(self, live: MemoryCluster, snapshot: dict[str, Any]) -> None:
        self.live, self.snapshot, self.stale = live, snapshot, 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.live, name)

    def get_node(self, name: str) -> dict[str, Any]:
        if self.stale:
            self.stale -= 1
            return self.snapshot
        return self.live.get_node(name)


def test_two_schedulers_breaking_the_same_expired_lock_cannot_both_hold_it() -> None:
    """Regression: breaking an expired lock removed whatever lock was there by then, so a scheduler that saw the
    expired lock could delete the fresh lock another had just taken, and both bound pods at once."""
    now = time.time()
    spec = LockSpec(keys.NODE_LOCK)
    old = encode_node_lock(datetime.fromtimestamp(now - 600).astimezone(), "default", "gone")
    live = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod("a"), gpu_pod("b"), gpu_pod("gone")])
    live.patch_node("n", {"metadata": {"annotations": {keys.NODE_LOCK: old}}})
    snapshot = live.get_node("n")
    NodeLocker(live, clock=lambda: now).acquire("n", gpu_pod("a"), spec)  # a breaks the expired lock, takes it
    with pytest.raises(LockContention):  # b saw the same expired lock, but must not break a's
        NodeLocker(StaleReads(live, snapshot), clock=lambda: now).acquire("n", gpu_pod("b"), spec)
    assert decode_node_lock(annotations(live.get_node("n"))[keys.NODE_LOCK]).owned_by("default", "a")


def test_pods_on_node_reads_only_pods_bound_there(server: FakeApiServer) -> None:
    """The bind re-check's fresh read: ``fieldSelector=spec.nodeName=<node>`` over HTTP, and the in-memory twin."""
    memory = MemoryCluster(nodes=[nvidia_node("n1"), nvidia_node("n2")])
    for where, name in (("n1", "a"), ("n2", "b"), ("", "c"), ("n1", "d")):
        pod = gpu_pod(name)
        if where:
            pod["spec"]["nodeName"] = where
        server.create("pods", "default", pod)
        memory.add_pod(pod)
    kube = kube_cluster(server)
    for cluster in (kube, memory):
        assert [p["metadata"]["name"] for p in cluster.pods_on_node("n1")] == ["a", "d"]
        assert [p["kind"] for p in cluster.pods_on_node("n2")] == ["Pod"]
        assert cluster.pods_on_node("n3") == []  # KubeCluster does not filter: the API server applied the selector
