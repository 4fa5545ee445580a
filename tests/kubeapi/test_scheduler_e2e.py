"""End to end: the real scheduler service over HTTP, fed by KubeCluster through the official client, against
the in-test fake API server (tests/kubeapi/fake_apiserver.py: a faithful stand-in of the API subset used).

filter → pod annotated on the API server → bind → node lock + bind phase + Binding, and a restarted
scheduler rebuilding the same usage from the annotations.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.kube import KubeCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.wire import keys


def _post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _start(api_client: Any) -> Scheduler:
    cluster = KubeCluster(api_client=api_client, qps=0)
    svc = Scheduler(make_engine(), cluster, Options(port=0, metrics_host=None, sync_wait_s=5.0))
    svc.start()
    return svc


def _usage(svc: Scheduler) -> dict[str, tuple[int, int]]:
    with svc.lock:
        return {d.id: (d.used, d.usedmem) for st in svc.engine.nodes.values() for devs in st.devices.values()
                for d in devs}


def test_filter_bind_and_restart_through_the_official_client(server: Any, api_client: Any) -> None:
    server.create("nodes", "", nvidia_node("gpu-1"))
    server.create("nodes", "", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"}})
    server.create("pods", "default", gpu_pod("train-0", mem=8000))
    svc = _start(api_client)
    try:
        pod = server.get("pods", "default", "train-0")
        result = _post(f"{svc.server.url}/filter", {"pod": pod, "nodenames": ["gpu-1", "cpu-1"]})  # any key case
        assert result == {"Nodes": None, "NodeNames": ["gpu-1"], "FailedNodes": None,
                          "FailedAndUnresolvableNodes": None, "Error": ""}
        annotated = server.get("pods", "default", "train-0")["metadata"]
        assert annotated["annotations"][keys.VGPU_DEVICES_ALLOCATED].endswith(",NVIDIA,8000,0:;")
        assert annotated["labels"][keys.VGPU_NODE] == "gpu-1"
        bound = _post(f"{svc.server.url}/bind", {"PodName": "train-0", "PodNamespace": "default",
                                                  "PodUID": pod["metadata"]["uid"], "Node": "gpu-1"})
        assert bound == {"Error": ""}
        after = server.get("pods", "default", "train-0")
        assert after["spec"]["nodeName"] == "gpu-1"
        assert after["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
        lock = server.get("nodes", "", "gpu-1")["metadata"]["annotations"][keys.NODE_LOCK]
        assert lock.endswith(",default,train-0")
        assert svc.cluster.flush_events(10)  # posted from a background thread
        reasons = {e["reason"] for e in server.list("events", "default")[0]}
        assert {"FilteringSucceed", "BindingSucceed"} <= reasons
        before = _usage(svc)
        assert sorted(v for v in before.values() if v[0]) == [(1, 8000)]
    finally:
        svc.stop()
    # a restarted scheduler rebuilds the same usage from the annotations on the API server
    again = _start(api_client)
    try:
        deadline = time.monotonic() + 5
        while _usage(again) != before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _usage(again) == before
    finally:
        again.stop()
