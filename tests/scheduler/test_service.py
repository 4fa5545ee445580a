"""The scheduler service end to end over HTTP on 127.0.0.1: filter, bind, events, errors, metrics, restart."""

from __future__ import annotations

import threading
from typing import Any

from sched_helpers import get, gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.scheduler.sync import Sync
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock


def _events(cluster: MemoryCluster, reason: str) -> list[str]:
    return [e["message"] for e in cluster.events if e["reason"] == reason]


def _usage(engine: Any) -> dict[str, tuple[int, int, int]]:
    return {d.id: (d.used, d.usedmem, d.usedcores) for s in engine.nodes.values()
            for devs in s.devices.values() for d in devs}


def test_filter_then_bind_writes_annotations_lock_and_events(service: Scheduler, cluster: MemoryCluster) -> None:
    pod = cluster.add_pod(gpu_pod("train-0", mem=8000, cores=30))
    status, ctype, result = post(service.server.url + "/filter",
                                 {"Pod": pod, "Nodes": None, "NodeNames": ["node-a", "node-b", "cpu-1"]})
    assert status == 200 and ctype == "application/json"
    assert set(result) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
    assert result["Error"] == "" and result["Nodes"] is None and result["FailedAndUnresolvableNodes"] is None
    [node] = result["NodeNames"]
    stored = cluster.get_pod("default", "train-0")
    annos = stored["metadata"]["annotations"]
    assert annos[keys.VGPU_NODE] == node and stored["metadata"]["labels"][keys.VGPU_NODE] == node
    assert annos[keys.VGPU_DEVICES_ALLOCATED] == annos[keys.VGPU_DEVICES_TO_ALLOCATE]
    assert ",NVIDIA,8000,30:;" in annos[keys.VGPU_DEVICES_ALLOCATED]
    [ok] = _events(cluster, "FilteringSucceed")
    assert ok.startswith(f"find fit node({node}), ") and f"{node}:" in ok

    status, _, result = post(service.server.url + "/bind", {"PodName": "train-0", "PodNamespace": "default",
                                                            "PodUID": pod["metadata"]["uid"], "Node": node})
    assert (status, result) == (200, {"Error": ""})
    bound = cluster.get_pod("default", "train-0")
    assert bound["spec"]["nodeName"] == node
    assert bound["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
    assert bound["metadata"]["annotations"][keys.BIND_TIME].isdigit()
    lock = decode_node_lock(cluster.get_node(node)["metadata"]["annotations"][keys.NODE_LOCK])
    assert lock.owned_by("default", "train-0")
    assert _events(cluster, "BindingSucceed") == [f"Successfully binding node [{node}] to default/train-0"]

    metrics = get(service.metrics_url)[1]
    uuid = annos[keys.VGPU_DEVICES_ALLOCATED].split(",")[0]
    line = next(m for m in metrics.splitlines()
                if m.startswith("hami_gpu_memory_allocated_bytes{") and f'device_uuid="{uuid}"' in m)
    assert 'zone="vGPU"' in line and 'device_cores="30"' in line
    assert float(line.rsplit(" ", 1)[1]) == 8000 * 1024 * 1024
    assert 'hami_vgpu_memory_allocated_bytes{' in metrics and 'pod="train-0"' in metrics


def test_keys_are_case_insensitive(service: Scheduler, cluster: MemoryCluster) -> None:
    pod = cluster.add_pod(gpu_pod("p"))
    _, _, result = post(service.server.url + "/filter", {"pod": pod, "nodenames": ["node-a"]})
    assert result["NodeNames"] == ["node-a"] and result["Error"] == ""
    _, _, result = post(service.server.url + "/bind", {"podname": "p", "PODNAMESPACE": "default",
                                                       "podUid": pod["metadata"]["uid"], "node": "node-a"})
    assert result == {"Error": ""}


def test_pod_without_device_request_echoes_node_names(service: Scheduler, cluster: MemoryCluster) -> None:
    pod = gpu_pod("plain")
    pod["spec"]["containers"][0].pop("resources")
    pod = cluster.add_pod(pod)
    _, _, result = post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["x", "y"]})
    assert result["NodeNames"] == ["x", "y"] and result["FailedNodes"] is None
    assert not cluster.events


def test_nothing_fits_reports_failed_nodes_and_grouped_events(service: Scheduler, cluster: MemoryCluster) -> None:
    pod = cluster.add_pod(gpu_pod("big", mem=30000))
    _, _, result = post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-b", "node-a", "cpu-1"]})
    assert result["NodeNames"] is None and result["Error"] == ""
    assert result["FailedNodes"] == {"node-a": "2/2 CardInsufficientMemory", "node-b": "2/2 CardInsufficientMemory",
                                     "cpu-1": "node unregistered"}
    assert _events(cluster, "FilteringFailed") == ["2 nodes CardInsufficientMemory(node-a,node-b)",
                                                   "no available node, 3 nodes do not meet"]
    assert keys.VGPU_NODE not in (cluster.get_pod("default", "big")["metadata"].get("annotations") or {})


def test_simulation_path_uses_supplied_nodes_only(service: Scheduler, cluster: MemoryCluster) -> None:
    pod = gpu_pod("sim", mem=1000)
    _, _, result = post(service.server.url + "/filter",
                        {"Pod": pod, "Nodes": {"items": [nvidia_node("fresh", gpus=1), {"metadata": {"name": "cpu"}}]}})
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["fresh"]
    assert result["NodeNames"] is None and not cluster.events


def _race_binds(service: Scheduler, cluster: MemoryCluster, names: tuple[str, ...] = ("r1", "r2"),
                    during: Any = None) -> dict[str, dict[str, Any]]:
    """Filter ``names`` onto node-a one by one, then bind them all at once (kube-scheduler binds asynchronously);
    ``during()`` runs while the binds are in flight."""
    for name in names:
        pod = cluster.add_pod(gpu_pod(name, mem=1000))
        assert post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a"]})[2]["NodeNames"] == ["node-a"]
    results: dict[str, dict[str, Any]] = {}
    barrier = threading.Barrier(len(names))

    def bind(name: str) -> None:
        barrier.wait()
        results[name] = post(service.server.url + "/bind",
                             {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-default-{name}",
                              "Node": "node-a"})[2]

    threads = [threading.Thread(target=bind, args=(n,)) for n in names]
    for t in threads:
        t.start()
    if during is not None:
        during()
    for t in threads:
        t.join()
    return results


def test_two_binds_race_for_one_node_lock_without_waiting(cluster: MemoryCluster) -> None:
    """``--node-lock-wait 0``: HAMi's behaviour, the loser fails at once with HAMi's contention error."""
    svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host=None, lock_wait_s=0))
    svc.start()
    try:
        results = _race_binds(svc, cluster)
    finally:
        svc.stop()
    errors = sorted(r["Error"] for r in results.values())
    assert errors[0] == ""
    assert errors[1] == "node node-a has been locked within 5m0s: node lock contention"
    winner = next(n for n, r in results.items() if r["Error"] == "")
    lock = decode_node_lock(cluster.get_node("node-a")["metadata"]["annotations"][keys.NODE_LOCK])
    assert lock.owned_by("default", winner)
    assert len(_events(cluster, "BindingFailed")) == 1


def test_binds_for_one_node_wait_for_the_device_plugin_in_turn(service: Scheduler, cluster: MemoryCluster) -> None:
    """The default ``--node-lock-wait``: three binds for one node at once; a device-plugin stand-in releases the
    lock of each pod it finds bound (as Allocate does). Every bind succeeds, one after another, each taking the
    lock only once the one before it was released; nobody is refused."""
    taken: list[str] = []
    done = threading.Event()

    def device_plugin() -> None:  # release each holder's lock once its pod is bound; stop after three
        while len(taken) < 3:
            annos = cluster.get_node("node-a")["metadata"].get("annotations") or {}
            value = annos.get(keys.NODE_LOCK)
            if value:
                holder = decode_node_lock(value).name or ""
                if cluster.get_pod("default", holder)["spec"].get("nodeName") == "node-a":
                    taken.append(holder)
                    cluster.patch_node("node-a", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
            done.wait(0.005)

    plugin = threading.Thread(target=device_plugin, daemon=True)
    results = _race_binds(service, cluster, ("w1", "w2", "w3"), during=plugin.start)
    plugin.join(10)
    assert {n: r["Error"] for n, r in results.items()} == {"w1": "", "w2": "", "w3": ""}
    assert sorted(taken) == ["w1", "w2", "w3"]  # each held the lock alone, in some order, and was released
    assert not _events(cluster, "BindingFailed")
    assert all(cluster.get_pod("default", n)["spec"]["nodeName"] == "node-a" for n in ("w1", "w2", "w3"))
    assert service.extender.locker.waiting("node-a") == 0
    metrics = get(service.metrics_url)[1]  # the waits as an operator sees them
    assert f"hami_node_lock_waits_total {float(service.extender.locker.waits)}" in metrics
    assert 'hami_node_lock_refused_total{reason="timeout"} 0.0' in metrics and "hami_node_lock_waiting 0.0" in metrics


def test_bind_of_unknown_pod_or_node_is_an_error(service: Scheduler, cluster: MemoryCluster) -> None:
    _, _, result = post(service.server.url + "/bind", {"PodName": "nope", "PodNamespace": "default",
                                                       "PodUID": "uid-nope", "Node": "node-a"})
    assert "not found" in result["Error"]
    pod = cluster.add_pod(gpu_pod("p"))
    assert post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a"]})[2]["NodeNames"] == ["node-a"]
    cluster.delete_node("node-a")  # gone between filter and bind
    _, _, result = post(service.server.url + "/bind", {"PodName": "p", "PodNamespace": "default",
                                                       "PodUID": pod["metadata"]["uid"], "Node": "node-a"})
    assert "not found" in result["Error"] and _events(cluster, "BindingFailed") == ["failed to get node node-a"]


def test_malformed_bodies_get_400_with_a_message(service: Scheduler) -> None:
    url = service.server.url
    for path, raw in (("/filter", b"{not json"), ("/bind", b"[1, 2]"), ("/webhook", b"{\"apiVersion\": 1}"),
                      ("/filter", b"{\"Pod\": \"x\"}"), ("/webhook", b"\xff\xfe")):
        status, ctype, text = post(url + path, None, raw=raw)
        assert status == 400 and ctype.startswith("text/plain"), (path, raw, text)
        assert text.strip() and "Traceback" not in text
    status, _, text = post(url + "/filter", None, raw=b"")
    assert status == 400 and "Please send a request body" in text
    status, _, result = post(url + "/filter", {"NodeNames": ["a"]})
    assert status == 200 and result["Error"] == "extender args missing pod"
    assert get(url + "/healthz")[0] == 200 and get(url + "/readyz")[0] == 200
    assert get(url + "/nope")[0] == 404


def test_restart_rebuilds_usage_from_annotations(service: Scheduler, cluster: MemoryCluster) -> None:
    for name, mem in (("a", 3000), ("b", 5000)):
        pod = cluster.add_pod(gpu_pod(name, mem=mem, cores=20))
        node = post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a", "node-b"]})[2]["NodeNames"][0]
        assert post(service.server.url + "/bind", {"PodName": name, "PodNamespace": "default",
                                                   "PodUID": f"uid-default-{name}", "Node": node})[2]["Error"] == ""
        cluster.patch_node(node, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})  # the device plugin's part
    before = _usage(service.engine)
    assert sum(u[1] for u in before.values()) == 8000
    fresh = make_engine()
    Sync(fresh, cluster).start(background=False)
    assert _usage(fresh) == before
    cluster.delete_pod("default", "a")
    assert sum(u[1] for u in _usage(service.engine).values()) == 5000
