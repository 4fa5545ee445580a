"""ResourceQuotas through KubeCluster and the official client over real HTTP against the fake API server: list, the
watch (a quota created after start arrives), relists after a broken watch and 410 Gone, and the scheduler enforcing
a quota that arrived through the watch."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from kubeapi.fake_apiserver import FakeApiServer
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.kube import KubeCluster
from hami_core.scheduler.app import Options, Scheduler

MEM = "limits.nvidia.com/gpumem"


def quota(name: str, limit: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"hard": {MEM: limit}}}


def wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll ``cond`` (watch delivery is asynchronous); the deadline only keeps a broken watch from hanging the test."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}

    def __call__(self, event: str, obj: dict[str, Any]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        self.events.append((event, key[1]))
        if event == "DELETED":
            self.objs.pop(key, None)
        else:
            self.objs[key] = obj

    def limits(self) -> dict[str, str]:
        return {k[1]: o["spec"]["hard"][MEM] for k, o in self.objs.items()}


def test_list_and_watch_resource_quotas(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("resourcequotas", "team", quota("a", "100"))
    [listed] = kc.list_resource_quotas()
    assert listed["kind"] == "ResourceQuota" and listed["metadata"]["namespace"] == "team"
    seen = Seen()
    kc.watch_resource_quotas(seen)
    assert seen.events == [("ADDED", "a")]  # the initial list is delivered before the call returns
    assert server.wait_watches(1)
    server.create("resourcequotas", "other", quota("b", "5"))  # created after the watch started
    server.patch("resourcequotas", "team", "a", {"spec": {"hard": {MEM: "200"}}})
    assert wait_for(lambda: seen.limits() == {"a": "200", "b": "5"})
    server.delete("resourcequotas", "other", "b")
    assert wait_for(lambda: seen.limits() == {"a": "200"})
    assert seen.events == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert ("GET", "/api/v1/resourcequotas", "") in server.requests  # the all-namespaces list


def test_broken_watch_and_410_relist_converge(server: FakeApiServer, kc: KubeCluster) -> None:
    server.create("resourcequotas", "team", quota("a", "1"))
    server.create("resourcequotas", "team", quota("b", "2"))
    seen = Seen()
    kc.watch_resource_quotas(seen)
    assert server.wait_watches(1)
    server.break_watches()
    server.delete("resourcequotas", "team", "a")
    assert wait_for(lambda: seen.limits() == {"b": "2"})
    assert server.wait_watches(1)
    with server.missed_events():  # changes no watcher sees, then 410 Gone on the open stream
        server.create("resourcequotas", "team", quota("c", "3"))
        server.delete("resourcequotas", "team", "b")
    assert wait_for(lambda: seen.limits() == {"c": "3"})
    assert [e for e in seen.events if e[0] == "ADDED"] == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def _filter(svc: Scheduler, pod: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps({"Pod": pod, "NodeNames": ["gpu-1"]}).encode()
    req = urllib.request.Request(f"{svc.server.url}/filter", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def test_scheduler_enforces_a_quota_created_after_start(server: FakeApiServer, api_client: Any) -> None:
    server.create("nodes", "", nvidia_node("gpu-1"))
    svc = Scheduler(make_engine(), KubeCluster(api_client=api_client, qps=0),
                    Options(port=0, metrics_host=None, sync_wait_s=5.0))
    svc.start()
    try:
        pod = server.create("pods", "team", gpu_pod("p", mem=8000, namespace="team"))
        assert server.wait_watches(3)  # nodes, pods, resourcequotas
        server.create("resourcequotas", "team", quota("gpu", "4000"))
        assert wait_for(lambda: svc.engine.quotas.limit("team", "nvidia.com/gpumem") == 4000)
        assert _filter(svc, pod)["FailedNodes"] == {"gpu-1": "2/2 ResourceQuotaNotFit"}
        server.delete("resourcequotas", "team", "gpu")
        assert wait_for(lambda: not svc.engine.quotas.limited("team"))
        assert _filter(svc, pod)["NodeNames"] == ["gpu-1"]
    finally:
        svc.stop()
