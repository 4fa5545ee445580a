"""Request metrics on the real /metrics endpoint, scraped over HTTP after real filter, bind and webhook calls."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sched_helpers import get, gpu_pod, make_engine, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.scheduler.reqmetrics import MAX_FAILURE_WORDS, RequestMetrics
from hami_core.wire import keys

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(svc: Scheduler) -> Samples:
    assert svc.metrics_url is not None
    status, text = get(svc.metrics_url)
    assert status == 200
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _filter(svc: Scheduler, pod: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
    status, _, result = post(svc.server.url + "/filter", {"Pod": pod, "NodeNames": names or ["node-a", "node-b"]})
    assert status == 200, result
    return result


def _bind(svc: Scheduler, pod: Mapping[str, Any], node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    status, _, result = post(svc.server.url + "/bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                        "PodUID": meta["uid"], "Node": node})
    assert status == 200, result
    return result


def _service(cluster: MemoryCluster, **options: Any) -> Scheduler:
    is_leader = options.pop("is_leader", None)
    return Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host="127.0.0.1",
                                                     metrics_port=0, sync_wait_s=2.0, **options),
                     is_leader=is_leader)


def test_filter_and_bind_are_counted_by_result_and_reason_and_timed_per_phase(
        service: Scheduler, cluster: MemoryCluster) -> None:
    pod = cluster.add_pod(gpu_pod("train-0", mem=8000))
    [node] = _filter(service, pod)["NodeNames"]
    assert _bind(service, pod, node) == {"Error": ""}
    huge = cluster.add_pod(gpu_pod("huge", mem=10**6))
    assert _filter(service, huge)["FailedNodes"]            # unschedulable: no card has a million MiB
    ghost = gpu_pod("ghost", mem=1000)                       # never created: the gate refuses it
    assert _filter(service, ghost)["NodeNames"] is None
    assert _bind(service, ghost, "node-a")["Error"]
    assert post(service.server.url + "/filter", {"Pod": {"metadata": []}})[0] == 400

    s = scrape(service)
    assert value(s, "hami_scheduler_filter_total", result="success", reason="scheduled") == 1
    assert value(s, "hami_scheduler_filter_total", result="unschedulable", reason="no_fit") == 1
    assert value(s, "hami_scheduler_filter_total", result="refused", reason="pod_refused") == 1
    assert value(s, "hami_scheduler_filter_total", result="error", reason="bad_request") == 1
    assert value(s, "hami_scheduler_filter_total", result="error", reason="not_synced") == 0  # there at zero
    for result in ("success", "unschedulable", "refused", "error"):
        assert value(s, "hami_scheduler_filter_duration_seconds_count", result=result) == 1
    assert value(s, "hami_scheduler_filter_duration_seconds_bucket", result="success", le="+Inf") == 1
    # both nodes refused the huge pod, for the memory reason its device plugin gives
    failures = {dict(labels)["reason"]: v for (name, labels), v in s.items()
                if name == "hami_scheduler_filter_node_failures_total"}
    assert sum(failures.values()) == 2 and all(r.isalnum() for r in failures)

    assert value(s, "hami_scheduler_bind_total", result="success", reason="bound") == 1
    assert value(s, "hami_scheduler_bind_total", result="refused", reason="pod_refused") == 1
    for phase in ("pod_lookup", "node_lookup", "node_lock", "fit_check", "apiserver_bind", "total"):
        assert value(s, "hami_scheduler_bind_duration_seconds_count", phase=phase, result="success") == 1, phase
    assert value(s, "hami_scheduler_bind_duration_seconds_count", phase="pod_lookup", result="error") == 1
    assert value(s, "hami_scheduler_bind_duration_seconds_count", phase="total", result="error") == 1
    assert ("hami_scheduler_bind_duration_seconds_count",
            frozenset({("phase", "patch_annotations"), ("result", "success")})) not in s  # filter wrote it
    total = value(s, "hami_scheduler_bind_duration_seconds_sum", phase="total", result="success")
    assert total >= value(s, "hami_scheduler_bind_duration_seconds_sum", phase="node_lock", result="success") > 0

    assert value(s, "hami_scheduler_denials_total", endpoint="filter", reason="pod_refused") == 1
    assert value(s, "hami_scheduler_denials_total", endpoint="bind", reason="pod_refused") == 1
    assert value(s, "hami_scheduler_leader") == 1                      # no --leader-elect: always acting
    assert value(s, "process_resident_memory_bytes") > 0
    assert value(s, "python_gc_objects_collected_total", generation="0") >= 0
    assert any(name == "python_info" for name, _ in s)
    # bounded label sets: no request series names a pod or a node
    request_labels = {v for (name, labels), _ in s.items() if name.startswith("hami_scheduler_") for _, v in labels}
    assert not request_labels & {"train-0", "huge", "ghost", "node-a", "node-b", "default"}


def test_bind_phases_under_write_allocation_bind_include_the_patch(cluster: MemoryCluster) -> None:
    svc = _service(cluster, write_allocation="bind")
    svc.start()
    try:
        pod = cluster.add_pod(gpu_pod("p", mem=1000))
        [node] = _filter(svc, pod)["NodeNames"]
        assert _bind(svc, pod, node) == {"Error": ""}
        s = scrape(svc)
    finally:
        svc.stop()
    assert value(s, "hami_scheduler_bind_duration_seconds_count", phase="patch_annotations", result="success") == 1
    assert value(s, "hami_scheduler_bind_duration_seconds_count", phase="apiserver_bind", result="success") == 1


def test_lock_contention_is_its_own_reason_and_the_lock_phase_fails(cluster: MemoryCluster) -> None:
    svc = _service(cluster, lock_wait_s=0)
    svc.start()
    try:
        first, second = (cluster.add_pod(gpu_pod(n, mem=1000)) for n in ("first", "second"))
        for pod in (first, second):
            assert _filter(svc, pod, ["node-a"])["NodeNames"] == ["node-a"]
        assert _bind(svc, first, "node-a") == {"Error": ""}   # holds node-a's lock until its Allocate
        assert "node lock contention" in _bind(svc, second, "node-a")["Error"]
        s = scrape(svc)
    finally:
        svc.stop()
    assert value(s, "hami_scheduler_bind_total", result="error", reason="lock_contention") == 1
    assert value(s, "hami_scheduler_bind_duration_seconds_count", phase="node_lock", result="error") == 1
    assert value(s, "hami_scheduler_bind_duration_seconds_count", phase="node_lock", result="success") == 1


def _review(svc: Scheduler, operation: str, obj: Any, old: Any = None) -> dict[str, Any]:
    request: dict[str, Any] = {"uid": "u1", "operation": operation, "object": obj, "namespace": "default",
                               "userInfo": {"username": "alice"}}
    if old is not None:
        request["oldObject"] = old
    status, _, body = post(svc.server.url + "/webhook", {"apiVersion": "admission.k8s.io/v1",
                                                         "kind": "AdmissionReview", "request": request})
    assert status == 200, body
    return body["response"]


def test_webhook_reviews_and_denials_are_counted(service: Scheduler) -> None:
    pod = gpu_pod("w", mem=1000)
    pod["spec"].pop("schedulerName")
    assert _review(service, "CREATE", pod)["patch"]                          # mutated: schedulerName set
    forged = gpu_pod("forged", mem=1000)
    forged["metadata"]["annotations"] = {keys.VGPU_NODE: "node-a"}
    assert _review(service, "CREATE", forged)["allowed"] is False
    changed = json.loads(json.dumps(forged))
    changed["metadata"]["annotations"][keys.VGPU_NODE] = "node-b"
    assert _review(service, "UPDATE", changed, old=forged)["allowed"] is False   # alice is not trusted
    assert _review(service, "UPDATE", pod, old=pod)["allowed"] is True
    assert post(service.server.url + "/webhook", {"apiVersion": "v1"})[0] == 400

    s = scrape(service)
    assert value(s, "hami_scheduler_webhook_total", operation="CREATE", result="allowed", reason="mutated") == 1
    assert value(s, "hami_scheduler_webhook_total", operation="CREATE", result="denied",
                 reason="owned_annotation") == 1
    assert value(s, "hami_scheduler_webhook_total", operation="UPDATE", result="denied",
                 reason="owned_annotation") == 1
    assert value(s, "hami_scheduler_webhook_total", operation="UPDATE", result="allowed", reason="unchanged") == 1
    assert value(s, "hami_scheduler_webhook_total", operation="other", result="error", reason="bad_request") == 1
    assert value(s, "hami_scheduler_webhook_duration_seconds_count", result="denied") == 2
    assert value(s, "hami_scheduler_denials_total", endpoint="webhook", reason="owned_annotation") == 2


@pytest.fixture
def token_service(cluster: MemoryCluster, tmp_path: Path) -> Iterator[Scheduler]:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    svc = _service(cluster, extender_token_file=str(token))
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def test_unauthenticated_callers_are_counted_as_denials(token_service: Scheduler) -> None:
    assert post(token_service.server.url + "/filter", {"Pod": gpu_pod("p")})[0] == 401
    assert post(token_service.server.url + "/bind", {"PodName": "p"})[0] == 401
    s = scrape(token_service)
    assert value(s, "hami_scheduler_denials_total", endpoint="filter", reason="unauthenticated") == 1
    assert value(s, "hami_scheduler_denials_total", endpoint="bind", reason="unauthenticated") == 1
    assert value(s, "hami_scheduler_filter_total", result="refused", reason="pod_refused") == 0  # never reached


def test_leader_gauge_follows_the_lease(cluster: MemoryCluster) -> None:
    leading = [False]
    svc = _service(cluster, is_leader=lambda: leading[0])
    svc.start()
    try:
        assert value(scrape(svc), "hami_scheduler_leader") == 0
        leading[0] = True
        # a slow render (a loaded machine) is served again for 3x its duration: poll, boundedly, for the next one
        deadline = time.monotonic() + 10
        while value(scrape(svc), "hami_scheduler_leader") != 1:
            assert time.monotonic() < deadline, "the gauge never followed the lease"
            time.sleep(0.05)
    finally:
        svc.stop()


def test_failure_words_are_a_bounded_vocabulary() -> None:
    metrics = RequestMetrics()
    metrics.node_failure_words([f"Reason{i}" for i in range(MAX_FAILURE_WORDS + 8)])
    metrics.node_failure_words(["pod default/x on node-a", "Reason0"])
    counted = {s.labels["reason"]: s.value for family in metrics.node_failures.collect() for s in family.samples
               if s.name.endswith("_total")}
    assert len(counted) == MAX_FAILURE_WORDS + 1
    assert counted["other"] == 8 + 1 and counted["Reason0"] == 2
