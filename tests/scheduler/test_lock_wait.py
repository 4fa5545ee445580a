"""``--node-lock-wait``: binds wait for a locked node in arrival order, woken by the Node watch.

The locker runs on a :class:`MemoryCluster` whose watch feeds :meth:`NodeLocker.on_node_event`, as the scheduler's
Sync does. The fallback poll is set to a minute, so every wake-up within these tests comes from a watch event
or from the queue moving.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from reliability.rel_helpers import wait_until
from sched_helpers import gpu_pod, nvidia_node

from hami_core.cluster.base import NotFoundError
from hami_core.cluster.memory import MemoryCluster
from hami_core.plugins.types import LockSpec
from hami_core.scheduler.metrics import LockWaitCollector
from hami_core.scheduler.nodelock import MAX_WAITERS, LockContention, NodeLocker
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock

SPEC = LockSpec(keys.NODE_LOCK)


def _watched(names: list[str], wait_s: float) -> tuple[MemoryCluster, NodeLocker]:
    cluster = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod(n) for n in names])
    locker = NodeLocker(cluster, wait_s=wait_s)
    locker.poll_s = 60.0
    cluster.watch(lambda event, node: locker.on_node_event(event, node["metadata"]["name"]), lambda event, pod: None)
    return cluster, locker


def _holder(cluster: MemoryCluster) -> str | None:
    value = (cluster.get_node("n")["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
    return decode_node_lock(value).name if value else None


def _until(predicate: Any) -> None:
    assert wait_until(predicate, timeout_s=10.0, poll_s=0.005), "condition not reached"


def _release(cluster: MemoryCluster) -> None:
    """What the device plugin does after Allocate."""
    cluster.patch_node("n", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})


def test_waiters_take_the_lock_in_arrival_order() -> None:
    names = ["holder", "w0", "w1", "w2", "w3"]
    cluster, locker = _watched(names, wait_s=30)
    locker.acquire("n", gpu_pod("holder"), SPEC)
    errors: list[BaseException] = []

    def take(name: str) -> None:
        try:
            locker.acquire("n", gpu_pod(name), SPEC)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = []
    for i, name in enumerate(names[1:]):
        threads.append(threading.Thread(target=take, args=(name,)))
        threads[-1].start()
        _until(lambda i=i: locker.waiting("n") == i + 1)  # arrived in this order
    order = []
    for _ in names[1:]:
        before = _holder(cluster)
        _release(cluster)
        _until(lambda before=before: _holder(cluster) not in (None, before))
        order.append(_holder(cluster))
    for t in threads:
        t.join(10)
    assert not errors
    assert order == ["w0", "w1", "w2", "w3"]
    assert locker.waiting("n") == 0 and locker.contended >= 4
    samples = _samples(locker)
    assert samples["hami_node_lock_waits_total"] == 4 and samples["hami_node_lock_waiting"] == 0
    assert samples["hami_node_lock_wait_seconds_total"] > 0
    assert [samples[f"hami_node_lock_refused_total{{reason={r}}}"] for r in ("queue_full", "shutdown", "timeout")] \
        == [0, 0, 0]


def _samples(locker: NodeLocker) -> dict[str, float]:
    """The lock-wait metrics as the scheduler's ``/metrics`` exposes them."""
    out = {}
    for family in LockWaitCollector(locker).collect():
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def test_a_full_queue_refuses_at_once_and_waiters_time_out_with_the_contention_error() -> None:
    names = ["holder", "late", *(f"w{i}" for i in range(MAX_WAITERS))]
    cluster, locker = _watched(names, wait_s=1.0)
    locker.acquire("n", gpu_pod("holder"), SPEC)
    outcomes: dict[str, str] = {}

    def take(name: str) -> None:
        try:
            locker.acquire("n", gpu_pod(name), SPEC)
            outcomes[name] = "locked"
        except LockContention as exc:
            outcomes[name] = str(exc)

    threads = [threading.Thread(target=take, args=(f"w{i}",)) for i in range(MAX_WAITERS)]
    for t in threads:
        t.start()
    _until(lambda: locker.waiting("n") == MAX_WAITERS)
    with pytest.raises(LockContention, match=r"^node n has been locked within 5m0s: node lock contention$"):
        locker.acquire("n", gpu_pod("late"), SPEC)  # the queue is full: HAMi's error, without waiting
    for t in threads:
        t.join(10)
    assert set(outcomes.values()) == {"timed out after 1s waiting for node n to be unlocked: node lock contention"}
    assert _holder(cluster) == "holder" and locker.waiting("n") == 0
    samples = _samples(locker)
    assert samples["hami_node_lock_refused_total{reason=queue_full}"] == 1
    assert samples["hami_node_lock_refused_total{reason=timeout}"] == MAX_WAITERS
    assert samples["hami_node_lock_waits_total"] == 0


def test_a_waiter_whose_node_is_deleted_fails_at_once_and_the_node_is_forgotten() -> None:
    cluster, locker = _watched(["holder", "w"], wait_s=30)
    locker.acquire("n", gpu_pod("holder"), SPEC)
    outcome: list[BaseException] = []
    waiter = threading.Thread(target=lambda: outcome.append(_raised(lambda: locker.acquire("n", gpu_pod("w"), SPEC))))
    waiter.start()
    _until(lambda: locker.contended == 1)
    assert "n" in locker._mutexes
    cluster.delete_node("n")
    waiter.join(10)
    assert not waiter.is_alive() and isinstance(outcome[0], NotFoundError)
    assert "n" not in locker._mutexes and locker.waiting() == 0  # nothing of a deleted node is kept


def test_a_pod_outside_any_group_waits_on_a_fake_clock_then_times_out() -> None:
    clock = [1_750_000_000.0]
    cluster = MemoryCluster(nodes=[nvidia_node("n")], pods=[gpu_pod("holder"), gpu_pod("w")])
    locker = NodeLocker(cluster, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s),
                        wait_s=3, retry_timeout_s=0)
    locker.acquire("n", gpu_pod("holder"), SPEC)
    with pytest.raises(LockContention, match=r"^timed out after 3s waiting for node n to be unlocked"):
        locker.acquire("n", gpu_pod("w"), SPEC)
    assert clock[0] >= 1_750_000_003.0 and locker.contended >= 30  # polled every 100 ms of fake time
    locker.wait_s = 0
    with pytest.raises(LockContention, match=r"^node n has been locked within 5m0s"):
        locker.acquire("n", gpu_pod("w"), SPEC)


def _raised(call: Any) -> BaseException | None:
    try:
        call()
    except BaseException as exc:
        return exc
    return None


def test_closing_the_locker_ends_every_wait_at_once() -> None:
    """Shutdown: waiting binds give up with contention (no lock taken) instead of waiting out ``wait_s``."""
    cluster, locker = _watched(["holder", "w0", "w1"], wait_s=600)
    locker.acquire("n", gpu_pod("holder"), SPEC)
    outcome: dict[str, BaseException | None] = {}
    threads = [threading.Thread(target=lambda n=n: outcome.__setitem__(n, _raised(
        lambda: locker.acquire("n", gpu_pod(n), SPEC)))) for n in ("w0", "w1")]
    for t in threads:
        t.start()
    _until(lambda: locker.waiting("n") == 2 and locker.contended >= 1)
    locker.close()
    for t in threads:
        t.join(10)
    assert all(isinstance(e, LockContention) and "shutting down" in str(e) for e in outcome.values()), outcome
    assert _samples(locker)["hami_node_lock_refused_total{reason=shutdown}"] == 2
    assert _holder(cluster) == "holder" and locker.waiting("n") == 0


def test_a_pod_holding_one_lock_does_not_queue_behind_a_waiter_for_it() -> None:
    """Queues are per lock annotation: p holds ``hami.io/mutex.lock`` and q waits for it; p's next lock on the
    same node (another backend's) is taken at once. One queue per node would put p behind q, which waits for p:
    both would stall until q's wait ran out."""
    cluster, locker = _watched(["p", "q"], wait_s=600)
    locker.acquire("n", gpu_pod("p"), SPEC)
    waiter = threading.Thread(target=lambda: _raised(lambda: locker.acquire("n", gpu_pod("q"), SPEC)))
    waiter.start()
    _until(lambda: locker.contended == 1)
    other = LockSpec("cambricon.com/dsmlu.lock", owned=False, expiry_s=120)
    second = threading.Thread(target=lambda: locker.acquire("n", gpu_pod("p"), other))
    second.start()
    second.join(10)
    assert not second.is_alive()
    assert "cambricon.com/dsmlu.lock" in cluster.get_node("n")["metadata"]["annotations"]
    assert locker.waiting("n") == 1  # q still waits for p's first lock
    locker.close()
    waiter.join(10)
