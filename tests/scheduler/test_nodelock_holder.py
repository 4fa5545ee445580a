"""Who may take a locked node: an expired lock is kept while its holder still waits for Allocate (HAMi #3097),
and a lock held by a finished pod (Succeeded or Failed, HAMi #3047), a deleted or a Terminating one is dangling.

The device plugin can tell which pod an Allocate is for only while one pod per node waits for it; a second pod
bound under a broken expired lock made two pods' Allocates swap devices and memory limits.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from sched_helpers import gpu_pod, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.plugins.types import LockSpec
from hami_core.scheduler.nodelock import LockContention, NodeLocker, awaits_allocate
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock, encode_lock_time, encode_node_lock

SPEC = LockSpec(keys.NODE_LOCK)
T0 = 1_750_000_000.0
EXPIRED = T0 + 301  # the clock past the default 300 s expiry of a lock taken at T0


def _holder(phase: str = "Pending", node: str | None = "n", bind_phase: str | None = keys.BIND_PHASE_ALLOCATING,
            deleting: bool = False) -> dict[str, Any]:
    pod = gpu_pod("holder")
    if node is not None:
        pod["spec"]["nodeName"] = node
    if bind_phase is not None:
        pod["metadata"]["annotations"] = {keys.BIND_PHASE: bind_phase, keys.BIND_TIME: str(int(T0))}
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2025-06-15T00:00:00Z"
    pod["status"] = {"phase": phase}
    return pod


def _cluster(holder: dict[str, Any] | None, lock: str | None = None) -> MemoryCluster:
    cluster = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod("p"), *([holder] if holder else [])])
    value = lock or encode_node_lock(datetime.fromtimestamp(T0, tz=UTC), "default", "holder")
    cluster.patch_node("n", {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
    return cluster


def _owner(cluster: MemoryCluster) -> str | None:
    value = (cluster.get_node("n")["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
    return decode_node_lock(value).name if value else None


def _locker(cluster: Any, now: float) -> NodeLocker:
    return NodeLocker(cluster, clock=lambda: now, sleep=lambda s: None)


def test_expired_lock_of_a_holder_waiting_for_allocate_is_kept(caplog: pytest.LogCaptureFixture) -> None:
    cluster = _cluster(_holder())
    locker = _locker(cluster, EXPIRED)
    with caplog.at_level(logging.WARNING, "hami.scheduler.nodelock"):
        for _ in range(3):  # a waiting bind asks again at every Node event
            with pytest.raises(LockContention) as err:
                locker.acquire("n", gpu_pod("p"), SPEC)
    assert str(err.value) == (
        "node n is locked by pod default/holder, which is bound there and still waits for its device plugin's "
        "Allocate (locked 5m1s ago, past the 5m0s expiry; kept so that two pods' Allocates cannot be confused): "
        "node lock contention")
    assert _owner(cluster) == "holder"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once per kept lock, not once per retry
    assert "pod default/holder is bound here and still waits for its device plugin's Allocate" in warnings[0]
    assert "is the kubelet or the device plugin on n down?" in warnings[0]


@pytest.mark.parametrize(("why", "holder"), [
    ("never bound (its scheduler died before the Binding)", _holder(node=None)),
    ("bound to another node", _holder(node="elsewhere")),
    ("already allocated, its release lost", _holder(bind_phase=keys.BIND_PHASE_SUCCESS)),
    ("its Allocate failed", _holder(bind_phase=keys.BIND_PHASE_FAILED)),
    ("no bind phase", _holder(bind_phase=None)),
    ("admitted and running", _holder(phase="Running")),
    ("Succeeded", _holder(phase="Succeeded")),
    ("Failed (kubelet refused it)", _holder(phase="Failed")),
    ("Terminating", _holder(deleting=True)),
    ("deleted", None),
])
def test_expired_lock_of_a_holder_that_waits_for_no_allocate_is_broken(why: str, holder: Any) -> None:
    cluster = _cluster(holder)
    _locker(cluster, EXPIRED).acquire("n", gpu_pod("p"), SPEC)
    assert _owner(cluster) == "p", why


def test_a_waiting_holder_keeps_its_lock_only_once_expired_and_not_before() -> None:
    cluster = _cluster(_holder())
    with pytest.raises(LockContention, match=r"^node n has been locked within 5m0s: node lock contention$"):
        _locker(cluster, T0 + 10).acquire("n", gpu_pod("p"), SPEC)  # HAMi's contention within the expiry


def test_own_expired_lock_is_taken_again_and_an_ownerless_one_broken() -> None:
    cluster = _cluster(_holder())
    locker = _locker(cluster, EXPIRED)
    locker.acquire("n", _holder(), SPEC)  # the holder's own lock: re-stamped
    assert decode_node_lock(cluster.get_node("n")["metadata"]["annotations"][keys.NODE_LOCK]).time.timestamp() == (
        int(EXPIRED))
    legacy = _cluster(_holder(), lock=encode_lock_time(datetime.fromtimestamp(T0, tz=UTC)))
    _locker(legacy, EXPIRED).acquire("n", gpu_pod("p"), SPEC)  # no owner to ask: expiry decides, as in HAMi
    assert _owner(legacy) == "p"


class Watched(MemoryCluster):
    """A cluster whose Pod watch shows ``cached`` for the holder (what ``KubeCluster.cached_pod`` gives); counts
    the holder's fresh reads."""

    def __init__(self, cached: dict[str, Any] | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cached, self.reads = cached, 0

    def cached_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cached if name == "holder" else None

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += name == "holder"
        return super().get_pod(namespace, name)


def _watched(cached: dict[str, Any] | None, stored: dict[str, Any]) -> Watched:
    cluster = Watched(cached, nodes=[nvidia_node("n")], pods=[gpu_pod("p"), stored])
    value = encode_node_lock(datetime.fromtimestamp(T0, tz=UTC), "default", "holder")
    cluster.patch_node("n", {"metadata": {"annotations": {keys.NODE_LOCK: value}}})
    return cluster


def test_a_watch_copy_may_keep_an_expired_lock_but_never_break_it() -> None:
    # the watch shows the holder waiting: kept without a read (it brings news of a change at the next event)
    cluster = _watched(_holder(), _holder(bind_phase=keys.BIND_PHASE_SUCCESS))
    with pytest.raises(LockContention, match="still waits"):
        _locker(cluster, EXPIRED).acquire("n", gpu_pod("p"), SPEC)
    assert cluster.reads == 0
    # the watch lags and shows the holder unbound, but it is bound and waits: the fresh read keeps the lock
    cluster = _watched(_holder(node=None), _holder())
    with pytest.raises(LockContention, match="still waits"):
        _locker(cluster, EXPIRED).acquire("n", gpu_pod("p"), SPEC)
    assert cluster.reads == 1 and _owner(cluster) == "holder"


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_lock_of_a_finished_holder_is_dangling_within_its_expiry(phase: str) -> None:
    """HAMi #3047: a pod that finished (or that kubelet refused at admission) will never Allocate."""
    cluster = _cluster(_holder(phase=phase, bind_phase=keys.BIND_PHASE_SUCCESS))
    _locker(cluster, T0 + 10).acquire("n", gpu_pod("p"), SPEC)
    assert _owner(cluster) == "p"
    # the same when the Pod watch already shows it finished, and when it still shows it alive but it is not
    for cached in (_holder(phase=phase), _holder()):
        watched = _watched(cached, _holder(phase=phase))
        if cached["status"]["phase"] == "Pending":
            with pytest.raises(LockContention):  # the watch shows it alive: taken as alive until its event
                _locker(watched, T0 + 10).acquire("n", gpu_pod("p"), SPEC)
            watched.cached = _holder(phase=phase)  # the event arrives
        _locker(watched, T0 + 10).acquire("n", gpu_pod("p"), SPEC)
        assert _owner(watched) == "p"


def test_awaits_allocate() -> None:
    assert awaits_allocate(_holder(), "n")
    assert not awaits_allocate(_holder(), "other")
    assert not awaits_allocate(_holder(node=None), "n")
    assert not awaits_allocate(_holder(bind_phase=keys.BIND_PHASE_SUCCESS), "n")
    assert not awaits_allocate(_holder(phase="Running"), "n")
    assert not awaits_allocate(_holder(deleting=True), "n")
