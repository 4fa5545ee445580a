"""The extender trusts its own view of the pods, not the request body (docs/security.md).

A hostile caller that reaches ``/filter`` or ``/bind`` (over real HTTP here, on a :class:`MemoryCluster`) can name
any pod, with any annotations and requests. The pod filtered is the one this scheduler's Pod watch holds under the
name and UID named (its requests and annotations, not the body's); a bind binds only a pending pod of this scheduler
that it filtered or that carries HAMi's allocation for that node; a body naming a pod that does not exist, or
another pod's UID, reserves, unreserves and writes nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from sched_helpers import get, gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.wire import keys


class Recording(MemoryCluster):
    """Records every write (pod and node patches, Bindings) and every pod read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes: list[tuple[str, str]] = []
        self.pod_reads: list[str] = []

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        self.writes.append(("patch pod", f"{namespace}/{name}"))
        return super().patch_pod(namespace, name, patch)

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        self.writes.append(("patch node", name))
        return super().patch_node(name, patch)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        self.writes.append(("bind", f"{namespace}/{name}"))
        super().bind(namespace, name, uid, node, annotations)

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.pod_reads.append(f"{namespace}/{name}")
        return super().get_pod(namespace, name)


@pytest.fixture
def cluster() -> Recording:
    return Recording(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])


def _service(cluster: MemoryCluster, mode: str = "filter", clock: Callable[[], float] | None = None) -> Scheduler:
    svc = Scheduler(make_engine(clock), cluster, Options(host="127.0.0.1", port=0, metrics_host=None,
                                                         write_allocation=mode, sync_wait_s=2.0))
    svc.extender.locker.backoff_s = 0.001
    svc.start()
    return svc


@pytest.fixture
def service(cluster: Recording) -> Iterator[Scheduler]:
    svc = _service(cluster)
    try:
        yield svc
    finally:
        svc.stop()


def _filter(svc: Scheduler, pod: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
    status, _, result = post(svc.server.url + "/filter", {"Pod": pod, "NodeNames": names or ["node-a", "node-b"]})
    assert status == 200, result
    return result


def _bind(svc: Scheduler, name: str, uid: str, node: str, namespace: str = "default") -> dict[str, Any]:
    status, _, result = post(svc.server.url + "/bind", {"PodName": name, "PodNamespace": namespace, "PodUID": uid,
                                                        "Node": node})
    assert status == 200, result
    return result


def _ledger(svc: Scheduler) -> dict[str, tuple[str, Any]]:
    with svc.lock:
        return {key: (b.node, b.devices) for key, b in svc.engine.ledger.bookings.items()}


def _running(svc: Scheduler, cluster: MemoryCluster, name: str, mem: int = 4000) -> dict[str, Any]:
    """A pod filtered, bound and through Allocate (its lock released), booked on its node."""
    pod = cluster.add_pod(gpu_pod(name, mem=mem))
    [node] = _filter(svc, pod)["NodeNames"]
    assert _bind(svc, name, pod["metadata"]["uid"], node) == {"Error": ""}
    cluster.patch_node(node, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})  # the device plugin's part
    return cluster.get_pod("default", name)


def test_a_crafted_body_cannot_choose_another_pods_request(service: Scheduler, cluster: Recording) -> None:
    """Tenant B posts tenant A's pending pod with a bigger request and a pinned card: the allocation written to A's
    pod is the one its own request gets."""
    victim = cluster.add_pod(gpu_pod("train", mem=1000, namespace="team-a"))
    crafted = gpu_pod("train", mem=24000, cores=100, namespace="team-a")
    crafted["metadata"]["uid"] = victim["metadata"]["uid"]
    crafted["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": "GPU-node-b-1"}
    [node] = _filter(service, crafted)["NodeNames"]
    stored = cluster.pods[("team-a", "train")]["metadata"]["annotations"]
    assert stored[keys.VGPU_NODE] == node
    allocation = stored[keys.VGPU_DEVICES_ALLOCATED]
    assert ",NVIDIA,1000,0:;" in allocation and "24000" not in allocation, allocation
    assert cluster.pod_reads == [] and service.extender.view_misses == 0  # found in the watch: no API read


def test_a_ghost_pod_with_a_running_pods_uid_changes_nothing(service: Scheduler, cluster: Recording) -> None:
    """A body naming a pod that does not exist, carrying a running pod's UID: no booking is dropped or added, no API
    write is made, the answer names the field."""
    running = _running(service, cluster, "serving")
    before, writes = _ledger(service), len(cluster.writes)
    ghost = gpu_pod("ghost", mem=1000)
    ghost["metadata"]["uid"] = running["metadata"]["uid"]
    result = _filter(service, ghost)
    assert _ledger(service) == before and len(cluster.writes) == writes
    assert result["NodeNames"] is None
    assert result["Error"] == ("pod default/ghost: metadata.name: no pod ghost exists in namespace default; nothing "
                               "was reserved")
    bound = _bind(service, "ghost", running["metadata"]["uid"], "node-a")
    assert _ledger(service) == before and len(cluster.writes) == writes
    assert bound["Error"] == 'pod default/ghost: pods "ghost" not found in namespace default'
    assert service.extender.refused == 2


def test_a_uid_that_is_not_the_pods_is_refused_without_a_write(service: Scheduler, cluster: Recording) -> None:
    pod = cluster.add_pod(gpu_pod("p", mem=1000))
    stale = {**pod, "metadata": {**pod["metadata"], "uid": "uid-of-a-deleted-pod"}}
    result = _filter(service, stale)
    assert result["Error"] == ("pod default/p: metadata.uid uid-of-a-deleted-pod is not the UID of the pod of that "
                               "name (uid-default-p); nothing was reserved")
    assert cluster.pod_reads == ["default/p"]  # not in the watch under that UID: read once to be sure
    [node] = _filter(service, pod)["NodeNames"]
    writes = len(cluster.writes)
    assert _bind(service, "p", "uid-of-a-deleted-pod", node)["Error"] == (
        "pod default/p: PodUID uid-of-a-deleted-pod is not the UID of the pod of that name (uid-default-p); nothing "
        "was changed")
    assert len(cluster.writes) == writes and not cluster.get_pod("default", "p")["spec"].get("nodeName")
    assert _bind(service, "p", pod["metadata"]["uid"], node) == {"Error": ""}


def test_a_pod_of_another_scheduler_is_neither_filtered_nor_bound(service: Scheduler, cluster: Recording) -> None:
    """A pending pod for the default scheduler (requesting a GPU, created past the webhook): hami neither books it
    nor binds it, whoever asks."""
    other = gpu_pod("theirs", mem=1000)
    other["spec"]["schedulerName"] = "default-scheduler"
    other = cluster.add_pod(other)
    writes = len(cluster.writes)  # the registration's handshake marks on the nodes
    result = _filter(service, {**other, "spec": {**other["spec"], "schedulerName": "hami-scheduler"}})
    assert result["Error"] == ("pod default/theirs: spec.schedulerName is 'default-scheduler', not 'hami-scheduler': "
                               "not a pod of this scheduler; nothing was reserved")
    assert _bind(service, "theirs", other["metadata"]["uid"], "node-a")["Error"] == (
        "pod default/theirs: spec.schedulerName is 'default-scheduler', not 'hami-scheduler': not a pod of this "
        "scheduler; nothing was changed")
    assert _ledger(service) == {} and len(cluster.writes) == writes
    assert not cluster.get_pod("default", "theirs")["spec"].get("nodeName")


def test_a_pending_pod_hami_did_not_filter_is_not_bound(service: Scheduler, cluster: Recording) -> None:
    """A pod of this scheduler that requests a GPU and was never filtered carries no allocation: binding it would
    start it on a node with no device handed to it (Allocate has nothing to serve)."""
    pod = cluster.add_pod(gpu_pod("unfiltered", mem=1000))
    writes = len(cluster.writes)  # the registration's handshake marks on the nodes
    assert _bind(service, "unfiltered", pod["metadata"]["uid"], "node-a")["Error"] == (
        "pod default/unfiltered carries no device allocation and this scheduler has not decided one; it must be "
        "filtered again")
    assert len(cluster.writes) == writes and not cluster.get_pod("default", "unfiltered")["spec"].get("nodeName")
    plain = gpu_pod("plain")
    plain["spec"]["containers"][0].pop("resources")
    plain = cluster.add_pod(plain)
    assert _bind(service, "plain", plain["metadata"]["uid"], "node-a")["Error"] == (
        "pod default/plain requests no device and this scheduler has not filtered it; it must be filtered again")
    assert len(cluster.writes) == writes
    assert _filter(service, plain, ["node-a"])["NodeNames"] == ["node-a"]  # filtered: bound as HAMi binds it
    assert _bind(service, "plain", plain["metadata"]["uid"], "node-a") == {"Error": ""}
    assert cluster.get_pod("default", "plain")["spec"]["nodeName"] == "node-a"


def test_bound_and_finished_pods_are_not_filtered_again(service: Scheduler, cluster: Recording) -> None:
    running = _running(service, cluster, "serving")
    node = running["spec"]["nodeName"]
    before, writes = _ledger(service), len(cluster.writes)
    assert _filter(service, running)["Error"] == (f"pod default/serving: spec.nodeName: the pod is already bound to "
                                                  f"node {node}; nothing was reserved")
    assert _bind(service, "serving", running["metadata"]["uid"], node) == {"Error": ""}  # a repeat: nothing to do
    other = "node-b" if node == "node-a" else "node-a"
    assert _bind(service, "serving", running["metadata"]["uid"], other)["Error"] == (
        f"pod default/serving: spec.nodeName: already bound to node {node}; nothing was changed")
    assert _ledger(service) == before and len(cluster.writes) == writes
    done = cluster.add_pod({**gpu_pod("done"), "status": {"phase": "Succeeded"}})
    assert _filter(service, done)["Error"] == "pod default/done: the pod has finished; nothing was reserved"


def test_a_filter_waits_for_a_lagging_watch_then_reads_once(cluster: Recording) -> None:
    """kube-scheduler filters a pod milliseconds after its creation, before this scheduler's watch may have
    delivered it: the filter waits for the watch's event (no API read), and reads the pod once only when the
    watch does not bring it in time."""
    svc = _service(cluster)
    held: list[tuple[str, dict[str, Any]]] = []
    hold = threading.Event()
    [(on_node, on_pod)] = cluster._watchers
    delivered = threading.Event()

    def lagging(event: str, pod: dict[str, Any]) -> None:
        if hold.is_set():
            held.append((event, pod))
            return
        threading.Timer(0.05, lambda: (on_pod(event, pod), delivered.set())).start()

    cluster._watchers[0] = (on_node, lagging)
    try:
        pod = cluster.add_pod(gpu_pod("fresh", mem=1000))  # delivered 50 ms later
        assert _filter(svc, pod)["NodeNames"]
        assert delivered.is_set() and cluster.pod_reads == [] and svc.extender.view_misses == 0
        hold.set()  # the watch is stuck: the filter gives up waiting and reads the pod, once
        svc.extender.view_wait_s = 0.2
        stuck = cluster.add_pod(gpu_pod("stuck", mem=1000))
        assert _filter(svc, stuck)["NodeNames"]
        assert cluster.pod_reads == ["default/stuck"] and svc.extender.view_misses == 1
    finally:
        svc.stop()


def test_a_filter_naming_a_pod_older_than_the_view_does_not_wait(service: Scheduler, cluster: Recording) -> None:
    """The body's copy carries a resourceVersion the view has already passed: a pod missing from the view then does
    not exist, and the filter does not wait for the watch to bring it."""
    service.extender.view_wait_s = 30.0
    pod = cluster.add_pod(gpu_pod("gone", mem=1000))
    cluster.delete_pod("default", "gone")
    assert "no pod gone exists" in _filter(service, pod)["Error"]  # a 30 s wait would time the request out


def test_filters_of_pods_never_created_reserve_nothing(cluster: Recording) -> None:
    """``--write-allocation bind``: a filter books devices without writing anything. A loop of filters naming pods
    that were never created used to book the whole cluster until the next registration pass (15 s); real pods then
    found no room. Now such a filter books nothing, and a real pod fits."""
    svc = _service(cluster, mode="bind")
    try:
        for i in range(20):
            ghost = gpu_pod(f"ghost-{i}", mem=24576)
            assert "nothing was reserved" in _filter(svc, ghost)["Error"]
        assert _ledger(svc) == {} and svc.extender.decided == {}
        real = cluster.add_pod(gpu_pod("real", mem=24576))
        [node] = _filter(svc, real)["NodeNames"]
        assert _bind(svc, "real", real["metadata"]["uid"], node) == {"Error": ""}
    finally:
        svc.stop()


def test_an_unwritten_reservation_expires_in_seconds(cluster: Recording) -> None:
    """``--write-allocation bind``: a pod filtered whose bind never comes (kube-scheduler's Permit rejected it, say)
    frees its devices within a minute, not after 15 minutes."""
    now = [1000.0]
    svc = _service(cluster, mode="bind", clock=lambda: now[0])
    try:
        _filter(svc, cluster.add_pod(gpu_pod("abandoned", mem=1000)))
        assert "default/abandoned" in {b.pod for b in svc.engine.ledger.bookings.values()}
        now[0] += 60
        _filter(svc, cluster.add_pod(gpu_pod("next", mem=1000)))  # a filter sweeps
        assert {b.pod for b in svc.engine.ledger.bookings.values()} == {"default/next"}
        assert svc.extender.decided is not None and list(svc.extender.decided) == [("default", "next")]
    finally:
        svc.stop()


class SlowNode(Recording):
    """``get_node`` blocks while ``gate`` is clear (a bind in progress)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def get_node(self, name: str) -> dict[str, Any]:
        if not self.gate.is_set():
            self.entered.set()
            self.gate.wait(10)
        return super().get_node(name)


def test_a_decision_whose_bind_is_under_way_does_not_expire() -> None:
    now = [1000.0]
    cluster = SlowNode(nodes=[nvidia_node("node-a")])
    svc = _service(cluster, mode="bind", clock=lambda: now[0])
    try:
        pod = cluster.add_pod(gpu_pod("p", mem=1000))
        [node] = _filter(svc, pod)["NodeNames"]
        cluster.gate.clear()
        outcome: dict[str, Any] = {}
        binder = threading.Thread(target=lambda: outcome.update(_bind(svc, "p", pod["metadata"]["uid"], node)))
        binder.start()
        assert cluster.entered.wait(10)
        now[0] += 3600
        assert svc.extender.expire_decisions(svc.extender.decision_ttl_s) == 0
        assert "default/p" in {b.pod for b in svc.engine.ledger.bookings.values()}
        cluster.gate.set()
        binder.join(10)
        assert outcome == {"Error": ""}
        assert cluster.get_pod("default", "p")["metadata"]["annotations"][keys.VGPU_NODE] == node
    finally:
        cluster.gate.set()
        svc.stop()


@pytest.mark.parametrize(("args", "field"), [
    ({"PodName": "p", "PodNamespace": "default", "Node": "node-a"}, "PodUID"),
    ({"PodName": "p", "PodNamespace": "default", "PodUID": 7, "Node": "node-a"}, "PodUID"),
    ({"PodName": "p", "PodNamespace": 3, "PodUID": "u", "Node": "node-a"}, "PodNamespace"),
])
def test_a_bind_without_the_pods_identity_is_a_400(service: Scheduler, args: dict[str, Any], field: str) -> None:
    status, _, text = post(service.server.url + "/bind", args)
    assert status == 400 and text.startswith(f"ExtenderBindingArgs.{field} must be")


def test_a_filter_body_without_a_uid_is_a_400(service: Scheduler, cluster: Recording) -> None:
    pod = cluster.add_pod(gpu_pod("p"))
    del pod["metadata"]["uid"]
    status, _, text = post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a"]})
    assert (status, text) == (400, "ExtenderArgs.Pod default/p: metadata.uid must be a non-empty string\n")


def test_the_common_case_reads_no_pod_from_the_api_server() -> None:
    """Over the official client and the in-test API server: a filter issued right after the pod's creation, with
    kube-scheduler's copy of it, finds the pod in the scheduler's Pod watch (waiting for it if the watch lags) and
    reads nothing from the API server: its only call is the allocation patch."""
    from kubeapi.fake_apiserver import FakeApiServer
    from kubernetes import client

    from hami_core.cluster.kube import KubeCluster

    with FakeApiServer() as server:
        server.create("nodes", "", nvidia_node("gpu-1"))
        cluster = KubeCluster(api_client=client.ApiClient(client.Configuration(host=server.url)), qps=0)
        svc = Scheduler(make_engine(), cluster, Options(port=0, metrics_host=None, sync_wait_s=5.0))
        svc.start()
        try:
            for i in range(5):
                created = server.create("pods", "default", gpu_pod(f"p{i}", mem=1000))  # the informer's copy
                mark = len(server.requests)
                assert _filter(svc, created, ["gpu-1"])["NodeNames"] == ["gpu-1"]
                calls = [(method, path) for method, path, _ in server.requests[mark:] if "/events" not in path]
                assert calls == [("PATCH", f"/api/v1/namespaces/default/pods/p{i}")]
                assert _bind(svc, f"p{i}", created["metadata"]["uid"], "gpu-1") == {"Error": ""}
                server.patch("nodes", "", "gpu-1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
            assert svc.extender.view_misses == 0
        finally:
            svc.stop()


def test_refusals_and_watch_misses_are_exported_for_the_operator(cluster: Recording) -> None:
    """A caller probing /filter and /bind with pods that are not ours shows on /metrics (a counter an alert can
    watch), and so does a filter whose pod had to be read from the API server."""
    svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host="127.0.0.1",
                                                    metrics_port=0, sync_wait_s=2.0))
    svc.start()
    try:
        ghost = gpu_pod("ghost", mem=1000)
        assert _filter(svc, ghost)["NodeNames"] is None
        assert _bind(svc, "ghost", ghost["metadata"]["uid"], "node-a")["Error"]
        pod = cluster.add_pod(gpu_pod("p", mem=1000))
        stale = {**pod, "metadata": {**pod["metadata"], "uid": "uid-of-a-deleted-pod"}}
        assert _filter(svc, stale)["NodeNames"] is None   # not in the watch under that UID: read, then refused
        assert svc.metrics_url is not None
        status, text = get(svc.metrics_url)
        assert status == 200
        samples = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
                   if line.startswith("hami_extender_")}
        assert samples["hami_extender_refused_total"] == svc.extender.refused == 3
        assert samples["hami_extender_pod_view_misses_total"] == svc.extender.view_misses >= 1
    finally:
        svc.stop()
