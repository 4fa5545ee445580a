"""ResourceQuota end to end (spec §11) through the real scheduler service over HTTP on an in-memory cluster: quota
objects reach the engine through the watch, /filter refuses what would exceed them, /webhook denies a pod whose
request alone does, and /metrics shows usage and limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sched_helpers import get, gpu_pod, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Scheduler

NS = "team"


def resource_quota(name: str, hard: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": NS},
            "spec": {"hard": hard}}


@pytest.fixture
def cluster() -> MemoryCluster:
    """Overrides conftest's: one node and a 10,000 MiB quota in NS (conftest's ``service`` runs on it)."""
    return MemoryCluster(nodes=[nvidia_node("node-a")],
                         quotas=[resource_quota("gpu", {"limits.nvidia.com/gpumem": "10000"})])


def _filter(svc: Scheduler, pod: dict[str, Any]) -> dict[str, Any]:
    status, _, result = post(svc.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a"]})
    assert status == 200
    return result


def _metric(svc: Scheduler, prefix: str) -> list[str]:
    return [line for line in get(svc.metrics_url)[1].splitlines() if line.startswith(prefix)]


def test_second_pod_is_refused_at_filter_until_the_first_is_deleted(service: Scheduler,
                                                                     cluster: MemoryCluster) -> None:
    first = cluster.add_pod(gpu_pod("first", mem=8000, namespace=NS))
    assert _filter(service, first)["NodeNames"] == ["node-a"]
    second = cluster.add_pod(gpu_pod("second", mem=8000, namespace=NS))
    refused = _filter(service, second)
    assert refused["NodeNames"] is None and refused["Error"] == ""
    assert refused["FailedNodes"] == {"node-a": "2/2 ResourceQuotaNotFit"}
    used, cores = sorted(_metric(service, 'hami_resource_quota_used{'), key=lambda m: "gpucores" in m)
    assert 'namespace="team"' in used and 'quota_name="nvidia.com/gpumem"' in used and 'limit="10000"' in used
    assert float(used.rsplit(" ", 1)[1]) == 8000
    assert 'quota_name="nvidia.com/gpucores"' in cores and 'limit="0"' in cores  # booked, not limited
    [limit] = _metric(service, 'hami_resource_quota_limit{')
    assert 'quota_name="nvidia.com/gpumem"' in limit and float(limit.rsplit(" ", 1)[1]) == 10000

    cluster.delete_pod(NS, "first")  # the watch releases its booking and with it the namespace's usage
    assert _filter(service, second)["NodeNames"] == ["node-a"]


def test_quota_changes_arrive_through_the_watch(service: Scheduler, cluster: MemoryCluster) -> None:
    pod = cluster.add_pod(gpu_pod("p", mem=12000, namespace=NS))
    assert _filter(service, pod)["FailedNodes"] == {"node-a": "2/2 ResourceQuotaNotFit"}
    cluster.add_quota(resource_quota("gpu", {"limits.nvidia.com/gpumem": "20000"}))  # raised
    assert _filter(service, pod)["NodeNames"] == ["node-a"]
    assert service.engine.quotas.limit(NS, "nvidia.com/gpumem") == 20000
    cluster.add_quota(resource_quota("cores", {"limits.nvidia.com/gpucores": "0"}))  # a second object, 0 blocks
    other = cluster.add_pod(gpu_pod("o", mem=10, cores=1, namespace=NS))
    assert _filter(service, other)["FailedNodes"] == {"node-a": "2/2 ResourceQuotaNotFit"}
    cluster.delete_quota(NS, "cores")
    assert _filter(service, other)["NodeNames"] == ["node-a"]


def test_bad_quantity_is_ignored_with_a_warning(service: Scheduler, cluster: MemoryCluster,
                                                caplog: pytest.LogCaptureFixture) -> None:
    cluster.add_quota(resource_quota("gpu", {"limits.nvidia.com/gpumem": "ten"}))
    assert any("team/gpu" in r.getMessage() and "limits.nvidia.com/gpumem" in r.getMessage()
               for r in caplog.records)
    pod = cluster.add_pod(gpu_pod("p", mem=12000, namespace=NS))
    assert _filter(service, pod)["NodeNames"] == ["node-a"]  # the object no longer limits memory
    assert get(service.server.url + "/healthz")[0] == 200


def test_webhook_denies_a_pod_whose_request_alone_exceeds_the_quota(service: Scheduler) -> None:
    def review(pod: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u-1", "namespace": NS, "operation": "CREATE", "object": pod}}
        status, _, out = post(service.server.url + "/webhook", body)
        assert status == 200
        return out["response"]

    big = gpu_pod("big", gpus=2, mem=6000, namespace=NS)
    del big["metadata"]["namespace"]  # the review's namespace counts
    denied = review(big)
    assert denied["allowed"] is False
    assert denied["status"] == {"code": 403, "reason": "Forbidden", "message": "exceeding resource quota"}
    assert review(gpu_pod("fits", gpus=2, mem=5000, namespace=NS))["allowed"] is True
    pct = gpu_pod("pct", namespace=NS)
    pct["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "100"
    assert review(pct)["allowed"] is True  # percentage-only memory counts 0 at admission


def test_cluster_file_loads_resource_quotas(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("apiVersion: v1\nkind: List\nitems:\n"
                    "- {apiVersion: v1, kind: ResourceQuota, metadata: {name: q, namespace: team},\n"
                    "   spec: {hard: {limits.nvidia.com/gpumem: '100'}}}\n"
                    "- {apiVersion: v1, kind: Node, metadata: {name: n}}\n", encoding="utf-8")
    cluster = MemoryCluster.from_file(path)
    [q] = cluster.list_resource_quotas()
    assert q["metadata"]["namespace"] == "team" and q["spec"]["hard"] == {"limits.nvidia.com/gpumem": "100"}
    seen: list[tuple[str, str]] = []
    cluster.watch_resource_quotas(lambda event, obj: seen.append((event, obj["metadata"]["name"])))
    cluster.add_quota({"metadata": {"name": "r", "namespace": "team"}, "spec": {}})
    cluster.delete_quota("team", "q")
    assert seen == [("ADDED", "q"), ("ADDED", "r"), ("DELETED", "q")]
