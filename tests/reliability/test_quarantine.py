"""Quarantine visibility: an allocation annotation that cannot be decoded quarantines its node in the engine; the
scheduler service also records Kubernetes Events on the pod and the node and exports ``hami_node_quarantined``.
Runs the real service (HTTP extender and metrics on 127.0.0.1) on a MemoryCluster."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from scheduler.sched_helpers import get, gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.wire import keys

BAD = "GPU-node-a-0,NVIDIA,notanumber,0:;"


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])


@pytest.fixture
def service(cluster: MemoryCluster) -> Iterator[Scheduler]:
    svc = Scheduler(make_engine(), cluster, Options(port=0, metrics_host="127.0.0.1", metrics_port=0,
                                                     sync_wait_s=2.0))
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def _quarantine_metric(url: str) -> dict[str, float]:
    out = {}
    for line in get(url)[1].splitlines():
        if line.startswith("hami_node_quarantined{"):
            node = line.split('node="', 1)[1].split('"', 1)[0]
            assert 'zone="vGPU"' in line
            out[node] = float(line.rsplit(" ", 1)[1])
    return out


def _metric_becomes(url: str, want: dict[str, float], timeout: float = 5.0) -> dict[str, float]:
    # /metrics spaces out renders that took over 5 ms (three times their duration; scheduler.metrics.SPACING): on a
    # loaded machine a read right after a change may get the previous render. The value must arrive, soon.
    deadline = time.monotonic() + timeout
    while (got := _quarantine_metric(url)) != want and time.monotonic() < deadline:
        time.sleep(0.05)
    return got


def _events(cluster: MemoryCluster, reason: str) -> list[tuple[str, str, str, str]]:
    return [(e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"], e["message"])
            for e in cluster.events if e["reason"] == reason]


def test_undecodable_allocation_gives_events_and_a_metric_until_fixed(service: Scheduler,
                                                                      cluster: MemoryCluster) -> None:
    assert _metric_becomes(service.metrics_url, {"node-a": 0.0, "node-b": 0.0}) == {"node-a": 0.0, "node-b": 0.0}
    bad = gpu_pod("bad")
    bad["metadata"]["annotations"] = {keys.VGPU_NODE: "node-a", keys.VGPU_DEVICES_ALLOCATED: BAD}
    bad["spec"]["nodeName"] = "node-a"
    bad["status"] = {"phase": "Running"}
    cluster.add_pod(bad)

    events = _events(cluster, "NodeQuarantined")
    assert [(t, k, n) for t, k, n, _ in events] == [("Warning", "Pod", "bad"), ("Warning", "Node", "node-a")]
    assert all("invalid memory field" in m and keys.VGPU_DEVICES_ALLOCATED in m for *_, m in events)
    assert "node node-a quarantined" in events[0][3]
    assert _metric_becomes(service.metrics_url, {"node-a": 1.0, "node-b": 0.0}) == {"node-a": 1.0, "node-b": 0.0}
    cluster.add_pod({**cluster.get_pod("default", "bad"), "status": {"phase": "Running", "podIP": "10.0.0.1"}})
    assert len(_events(cluster, "NodeQuarantined")) == 2  # announced once, not on every update

    pod = cluster.add_pod(gpu_pod("new", mem=1000))
    result = post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a"]})[2]
    assert result["NodeNames"] is None and "node quarantined" in result["FailedNodes"]["node-a"]

    cluster.delete_pod("default", "bad")  # the undecodable allocation is gone: the node takes pods again
    assert _events(cluster, "NodeQuarantineLifted") == [
        ("Normal", "Node", "node-a", "pod default/bad no longer holds an undecodable allocation on this node")]
    assert _metric_becomes(service.metrics_url, {"node-a": 0.0, "node-b": 0.0}) == {"node-a": 0.0, "node-b": 0.0}
    result = post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a"]})[2]
    assert result["NodeNames"] == ["node-a"]


def test_quarantine_found_by_the_registration_pass_is_announced(cluster: MemoryCluster) -> None:
    bad = gpu_pod("bad")
    bad["metadata"]["annotations"] = {keys.VGPU_NODE: "node-b", keys.VGPU_DEVICES_ALLOCATED: BAD}
    cluster.add_pod(bad)
    svc = Scheduler(make_engine(), cluster, Options(port=0, metrics_host=None))
    svc.sync.start(background=False)  # the initial watch listing and the first registration pass
    try:
        assert [(k, n) for _, k, n, _ in _events(cluster, "NodeQuarantined")] == [("Pod", "bad"), ("Node", "node-b")]
    finally:
        svc.cluster.close()


def test_registration_pass_drops_the_booking_of_a_pod_that_is_gone(cluster: MemoryCluster) -> None:
    """Regression: a reservation made after the pod's DELETED event had been handled was never released."""
    svc = Scheduler(make_engine(), cluster, Options(port=0, metrics_host=None))
    svc.sync.start(background=False)
    try:
        ghost = gpu_pod("ghost", mem=4000)  # deleted before its filter's reservation landed
        with svc.lock:
            decision = svc.engine.schedule(ghost, limit=1)
            svc.engine.reserve(ghost, decision)
            assert len(svc.engine.ledger) == 1
        svc.sync.resync()
        with svc.lock:
            assert len(svc.engine.ledger) == 0
            assert all(d.usedmem == 0 for s in svc.engine.nodes.values() for d in s.by_uuid.values())
    finally:
        svc.cluster.close()


def test_bind_onto_a_node_with_an_undecodable_bound_allocation_is_refused(service: Scheduler,
                                                                          cluster: MemoryCluster) -> None:
    pod = cluster.add_pod(gpu_pod("p", mem=1000))
    assert post(service.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a"]})[2]["NodeNames"] == ["node-a"]
    bad = gpu_pod("bad")  # appears between p's filter and its bind
    bad["metadata"]["annotations"] = {keys.VGPU_NODE: "node-a", keys.VGPU_DEVICES_ALLOCATED: BAD}
    bad["spec"]["nodeName"] = "node-a"
    cluster.add_pod(bad)
    result = post(service.server.url + "/bind", {"PodName": "p", "PodNamespace": "default",
                                                  "PodUID": pod["metadata"]["uid"], "Node": "node-a"})[2]
    assert result["Error"].startswith("node node-a is quarantined: pod default/bad has an undecodable allocation")
    assert not cluster.get_pod("default", "p")["spec"].get("nodeName")
    assert keys.NODE_LOCK not in cluster.get_node("node-a")["metadata"]["annotations"]
