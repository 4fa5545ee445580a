"""``--write-allocation bind``: /filter books the devices and answers with no API call; /bind writes the allocation
with the bind phase in one patch, under the node lock. The service runs over HTTP on 127.0.0.1 on a
:class:`MemoryCluster` that counts pod patches and can refuse the Binding."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from sched_helpers import gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.scheduler.extender import DECISION_TTL_S, EXPIRE_BATCH, Extender
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock


class Counting(MemoryCluster):
    """Counts pod patches; with ``refuse_binding`` the Binding is forbidden, with ``refuse_patch`` pod patches are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pod_patches: list[Mapping[str, Any]] = []
        self.refuse_binding = self.refuse_patch = False

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        if self.refuse_patch:
            raise PermissionError("pods is forbidden: cannot patch")
        self.pod_patches.append(patch)
        return super().patch_pod(namespace, name, patch)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        if self.refuse_binding:
            raise PermissionError("pods/binding is forbidden")
        super().bind(namespace, name, uid, node, annotations)


@pytest.fixture
def cluster() -> Counting:
    return Counting(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])


def _service(cluster: MemoryCluster, mode: str = "bind", clock: Callable[[], float] | None = None) -> Scheduler:
    svc = Scheduler(make_engine(clock), cluster, Options(host="127.0.0.1", port=0, metrics_host=None,
                                                         write_allocation=mode))
    svc.extender.locker.backoff_s = 0.001
    svc.start()
    return svc


@pytest.fixture
def service(cluster: Counting) -> Iterator[Scheduler]:
    svc = _service(cluster)
    try:
        yield svc
    finally:
        svc.stop()


def _filter(svc: Scheduler, pod: dict[str, Any], names: list[str] | None = None) -> dict[str, Any]:
    return post(svc.server.url + "/filter", {"Pod": pod, "NodeNames": names or ["node-a", "node-b"]})[2]


def _bind(svc: Scheduler, name: str, node: str) -> dict[str, Any]:
    return post(svc.server.url + "/bind", {"PodName": name, "PodNamespace": "default",
                                           "PodUID": f"uid-default-{name}", "Node": node})[2]


def _booked(svc: Scheduler) -> dict[str, str]:
    with svc.lock:
        return {b.pod: b.node for b in svc.engine.ledger.bookings.values()}


def test_filter_makes_no_api_call_and_bind_writes_the_allocation_once(service: Scheduler, cluster: Counting) -> None:
    pod = cluster.add_pod(gpu_pod("p", mem=4000, cores=20))
    [node] = _filter(service, pod)["NodeNames"]
    assert cluster.pod_patches == [] and _booked(service) == {"default/p": node}  # booked, nothing written
    assert keys.VGPU_NODE not in (cluster.get_pod("default", "p")["metadata"].get("annotations") or {})
    other = cluster.add_pod(gpu_pod("q", mem=4000))
    _filter(service, other)  # the next decision already sees p's devices
    assert _bind(service, "p", node) == {"Error": ""}
    [patch] = [p for p in cluster.pod_patches if p["metadata"].get("labels")]  # one patch carried all of it
    annos = patch["metadata"]["annotations"]
    assert annos[keys.VGPU_NODE] == node and annos[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    assert ",NVIDIA,4000,20:;" in annos[keys.VGPU_DEVICES_ALLOCATED]
    assert annos[keys.VGPU_DEVICES_TO_ALLOCATE] == annos[keys.VGPU_DEVICES_ALLOCATED]
    assert patch["metadata"]["labels"] == {keys.VGPU_NODE: node}
    stored = cluster.get_pod("default", "p")
    assert stored["spec"]["nodeName"] == node and stored["metadata"]["annotations"][keys.VGPU_NODE] == node
    assert decode_node_lock(cluster.get_node(node)["metadata"]["annotations"][keys.NODE_LOCK]).owned_by("default", "p")
    assert service.extender.decided is not None and ("default", "p") not in service.extender.decided
    assert [e["reason"] for e in cluster.events if e["involvedObject"]["name"] == "p"] == \
        ["FilteringSucceed", "BindingSucceed"]


def test_a_pod_this_replica_did_not_filter_is_refused_then_bound(service: Scheduler, cluster: Counting) -> None:
    """The bind reaches a replica (or a restarted one) that never decided the pod: nothing was written, so it
    refuses; kube-scheduler filters it again, here, and the bind goes through."""
    pod = cluster.add_pod(gpu_pod("p", mem=4000))
    result = _bind(service, "p", "node-a")
    assert result["Error"] == ("pod default/p carries no device allocation and this scheduler has not decided one; "
                               "it must be filtered again")
    assert not cluster.get_pod("default", "p")["spec"].get("nodeName")
    assert keys.NODE_LOCK not in (cluster.get_node("node-a")["metadata"].get("annotations") or {})
    [node] = _filter(service, pod)["NodeNames"]
    assert _bind(service, "p", node) == {"Error": ""}


def test_a_bind_for_another_node_is_refused_and_forgets_the_decision(service: Scheduler, cluster: Counting) -> None:
    pod = cluster.add_pod(gpu_pod("p", mem=4000))
    [node] = _filter(service, pod)["NodeNames"]
    elsewhere = "node-b" if node == "node-a" else "node-a"
    result = _bind(service, "p", elsewhere)
    assert result["Error"] == f"pod default/p was filtered onto node {node}, not {elsewhere}; it must be filtered again"
    assert _booked(service) == {} and cluster.pod_patches == []


def test_a_refused_bind_books_the_pod_as_another_replica_wrote_it(cluster: Counting) -> None:
    """This replica decided node X; another replica, writing at filter, gave the pod node Y since, and the bind
    names Y. The bind is refused (the decision here says X), and the pod stays booked on Y as written: dropping
    only this replica's reservation must not drop the other replica's allocation with it."""
    a, b = _service(cluster), _service(cluster, mode="filter")
    try:
        pod = cluster.add_pod(gpu_pod("p", mem=4000))
        [x] = _filter(a, pod)["NodeNames"]
        y = "node-b" if x == "node-a" else "node-a"
        assert _filter(b, cluster.get_pod("default", "p"), [y])["NodeNames"] == [y]
        assert "was filtered onto node" in _bind(a, "p", y)["Error"]
        assert _booked(a)["default/p"] == y and a.extender.decided == {}
    finally:
        a.stop()
        b.stop()


def test_a_failed_binding_drops_the_unwritten_reservation_only(service: Scheduler, cluster: Counting) -> None:
    """The Binding fails after the allocation patch went through: the pod carries it, so its booking stays (the
    watch books it as any allocated pod). When the patch itself was never made, nothing stays."""
    pod = cluster.add_pod(gpu_pod("p", mem=4000))
    [node] = _filter(service, pod)["NodeNames"]
    cluster.refuse_binding = True
    assert "pods/binding is forbidden" in _bind(service, "p", node)["Error"]
    assert cluster.get_pod("default", "p")["metadata"]["annotations"][keys.VGPU_NODE] == node
    assert _booked(service) == {"default/p": node}
    assert keys.NODE_LOCK not in (cluster.get_node(node)["metadata"].get("annotations") or {})

    cluster.refuse_binding, cluster.refuse_patch = False, True
    q = cluster.add_pod(gpu_pod("q", mem=4000))
    [node_q] = _filter(service, q)["NodeNames"]
    assert "cannot patch" in _bind(service, "q", node_q)["Error"]  # the allocation was never written
    assert keys.VGPU_NODE not in (cluster.get_pod("default", "q")["metadata"].get("annotations") or {})
    assert "default/q" not in _booked(service) and ("default", "q") not in service.extender.decided
    assert keys.NODE_LOCK not in (cluster.get_node(node_q)["metadata"].get("annotations") or {})


def test_filter_mode_still_patches_at_filter(cluster: Counting) -> None:
    svc = _service(cluster, "filter")
    try:
        pod = cluster.add_pod(gpu_pod("p", mem=4000))
        [node] = _filter(svc, pod)["NodeNames"]
        assert cluster.get_pod("default", "p")["metadata"]["annotations"][keys.VGPU_NODE] == node
        assert svc.extender.decided is None and _bind(svc, "p", node) == {"Error": ""}
    finally:
        svc.stop()


def test_unknown_allocation_write_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown allocation write 'later': choose one of filter, bind"):
        Extender(make_engine(), MemoryCluster(), write_allocation="later")


def test_the_oldest_decisions_are_forgotten_past_the_cap(service: Scheduler, cluster: Counting,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Decisions waiting for bind are capped; a pod whose decision was pushed out is refused and filtered again."""
    import hami_core.scheduler.writes as writes

    monkeypatch.setattr(writes, "MAX_DECIDED", 2)
    pods = [cluster.add_pod(gpu_pod(n, mem=1000)) for n in ("a", "b", "c")]
    nodes = [_filter(service, p)["NodeNames"][0] for p in pods]
    assert list(service.extender.decided or {}) == [("default", "b"), ("default", "c")]
    assert "has not decided one" in _bind(service, "a", nodes[0])["Error"]
    assert _bind(service, "c", nodes[2]) == {"Error": ""}


def test_a_deleted_pods_decision_goes_and_a_new_pod_of_its_name_keeps_its_own(service: Scheduler,
                                                                               cluster: Counting) -> None:
    """A pod deleted between filter and bind: the watch drops this replica's decision with its reservation.
    A pod created again under the same name keeps its own decision when the old pod's deletion is heard late."""
    old = cluster.add_pod(gpu_pod("p", mem=4000))
    _filter(service, old)
    assert service.extender.decided is not None and ("default", "p") in service.extender.decided
    cluster.delete_pod("default", "p")  # the in-memory watch delivers at once
    assert ("default", "p") not in service.extender.decided and "default/p" not in _booked(service)
    new = gpu_pod("p", mem=4000)
    new["metadata"]["uid"] = "uid-second"
    [node] = _filter(service, cluster.add_pod(new))["NodeNames"]
    service.extender.on_pod_event("DELETED", old)  # the first pod's deletion, heard after the second's filter
    kept = service.extender.decided[("default", "p")]
    assert (kept.node, kept.uid) == (node, "uid-second")
    service.extender.on_pod_event("MODIFIED", new)
    assert ("default", "p") in service.extender.decided
    service.extender.on_pod_event("DELETED", new)
    assert ("default", "p") not in service.extender.decided


def test_a_decision_without_a_bind_expires_and_the_pod_is_booked_as_stored(cluster: Counting) -> None:
    """A decision whose bind never comes (it went to another replica, say, and the pod stayed pending) holds
    devices nobody else knows of; past DECISION_TTL_S the next filter drops it with its reservation. A pod that
    another replica bound meanwhile is booked as that replica wrote it, not dropped."""
    now = [1000.0]
    a, b = _service(cluster, clock=lambda: now[0]), _service(cluster, mode="filter")
    try:
        [node] = _filter(a, cluster.add_pod(gpu_pod("p", mem=4000)))["NodeNames"]
        _filter(a, cluster.add_pod(gpu_pod("s", mem=4000)))
        [node_s] = _filter(b, cluster.get_pod("default", "s"))["NodeNames"]  # s: filtered and bound by b instead
        assert _bind(b, "s", node_s) == {"Error": ""}
        now[0] += DECISION_TTL_S - 1
        _filter(a, cluster.add_pod(gpu_pod("q", mem=1000)))
        assert a.extender.decided is not None and ("default", "p") in a.extender.decided  # not yet
        now[0] += 2
        _filter(a, cluster.add_pod(gpu_pod("r", mem=1000)))  # the next filter sweeps
        assert ("default", "p") not in a.extender.decided and ("default", "s") not in a.extender.decided
        booked = _booked(a)
        assert "default/p" not in booked and booked["default/s"] == node_s
        assert a.extender.expire_decisions(DECISION_TTL_S) == 0  # q and r are young
        assert "has not decided one" in _bind(a, "p", node)["Error"]
    finally:
        a.stop()
        b.stop()


def test_an_unreadable_pod_keeps_its_decision_until_the_next_sweep(service: Scheduler, cluster: Counting,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    [node] = _filter(service, cluster.add_pod(gpu_pod("p", mem=4000)))["NodeNames"]
    monkeypatch.setattr(cluster, "get_pod", lambda *a: (_ for _ in ()).throw(TimeoutError("read timed out")))
    assert service.extender.expire_decisions(0) == 0 and "default/p" in _booked(service)
    monkeypatch.undo()
    assert service.extender.expire_decisions(0) == 1 and "default/p" not in _booked(service)
    assert "has not decided one" in _bind(service, "p", node)["Error"]


def test_a_filter_expires_at_most_a_batch_of_decisions_oldest_first(cluster: Counting) -> None:
    """One pod read per expired decision: a filter pays for EXPIRE_BATCH of them at most; the rest wait for the
    next filters."""
    now = [0.0]
    svc = _service(cluster, clock=lambda: now[0])
    try:
        old = [f"o{i}" for i in range(EXPIRE_BATCH + 2)]
        for name in old:
            _filter(svc, cluster.add_pod(gpu_pod(name, mem=1000)))
        now[0] += DECISION_TTL_S + 1
        _filter(svc, cluster.add_pod(gpu_pod("n", mem=1000)))
        assert [name for _, name in svc.extender.decided or {}] == [*old[EXPIRE_BATCH:], "n"]
        _filter(svc, cluster.add_pod(gpu_pod("m", mem=1000)))
        assert [name for _, name in svc.extender.decided or {}] == ["n", "m"]
    finally:
        svc.stop()
