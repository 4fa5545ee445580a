"""Node lock edge cases (lost response, dangling and expired locks, PodGroup wait) and the TLS webhook."""

from __future__ import annotations

import base64
import json
import ssl
from datetime import UTC, datetime
from typing import Any

import pytest
from sched_helpers import apply_patch, gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.plugins.types import LockSpec
from hami_core.scheduler.certs import write_self_signed
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.nodelock import LockContention, NodeLocker, go_duration
from hami_core.scheduler.server import SchedulerServer
from hami_core.scheduler.webhook import Webhook, json_patch
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock, encode_lock_time, encode_node_lock

SPEC = LockSpec(keys.NODE_LOCK)
T0 = 1_750_000_000.0


class LostResponses(MemoryCluster):
    """patch_node applies the patch, then raises (the response was lost) the first ``n`` times."""

    def __init__(self, *args: Any, lose: int = 1, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lose = lose
        self.patches = 0

    def patch_node(self, name: str, patch: Any) -> dict[str, Any]:
        out = super().patch_node(name, patch)
        self.patches += 1
        if self.lose > 0:
            self.lose -= 1
            raise ConnectionError("connection reset by peer")
        return out


def _locker(cluster: MemoryCluster, clock: list[float], **kw: Any) -> NodeLocker:
    return NodeLocker(cluster, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s), **kw)


def _lock(cluster: MemoryCluster, node: str = "n") -> str | None:
    return (cluster.get_node(node)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def _at(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=UTC)


def test_lost_patch_response_still_ends_with_our_lock() -> None:
    cluster = LostResponses(nodes=[nvidia_node("n")])
    _locker(cluster, [T0]).acquire("n", gpu_pod("p"), SPEC)
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "p")
    assert cluster.patches == 1  # re-read showed our lock: no second write


def test_lock_of_deleted_or_finished_pod_is_broken_live_one_contends() -> None:
    clock = [T0]
    cluster = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod("alive"), gpu_pod("p")])
    locker = _locker(cluster, clock)
    cluster.patch_node("n", {"metadata": {"annotations": {keys.NODE_LOCK: encode_node_lock(_at(T0), "default",
                                                                                           "gone")}}})
    locker.acquire("n", gpu_pod("p"), SPEC)
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "p")
    locker.acquire("n", gpu_pod("p"), SPEC)  # same owner: held
    with pytest.raises(LockContention, match=r"^node n has been locked within 5m0s: node lock contention$"):
        locker.acquire("n", gpu_pod("alive"), SPEC)
    cluster.add_pod({**gpu_pod("p"), "status": {"phase": "Succeeded"}})
    locker.acquire("n", gpu_pod("alive"), SPEC)
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "alive")
    # a Terminating owner (deleted, its kubelet has not confirmed) never Allocates either
    terminating = gpu_pod("alive")
    terminating["metadata"]["deletionTimestamp"] = "2025-06-15T00:00:00Z"
    cluster.add_pod(terminating)
    cluster.add_pod(gpu_pod("third"))
    locker.acquire("n", gpu_pod("third"), SPEC)
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "third")
    locker.release("n", gpu_pod("third"), SPEC)
    locker.acquire("n", gpu_pod("alive"), SPEC)
    locker.release("n", gpu_pod("p"), SPEC)  # not ours: left alone
    assert _lock(cluster)
    locker.release("n", gpu_pod("alive"), SPEC)
    assert _lock(cluster) is None


def test_expired_lock_is_broken_and_ownerless_lock_released_regardless() -> None:
    clock = [T0]
    cluster = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod("holder")])
    cluster.patch_node("n", {"metadata": {"annotations": {
        keys.NODE_LOCK: encode_node_lock(_at(T0 - 301), "default", "holder")}}})
    _locker(cluster, clock).acquire("n", gpu_pod("p"), SPEC)
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "p")

    cambricon = LockSpec("cambricon.com/dsmlu.lock", owned=False, expiry_s=120)
    locker = _locker(cluster, clock)
    locker.acquire("n", gpu_pod("p"), cambricon)
    value = cluster.get_node("n")["metadata"]["annotations"]["cambricon.com/dsmlu.lock"]
    assert value == encode_lock_time(_at(T0).astimezone())
    with pytest.raises(LockContention, match="locked within 2m0s"):
        locker.acquire("n", gpu_pod("q"), cambricon)
    locker.release("n", gpu_pod("q"), cambricon)
    assert "cambricon.com/dsmlu.lock" not in cluster.get_node("n")["metadata"]["annotations"]


def test_pod_group_member_waits_out_contention_until_deadline() -> None:
    clock = [T0]
    cluster = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod("holder")])
    locker = _locker(cluster, clock, retry_timeout_s=2)
    locker.acquire("n", gpu_pod("holder"), SPEC)
    member = gpu_pod("m", labels={keys.POD_GROUP_LABEL: "g"})
    with pytest.raises(LockContention, match=r"timed out after 2s waiting for node n to be unlocked"):
        locker.acquire("n", member, SPEC)
    assert clock[0] >= T0 + 2
    assert go_duration(300) == "5m0s" and go_duration(28) == "28s" and go_duration(3600) == "1h0m0s"


def test_bind_rolls_back_when_binding_fails() -> None:
    cluster = MemoryCluster(nodes=[nvidia_node("n")])
    extender = Extender(make_engine(), cluster)
    extender.engine.upsert_node(cluster.get_node("n"))
    pod = _filtered(cluster, extender, "p")
    cluster.patch_pod("default", "p", {"spec": {"nodeName": "elsewhere"}})  # bound by someone else since the filter
    result = extender.bind({"PodName": "p", "PodNamespace": "default", "PodUID": pod["metadata"]["uid"],
                            "Node": "n"})
    assert "already assigned" in result["Error"]
    assert _lock(cluster) is None
    assert [e["reason"] for e in cluster.events] == ["FilteringSucceed", "BindingFailed"]


def test_json_patch_escapes_pointers_and_round_trips() -> None:
    old = {"a/b": 1, "t~x": [1, 2, 3], "keep": {"x": True}, "gone": 0}
    new = {"a/b": 2, "t~x": [1, 2], "keep": {"x": 1}, "new": [{"k": None}]}
    ops = json_patch(old, new)
    assert {"op": "replace", "path": "/a~1b", "value": 2} in ops
    assert {"op": "remove", "path": "/t~0x/2"} in ops
    assert apply_patch(old, ops) == new and json_patch(new, new) == []


def test_webhook_over_tls_sets_scheduler_name_and_exclusive_cores(tmp_path: Any) -> None:
    cert, key = write_self_signed(tmp_path)
    engine = make_engine()
    cluster = MemoryCluster()
    server = SchedulerServer(Extender(engine, cluster), Webhook(engine), "127.0.0.1", 0,
                             cert_file=str(cert), key_file=str(key))
    server.start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        pod = gpu_pod("w")
        pod["spec"]["schedulerName"] = "default-scheduler"
        url = f"https://localhost:{server.address[1]}/webhook"
        for version in ("admission.k8s.io/v1", "admission.k8s.io/v1beta1"):
            review = {"apiVersion": version, "kind": "AdmissionReview",
                      "request": {"uid": "u-1", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": pod}}
            status, _, out = post(url, review, context=ctx)
            assert status == 200 and out["apiVersion"] == version and out["kind"] == "AdmissionReview"
            response = out["response"]
            assert response["uid"] == "u-1" and response["allowed"] is True and response["patchType"] == "JSONPatch"
            patched = apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
            assert patched["spec"]["schedulerName"] == "hami-scheduler"
            assert patched["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"

        ignored = {**pod, "metadata": {**pod["metadata"], "labels": {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}}}
        out = post(url, {"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-2", "object": ignored}},
                   context=ctx)[2]
        assert out["response"]["allowed"] is True and "patch" not in out["response"]
        out = post(url, {"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-3", "object": "junk"}},
                   context=ctx)[2]
        assert out["response"]["allowed"] is False and out["response"]["status"]["code"] == 400
        bare = {**pod, "spec": {"containers": []}}
        out = post(url, {"apiVersion": "admission.k8s.io/v1", "request": {"uid": "u-4", "object": bare}},
                   context=ctx)[2]
        status = out["response"]["status"]
        assert (status["code"], status["reason"]) == (403, "Forbidden")
        assert status["message"].endswith("pod has no containers")
    finally:
        server.shutdown()


class RacedNode(MemoryCluster):
    """Counts reads; after the ``race_after``-th read of node ``n`` another replica takes the node lock (the read
    the caller holds is then stale)."""

    def __init__(self, *args: Any, race_after: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reads = 0
        self.race_after = race_after
        self.race = {keys.NODE_LOCK: encode_node_lock(datetime.fromtimestamp(T0, tz=UTC), "default", "other")}

    def get_node(self, name: str) -> dict[str, Any]:
        out = super().get_node(name)
        self.reads += 1
        if self.reads == self.race_after:
            super().patch_node(name, {"metadata": {"annotations": self.race}})
        return out


def _filtered(cluster: MemoryCluster, ext: Extender, name: str) -> dict[str, Any]:
    pod = cluster.add_pod(gpu_pod(name))
    assert ext.filter({"Pod": pod, "NodeNames": ["n"]})["NodeNames"] == ["n"]
    return pod


def _filtered_on_raced_node() -> tuple[RacedNode, Extender, list[float]]:
    """Pod ``p`` filtered onto node ``n`` of a :class:`RacedNode`; the extender's backoff sleeps are recorded."""
    cluster = RacedNode(nodes=[nvidia_node("n")], pods=[gpu_pod("other")])
    engine = make_engine(clock=lambda: T0)
    engine.upsert_node(cluster.get_node("n"))
    slept: list[float] = []
    ext = Extender(engine, cluster, clock=lambda: T0, sleep=slept.append)
    _filtered(cluster, ext, "p")
    return cluster, ext, slept


_BIND_P = {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p", "Node": "n"}


def test_bind_reads_the_node_once_and_locks_from_that_read() -> None:
    cluster, ext, _ = _filtered_on_raced_node()
    cluster.reads = 0
    assert ext.bind(_BIND_P) == {"Error": ""}
    assert cluster.reads == 1  # one GET of the Node; the lock is a compare-and-swap on that read
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "p")


def test_a_lock_taken_after_binds_read_is_not_overwritten() -> None:
    cluster, ext, slept = _filtered_on_raced_node()
    cluster.reads, cluster.race_after = 0, 1  # the other replica locks right after bind's read
    result = ext.bind(_BIND_P)
    assert "node lock contention" in result["Error"]
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "other")  # its lock stands
    assert not cluster.get_pod("default", "p")["spec"].get("nodeName")
    assert slept == []  # a stale read is a conflict to re-decide at once, not an error to back off from


def test_a_node_changed_after_binds_read_is_locked_from_a_fresh_read_at_once() -> None:
    cluster, ext, slept = _filtered_on_raced_node()
    cluster.reads, cluster.race_after = 0, 1
    cluster.race = {"example.com/unrelated": "changed"}  # e.g. the device plugin's heartbeat
    assert ext.bind(_BIND_P) == {"Error": ""}
    assert cluster.reads == 2  # bind's read, then one fresh read after the conflict
    assert decode_node_lock(_lock(cluster) or "").owned_by("default", "p") and slept == []
    assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n"
