"""KubeCluster through the official client over real HTTP against the fake API server."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubeapi.fake_apiserver import FakeApiServer

from hami_core.cluster.base import ConflictError, NotFoundError
from hami_core.cluster.kube import KubeCluster, TokenBucket
from hami_core.plugins.errors import HamiError, TemporaryError


def node(name: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": dict(annotations)}, "status": {"allocatable": {}}}


def pod(name: str, ns: str = "default", node_name: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def test_get_list_and_not_found(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("nodes", "", node("n1", a="1"))
    server.create("pods", "ns1", pod("p1", "ns1"))
    server.create("pods", "ns2", pod("p2", "ns2"))
    got = kc.get_node("n1")
    assert got["metadata"]["annotations"] == {"a": "1"} and got["kind"] == "Node"
    assert kc.get_pod("ns1", "p1")["metadata"]["namespace"] == "ns1"
    assert [n["metadata"]["name"] for n in kc.list_nodes()] == ["n1"]
    pods = kc.list_pods()
    assert [p["metadata"]["name"] for p in pods] == ["p1", "p2"] and all(p["kind"] == "Pod" for p in pods)
    with pytest.raises(NotFoundError, match="nope"):
        kc.get_node("nope")
    with pytest.raises(NotFoundError):
        kc.get_pod("ns1", "nope")
    with pytest.raises(NotFoundError):
        kc.patch_pod("ns1", "nope", {"metadata": {"labels": {"a": "b"}}})


def test_merge_patch_semantics_and_content_type(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("nodes", "", node("n1", keep="1", drop="2"))
    out = kc.patch_node("n1", {"metadata": {"annotations": {"drop": None, "new": "3"}}})
    assert out["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    assert server.get("nodes", "", "n1")["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    patches = [r for r in server.requests if r[0] == "PATCH"]
    assert patches and all(r[2].startswith("application/merge-patch+json") for r in patches)
    server.create("pods", "default", pod("p"))
    kc.patch_pod("default", "p", {"metadata": {"annotations": {"x": "y"}, "labels": {"l": "v"}}})
    assert server.get("pods", "default", "p")["metadata"]["labels"] == {"l": "v"}


def test_resource_version_cas(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("nodes", "", node("n1"))
    rv = kc.get_node("n1")["metadata"]["resourceVersion"]
    lock = {"metadata": {"annotations": {"hami.io/mutex.lock": "t,ns,p"}, "resourceVersion": rv}}
    out = kc.patch_node("n1", lock)
    assert out["metadata"]["resourceVersion"] != rv
    with pytest.raises(ConflictError, match="modified"):
        kc.patch_node("n1", {"metadata": {"annotations": {"hami.io/mutex.lock": "t,ns,q"}, "resourceVersion": rv}})
    assert server.get("nodes", "", "n1")["metadata"]["annotations"]["hami.io/mutex.lock"] == "t,ns,p"


def test_bind_sets_node_name_and_conflicts(server: FakeApiServer, kc: KubeCluster) -> None:
    uid = server.create("pods", "default", pod("p"))["metadata"]["uid"]
    with pytest.raises(ConflictError):
        kc.bind("default", "p", "wrong-uid", "n1")
    kc.bind("default", "p", uid, "n1")
    assert server.get("pods", "default", "p")["spec"]["nodeName"] == "n1"
    with pytest.raises(ConflictError, match="already assigned"):
        kc.bind("default", "p", uid, "n2")
    with pytest.raises(NotFoundError):
        kc.bind("default", "missing", "", "n1")


def test_event_recorded_and_never_raises(server: FakeApiServer, kc: KubeCluster) -> None:
    p = server.create("pods", "ns1", pod("p", "ns1"))
    kc.event(p, "Warning", "FilteringFailed", "no node fits")
    assert kc.flush_events(5)
    events = list(server.objects("events").values())
    assert len(events) == 1
    ev = events[0]
    assert ev["reason"] == "FilteringFailed" and ev["type"] == "Warning" and ev["message"] == "no node fits"
    assert ev["source"] == {"component": "hami-scheduler"} and ev["count"] == 1
    assert ev["involvedObject"]["name"] == "p" and ev["involvedObject"]["uid"] == p["metadata"]["uid"]
    assert ev["metadata"]["namespace"] == "ns1" and ev["firstTimestamp"] and ev["lastTimestamp"]
    server.inject("POST", "/events", status=500, count=None)
    kc.event(p, "Normal", "BindingSucceed", "ok")  # refused: logged by the recorder's thread, not raised
    assert kc.flush_events(10) and kc.events.failed == 1 and kc.events.posted == 1
    server.stop()
    kc.event(p, "Normal", "BindingSucceed", "ok")  # server gone: the same
    assert kc.flush_events(10) and kc.events.posted == 1
    kc.event({"metadata": "not an object"}, "Warning", "FilteringFailed", "x")  # malformed: queued, not raised
    assert kc.flush_events(10) and kc.events.failed == 3


def test_events_have_their_own_rate_limiter(server: FakeApiServer, api_client: Any) -> None:
    """An Event takes no token from the bucket that reads and writes wait on (kube-scheduler's event client has
    its own): after a burst of events, the next read still goes at once."""
    p = server.create("pods", "default", pod("p"))
    kc = KubeCluster(api_client=api_client, qps=0.5, burst=1)
    for i in range(3):
        kc.event(p, "Normal", "BindingSucceed", f"ok {i}")
    assert kc.limiter.acquire() == 0  # the only token of the main bucket is still there
    assert not kc.flush_events(0.2)  # the third event waits ~2 s for a token of the events bucket
    assert kc.flush_events(10)
    assert sorted(e["message"] for e in server.objects("events").values()) == ["ok 0", "ok 1", "ok 2"]
    kc.close()


def test_other_errors_are_one_line_hami_errors(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("pods", "default", pod("p"))
    with pytest.raises(HamiError) as info:
        kc.bind("default", "p", "", "")  # a Binding without a target: 422 Invalid
    assert not isinstance(info.value, NotFoundError | ConflictError | TemporaryError)
    assert "HTTP 422" in str(info.value) and "target.name" in str(info.value) and "\n" not in str(info.value)


def test_lost_patch_response_surfaces_but_applies(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("nodes", "", node("n1"))
    server.drop_next_response("PATCH", "/nodes/n1")
    with pytest.raises(TemporaryError, match="re-read"):
        kc.patch_node("n1", {"metadata": {"annotations": {"k": "v"}}})
    assert kc.get_node("n1")["metadata"]["annotations"]["k"] == "v"


def test_connection_refused_is_temporary(api_client: Any) -> None:
    from kubernetes import client

    dead = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    dead.configuration.retries = 0
    kc = KubeCluster(api_client=dead, qps=0, request_timeout_s=1)
    with pytest.raises(TemporaryError):
        kc.get_node("n")


class View:
    """A handler's view of the objects, as an informer cache would hold it."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, tuple[str, str]]] = []
        self.cond = threading.Condition()

    def __call__(self, typ: str, obj: dict[str, Any]) -> None:
        key = (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        with self.cond:
            self.events.append((typ, key))
            if typ == "DELETED":
                self.objs.pop(key, None)
            else:
                self.objs[key] = obj
            self.cond.notify_all()

    def summary(self) -> dict[tuple[str, str], str]:
        with self.cond:
            return {k: v["metadata"]["resourceVersion"] for k, v in self.objs.items()}

    def wait_equal(self, server: FakeApiServer, plural: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        want: dict[tuple[str, str], str] = {}
        while time.monotonic() < deadline:
            want = {k: v["metadata"]["resourceVersion"] for k, v in server.objects(plural).items()}
            if self.summary() == want:
                return
            time.sleep(0.02)
        assert self.summary() == want


def test_watch_delivers_added_modified_deleted(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("nodes", "", node("n1"))
    server.create("pods", "default", pod("p1"))
    nodes, pods = View(), View()
    kc.watch(nodes, pods)
    assert nodes.events == [("ADDED", ("", "n1"))] and pods.events == [("ADDED", ("default", "p1"))]
    assert nodes.objs[("", "n1")]["kind"] == "Node"
    assert server.wait_watches(2)
    server.create("nodes", "", node("n2"))
    server.patch("pods", "default", "p1", {"metadata": {"labels": {"a": "b"}}})
    server.delete("nodes", "", "n1")
    nodes.wait_equal(server, "nodes")
    pods.wait_equal(server, "pods")
    assert nodes.events == [("ADDED", ("", "n1")), ("ADDED", ("", "n2")), ("DELETED", ("", "n1"))]
    assert pods.events[-1] == ("MODIFIED", ("default", "p1"))
    assert pods.objs[("default", "p1")]["metadata"]["labels"] == {"a": "b"}


def _churn(server: FakeApiServer) -> None:
    server.create("pods", "default", pod("new"))
    server.patch("pods", "default", "p1", {"metadata": {"annotations": {"x": "1"}}})
    server.delete("pods", "default", "p2")


def test_broken_watch_rewatches_without_loss_or_duplicates(server: FakeApiServer, kc: KubeCluster) -> None:
    for name in ("p1", "p2"):
        server.create("pods", "default", pod(name))
    nodes, pods = View(), View()
    kc.watch(nodes, pods)
    assert server.wait_watches(2)
    lists = sum(r.lists for r in kc._reflectors)
    server.break_watches()
    _churn(server)
    pods.wait_equal(server, "pods")
    time.sleep(0.2)
    pods.wait_equal(server, "pods")
    added = [k for t, k in pods.events if t == "ADDED"]
    assert sorted(added) == [("default", "new"), ("default", "p1"), ("default", "p2")]  # no duplicate ADDED
    assert ("DELETED", ("default", "p2")) in pods.events
    # watched again from the last version delivered, as client-go does: no relist (a kube-apiserver restart would
    # otherwise cost a LIST of every pod)
    assert sum(r.lists for r in kc._reflectors) == lists


def test_missed_events_and_in_stream_410_relist(server: FakeApiServer, kc: KubeCluster) -> None:
    for name in ("p1", "p2"):
        server.create("pods", "default", pod(name))
    nodes, pods = View(), View()
    kc.watch(nodes, pods)
    assert server.wait_watches(2)
    lists_before = sum(r.lists for r in kc._reflectors)
    with server.missed_events():  # changes no watcher sees, then 410 on the open streams
        _churn(server)
    pods.wait_equal(server, "pods")
    assert sum(r.lists for r in kc._reflectors) > lists_before
    assert ("DELETED", ("default", "p2")) in pods.events and ("ADDED", ("default", "new")) in pods.events
    assert server.wait_watches(2)
    server.patch("pods", "default", "new", {"metadata": {"labels": {"after": "1"}}})
    pods.wait_equal(server, "pods")


def test_http_410_on_watch_relists(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("pods", "default", pod("p1"))
    server.create("pods", "default", pod("p2"))
    server.fail_next_watches(2)
    nodes, pods = View(), View()
    kc.watch(nodes, pods)
    assert server.wait_watches(2)
    assert sum(r.lists for r in kc._reflectors) >= 3
    _churn(server)
    pods.wait_equal(server, "pods")
    assert [t for t, _ in pods.events].count("ADDED") == 3


def test_clean_end_rewatches_from_last_version(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("pods", "default", pod("p1"))
    server.create("pods", "default", pod("p2"))
    nodes, pods = View(), View()
    kc.watch(nodes, pods)
    assert server.wait_watches(2)
    server.end_watches()
    _churn(server)
    pods.wait_equal(server, "pods")
    assert sum(r.lists for r in kc._reflectors) == 2  # no relist needed


def test_periodic_resync_delivers_modified(server: FakeApiServer, api_client: Any) -> None:
    server.create("nodes", "", node("n1"))
    kc = KubeCluster(api_client=api_client, qps=0, resync_s=0.3, watch_timeout_s=1)
    try:
        nodes = View()
        kc.watch(nodes, View())
        deadline = time.monotonic() + 3
        while ("MODIFIED", ("", "n1")) not in nodes.events and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ("MODIFIED", ("", "n1")) in nodes.events
    finally:
        kc.close()


def test_close_stops_threads_promptly(server: FakeApiServer, api_client: Any) -> None:
    kc = KubeCluster(api_client=api_client, qps=0)
    kc.watch(View(), View())
    assert server.wait_watches(2)
    threads = list(kc._reflectors)
    t0 = time.monotonic()
    kc.close()
    assert time.monotonic() - t0 < 3
    assert not any(t.is_alive() for t in threads)


def test_token_bucket_fake_clock() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    bucket = TokenBucket(10, 3, clock=lambda: now[0], sleep=sleep)
    for _ in range(3):
        assert bucket.acquire() == 0
    assert bucket.acquire() == pytest.approx(0.1)
    assert bucket.acquire() == pytest.approx(0.1)
    now[0] += 10  # idle: refills to burst only
    for _ in range(3):
        assert bucket.acquire() == 0
    assert bucket.acquire() > 0


def test_rate_limit_applies_to_calls(server: FakeApiServer, api_client: Any) -> None:
    server.create("nodes", "", node("n1"))
    kc = KubeCluster(api_client=api_client, qps=20, burst=2)
    t0 = time.monotonic()
    for _ in range(12):
        kc.get_node("n1")
    elapsed = time.monotonic() - t0
    assert 0.45 <= elapsed < 1.5  # 10 calls beyond the burst at 20/s


def test_binding_carries_annotations_into_the_pod(server: FakeApiServer, kc: KubeCluster) -> None:
    """As kube-apiserver's BindingREST (tests/e2e checks the real one): the Binding's annotations are merged into the
    pod in the same write."""
    created = server.create("pods", "default", pod("p"))
    kc.bind("default", "p", created["metadata"]["uid"], "n1", {"hami.io/bind-phase": "allocating"})
    stored = server.get("pods", "default", "p")
    assert stored["spec"]["nodeName"] == "n1" and stored["metadata"]["annotations"] == {
        "hami.io/bind-phase": "allocating"}


def test_watch_caches_nodes_and_bound_pods_once_caught_up(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("nodes", "", node("n1", a="1"))
    server.create("pods", "default", pod("on", node_name="n1"))
    server.create("pods", "default", pod("off"))
    kc.watch(View(), View())
    assert kc.cached_node("n1")["metadata"]["annotations"] == {"a": "1"} and kc.cached_node("nope") is None
    assert kc.cached_pod("default", "off")["metadata"]["name"] == "off"
    written = server.patch("nodes", "", "n1", {"metadata": {"annotations": {"lock": "x"}}})
    rv = written["metadata"]["resourceVersion"]
    # a quiet cluster: no pod event after the node's write, so the view cannot be shown to include it
    assert kc.bound_pods("n1", rv, timeout_s=0.2) is None
    server.patch("pods", "default", "off", {"metadata": {"labels": {"x": "1"}}})  # any pod event will do
    bound = kc.bound_pods("n1", rv, timeout_s=5)  # waits for the Pod watch to pass the node's write
    assert bound is not None and [p["metadata"]["name"] for p in bound] == ["on"]
    later = server.patch("nodes", "", "n1", {"metadata": {"annotations": {"lock": "y"}}})
    server.bind("default", "off", {"target": {"name": "n1"}})
    bound = kc.bound_pods("n1", later["metadata"]["resourceVersion"], timeout_s=5)
    assert bound is not None and sorted(p["metadata"]["name"] for p in bound) == ["off", "on"]
    # a view that cannot be shown to include a version answers None: the caller reads the server
    assert kc.bound_pods("n1", str(int(later["metadata"]["resourceVersion"]) + 1000), timeout_s=0.1) is None
    assert kc.bound_pods("n1", "not-a-number") is None
