"""``hami.io/filter-reasons``: a refused pod keeps its per-node reasons, bounded, written only when they change and
removed when it binds; over HTTP against a MemoryCluster that counts pod patches."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from sched_helpers import gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.base import NotFoundError
from hami_core.cluster.memory import MemoryCluster
from hami_core.plugins.errors import TemporaryError
from hami_core.scheduler.app import Options, Scheduler
from hami_core.scheduler.reasons import FilterReasons
from hami_core.wire.filterreasons import FILTER_REASONS, MAX_BYTES, MAX_NODES, MAX_NODES_PER_REASON, summarize


class Counting(MemoryCluster):
    """Counts the patches that touch ``hami.io/filter-reasons``; ``fail`` patches raise (then succeed)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reason_patches: list[Any] = []
        self.fail: list[Exception] = []

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        annotations = (patch.get("metadata") or {}).get("annotations") or {}
        if FILTER_REASONS in annotations:
            if self.fail:
                raise self.fail.pop(0)
            self.reason_patches.append(annotations[FILTER_REASONS])
        return super().patch_pod(namespace, name, patch)


def reasons_of(cluster: MemoryCluster, name: str) -> dict[str, Any] | None:
    raw = (cluster.get_pod("default", name)["metadata"].get("annotations") or {}).get(FILTER_REASONS)
    return None if raw is None else json.loads(raw)


# ------------------------------------------------------------------------------------------------ the summary

def test_summary_groups_nodes_by_reason_and_bounds_the_names() -> None:
    failed = {f"n{i:04d}": "2/2 CardInsufficientMemory" for i in range(900)}
    failed.update({f"m{i:04d}": "1/1 CardNotHealth" for i in range(100)})
    failed["x"] = "node unregistered"
    doc = json.loads(summarize(failed, 1001))
    assert doc["nodes"] == 1001 and doc["failed"] == 1001
    groups = [(g["reason"], g["count"], len(g["nodes"]), g["more"]) for g in doc["reasons"]]
    assert groups == [("2/2 CardInsufficientMemory", 900, MAX_NODES_PER_REASON, 900 - MAX_NODES_PER_REASON),
                      ("1/1 CardNotHealth", 100, MAX_NODES_PER_REASON, 100 - MAX_NODES_PER_REASON),
                      ("node unregistered", 1, 1, 0)]
    assert doc["reasons"][0]["nodes"] == ["n0000", "n0001", "n0002", "n0003", "n0004"]  # sorted, first names
    assert doc["more"] == {"reasons": 0, "nodes": 0}


def test_summary_stays_within_its_byte_limit_and_says_what_it_left_out() -> None:
    failed = {f"node-{i:05d}": f"1/8 CardInsufficientMemory, {i}/8 CardTypeMismatch-{i}" for i in range(3000)}
    text = summarize(failed, 3000)
    doc = json.loads(text)
    assert len(text.encode()) <= MAX_BYTES
    named = sum(len(g["nodes"]) for g in doc["reasons"])
    assert named <= MAX_NODES
    assert len(doc["reasons"]) + doc["more"]["reasons"] == 3000
    assert sum(g["count"] for g in doc["reasons"]) + doc["more"]["nodes"] == 3000


def test_summary_is_deterministic_whatever_the_order_of_the_nodes() -> None:
    a = {"n1": "1/1 CardNotHealth", "n2": "1/1 CardNotHealth", "n3": "2/2 CardInsufficientCore"}
    b = dict(reversed(list(a.items())))
    assert summarize(a, 3) == summarize(b, 3)
    assert json.loads(summarize({}, 2, error="calcScore failed")) == {"nodes": 2, "failed": 0,
                                                                    "error": "calcScore failed"}


def test_a_long_reason_is_cut() -> None:
    doc = json.loads(summarize({"q": "node quarantined: " + "x" * 2000}, 1))
    assert len(doc["reasons"][0]["reason"]) <= 300 and doc["reasons"][0]["reason"].endswith("...")


# ------------------------------------------------------------------------------------------------ the writer

def test_writer_writes_once_per_change_and_clears_on_bind() -> None:
    cluster = Counting(pods=[gpu_pod("p")])
    writer = FilterReasons(cluster)
    pod = cluster.get_pod("default", "p")
    writer.refused(pod, {"a": "1/1 CardInsufficientMemory"}, 2)
    assert writer.flush() == 1
    assert reasons_of(cluster, "p")["reasons"][0]["nodes"] == ["a"]
    # retries with the same reasons: from the stale copy (the writer remembers) and from the fresh one
    writer.refused(pod, {"a": "1/1 CardInsufficientMemory"}, 2)
    writer.refused(cluster.get_pod("default", "p"), {"a": "1/1 CardInsufficientMemory"}, 2)
    assert writer.flush() == 0 and len(cluster.reason_patches) == 1
    writer.refused(pod, {"a": "1/1 CardInsufficientMemory", "b": "1/1 CardNotHealth"}, 2)
    assert writer.flush() == 1 and reasons_of(cluster, "p")["failed"] == 2
    writer.bound(pod)
    assert writer.flush() == 1 and reasons_of(cluster, "p") is None
    writer.bound(pod)  # nothing written any more, nothing carried: no write
    assert writer.flush() == 0 and len(cluster.reason_patches) == 3


def test_a_fresh_writer_compares_with_what_the_pod_carries() -> None:
    value = summarize({"a": "1/1 CardNotHealth"}, 1)
    cluster = Counting(pods=[{**gpu_pod("p"), "metadata": {**gpu_pod("p")["metadata"],
                                                            "annotations": {FILTER_REASONS: value}}}])
    writer = FilterReasons(cluster)  # a restarted scheduler remembers nothing
    pod = cluster.get_pod("default", "p")
    writer.refused(pod, {"a": "1/1 CardNotHealth"}, 1)
    assert writer.flush() == 0 and cluster.reason_patches == []
    writer.bound(pod)  # it carries reasons, so they go
    assert writer.flush() == 1 and reasons_of(cluster, "p") is None


def test_latest_refusal_wins_and_a_deleted_pod_is_forgotten() -> None:
    cluster = Counting(pods=[gpu_pod("p"), gpu_pod("q")])
    writer = FilterReasons(cluster)
    p, q = cluster.get_pod("default", "p"), cluster.get_pod("default", "q")
    writer.refused(p, {"a": "1/1 CardNotHealth"}, 1)
    writer.refused(p, {"a": "1/1 CardInsufficientMemory"}, 1)
    writer.refused(q, {"a": "1/1 CardNotHealth"}, 1)
    cluster.delete_pod("default", "q")
    assert writer.flush() == 1  # p once, with its latest reasons; q's patch finds no pod and is dropped
    assert reasons_of(cluster, "p")["reasons"][0]["reason"] == "1/1 CardInsufficientMemory"


def test_a_failed_write_is_retried_then_forgotten() -> None:
    cluster = Counting(pods=[gpu_pod("p")])
    attempts: list[str] = []

    def once_more(what: str, step: Any) -> Any:  # the extender's write retries transient errors; one retry here
        attempts.append(what)
        try:
            return step()
        except TemporaryError:
            return step()

    writer = FilterReasons(cluster, write=once_more)
    pod = cluster.get_pod("default", "p")
    cluster.fail = [TemporaryError("HTTP 503")]
    writer.refused(pod, {"a": "1/1 CardNotHealth"}, 1)
    assert writer.flush() == 1 and reasons_of(cluster, "p") is not None
    assert attempts == [f"patch pod default/p {FILTER_REASONS}"]
    cluster.fail = [PermissionError("forbidden")]
    writer.refused(pod, {"a": "1/1 CardInsufficientMemory"}, 1)
    assert writer.flush() == 0  # logged, and forgotten: the next refusal writes again
    writer.refused(pod, {"a": "1/1 CardInsufficientMemory"}, 1)
    assert writer.flush() == 1
    assert reasons_of(cluster, "p")["reasons"][0]["reason"] == "1/1 CardInsufficientMemory"


def test_not_found_is_dropped_quietly() -> None:
    cluster = Counting()
    writer = FilterReasons(cluster)
    writer.refused(gpu_pod("gone"), {"a": "1/1 CardNotHealth"}, 1)
    assert writer.flush() == 0
    with pytest.raises(NotFoundError):
        cluster.get_pod("default", "gone")


# ------------------------------------------------------------------------------------------------ the service

@pytest.fixture
def cluster() -> Counting:
    return Counting(nodes=[nvidia_node("node-a", mem=8000), nvidia_node("node-b", gpus=1, mem=8000)])


@pytest.fixture
def service(cluster: Counting) -> Iterator[Scheduler]:
    svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host=None))
    svc.extender.locker.backoff_s = 0.001
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def _filter(svc: Scheduler, pod: Mapping[str, Any]) -> dict[str, Any]:
    return post(svc.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a", "node-b"]})[2]


def _wait_flushed(svc: Scheduler) -> None:
    assert svc.extender.reasons is not None
    assert svc.extender.reasons.wait_idle(5.0)  # the writer thread's work is done


def test_the_filter_persists_reasons_once_and_bind_clears_them(service: Scheduler, cluster: Counting) -> None:
    pod = cluster.add_pod(gpu_pod("big", mem=16000))
    assert _filter(service, pod)["FailedNodes"] == {"node-a": "2/2 CardInsufficientMemory",
                                                    "node-b": "1/1 CardInsufficientMemory"}
    _wait_flushed(service)
    doc = reasons_of(cluster, "big")
    assert doc == {"nodes": 2, "failed": 2,
                   "reasons": [{"reason": "1/1 CardInsufficientMemory", "count": 1, "nodes": ["node-b"], "more": 0},
                               {"reason": "2/2 CardInsufficientMemory", "count": 1, "nodes": ["node-a"], "more": 0}],
                   "more": {"reasons": 0, "nodes": 0}}
    for _ in range(3):  # kube-scheduler's retries: no API write while the reasons stay the same
        _filter(service, cluster.get_pod("default", "big"))
        _wait_flushed(service)
    assert len(cluster.reason_patches) == 1

    # room appears (a smaller request in place of the big one, as after an edit-and-recreate): the pod fits, binds,
    # and its reasons go
    cluster.patch_pod("default", "big", {"spec": {"containers": gpu_pod("big", mem=4000)["spec"]["containers"]}})
    fresh = cluster.get_pod("default", "big")
    [node] = _filter(service, fresh)["NodeNames"]
    result = post(service.server.url + "/bind", {"PodName": "big", "PodNamespace": "default",
                                                 "PodUID": "uid-default-big", "Node": node})[2]
    assert result == {"Error": ""}
    _wait_flushed(service)
    assert reasons_of(cluster, "big") is None
    assert cluster.reason_patches[-1] is None


def test_no_reasons_are_written_when_switched_off(cluster: Counting) -> None:
    svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host=None,
                                                    filter_reasons=False))
    svc.start()
    try:
        assert svc.extender.reasons is None
        pod = cluster.add_pod(gpu_pod("big", mem=16000))
        assert _filter(svc, pod)["FailedNodes"]
    finally:
        svc.stop()
    assert cluster.reason_patches == [] and reasons_of(cluster, "big") is None
