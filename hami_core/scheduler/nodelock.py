"""HAMi's node lock protocol (spec §8.2, §8.3) on the :class:`~hami_core.cluster.base.Cluster` interface.

A lock is a Node annotation (``hami.io/mutex.lock`` for most vendors) whose value is
``<RFC3339>,<namespace>,<pod>`` (owned) or only ``<RFC3339>`` (Cambricon's owner-less lock). It is set with
a JSON merge patch carrying ``metadata.resourceVersion``, so two schedulers racing for it cannot both win.

* acquire: no lock → set; held by the same pod → done; expired → break it, then set, unless its holder still
  waits for Allocate (below); held by a pod that is gone, finished (Succeeded, Failed) or being deleted → break
  it, then set; otherwise :class:`LockContention`. Breaking removes exactly the value judged expired or dangling
  (compare-and-delete): two schedulers that both saw the same stale lock cannot remove the fresh lock one of
  them has just set (HAMi's force-release would).
* An expired lock is kept while its holder waits for Allocate (:func:`awaits_allocate`: alive, Pending, bound to
  this node, ``bind-phase=allocating``; HAMi #3097). The lock is the only thing that tells the device plugin
  which pod an Allocate is for (kubelet's request names no pod): a second pod bound while the first still waits
  leaves two pods waiting on one node, and their Allocates can swap devices and memory limits. Expiry is for
  holders whose Allocate will never come: a bind that died before the Binding (the holder is not bound), a
  holder already allocated whose release was lost. A holder that waits forever is one whose kubelet never
  admits it (kubelet down, node unreachable); the node lifecycle controller then evicts (deletes) it, and a
  Terminating holder's lock is broken.
* set/release retry 5 times with exponential backoff (100 ms, doubling, jitter 0.5) on anything but contention.
  A write whose response was lost is detected by re-reading the node: the lock is ours if it carries our
  owner (or, owner-less, exactly the value we wrote).
* PodGroup members wait out contention until ``retry_timeout_s`` (default 28 s); other pods until ``wait_s``
  (``--node-lock-wait``; 0, HAMi's behaviour, fails them at once). HAMi holds the lock from bind until the
  device plugin's Allocate, so under binpack a burst of pods for one node contends for it pod after pod: a bind
  refused for contention goes back to kube-scheduler's backoff (1 s doubling to 10 s, HAMi #1367, #1130), where
  a bind that waits is done one Allocate (~20-100 ms) after the one before it.
* Waiting is event-driven and in order: the binds waiting for one node queue first come, first served, and
  only the head reads the node, when the Node watch reports a change (:meth:`NodeLocker.node_changed`) or
  every ``poll_s`` without one (100 ms, as HAMi's PodGroup retry; 1 s once the scheduler feeds it the
  watch); the rest wait in the queue without calling the API server. At most
  :data:`MAX_WAITERS` wait per node: more fail at once, as without waiting, so that a burst cannot take every
  bind thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from hami_core.cluster.base import Cluster, ConflictError, NotFoundError
from hami_core.cluster.refs import PodRef
from hami_core.cluster.retry import retry as _retry
from hami_core.engine.pods import annotations, metadata
from hami_core.plugins.errors import HamiError, TemporaryError, WireFormatError
from hami_core.plugins.types import LockSpec
from hami_core.wire import keys
from hami_core.wire.lock import NodeLockValue, decode_node_lock, encode_lock_time, encode_node_lock

__all__ = ["DEFAULT_WAIT_S", "MAX_WAITERS", "WATCHED_POLL_S", "LockContention", "NodeLocker", "awaits_allocate",
           "go_duration", "is_pod_group_member", "retry"]

log = logging.getLogger("hami.scheduler.nodelock")

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_RETRY_TIMEOUT_S = 28.0
#: ``--node-lock-wait``: how long a bind of a pod outside any PodGroup waits for a locked node.
DEFAULT_WAIT_S = 10.0
#: Binds that may wait for one node at a time; the next ones fail at once (kube-scheduler retries them).
MAX_WAITERS = 64
ATTEMPTS = 5
BACKOFF_S = 0.1
CONTENTION_POLL_S = 0.1
#: The poll of a waiting bind whose node locker hears the Node watch (:meth:`NodeLocker.node_changed` wakes it
#: at once; the poll only covers an event the watch missed).
WATCHED_POLL_S = 1.0
#: Kept expired locks remembered so as to warn once per lock, not at every waiting bind's retry.
MAX_KEPT_LOGGED = 1024


class LockContention(TemporaryError):
    """Another pod holds the node lock (HAMi's ``ErrNodeLockContention``)."""


def go_duration(seconds: float) -> str:
    """A duration as Go's ``time.Duration.String`` prints whole seconds: ``5m0s``, ``28s``, ``1h0m0s``."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def is_pod_group_member(pod: Mapping[str, Any]) -> bool:
    """True for a PodGroup member: label ``scheduling.x-k8s.io/pod-group`` or ``spec.schedulingGroup``."""
    labels = metadata(pod).get("labels") or {}
    if labels.get(keys.POD_GROUP_LABEL):
        return True
    group = (pod.get("spec") or {}).get("schedulingGroup") or {}
    return bool(isinstance(group, Mapping) and group.get("podGroupName"))


class _Queue:
    """The binds of this process waiting for one lock (a node and a lock annotation), in arrival order, and a
    count of that node's watch events (a waiter sleeps until it changes). Queues are per annotation: a pod that
    holds one backend's lock and waits for another's must not queue behind a pod waiting for the first."""

    __slots__ = ("changed", "tickets", "version")

    def __init__(self, guard: threading.Lock) -> None:
        self.changed = threading.Condition(guard)
        self.tickets: deque[object] = deque()
        self.version = 0


class NodeLocker:
    """Acquires and releases node locks for pods.

    :param cluster: where the Nodes live.
    :param timeout_s: a lock older than this is expired (``--node-lock-timeout``); ``LockSpec.expiry_s``
        overrides it per backend.
    :param retry_timeout_s: how long PodGroup members wait out contention (``--node-lock-retry-timeout``);
        0 disables waiting.
    :param wait_s: how long other pods wait out contention (``--node-lock-wait``); 0 (the default here, HAMi's
        behaviour) fails them at once.
    :param clock: Unix seconds (tests inject a fake).
    :param sleep: backoff between write attempts. A test that injects one (with a fake ``clock``) also waits out
        contention by calling it, on ``clock``'s time; by default waits block on the node's watch events, with
        deadlines on the monotonic clock.
    """

    def __init__(self, cluster: Cluster, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 retry_timeout_s: float = DEFAULT_RETRY_TIMEOUT_S, wait_s: float = 0.0,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] | None = None,
                 attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S) -> None:
        self.cluster = cluster
        self.timeout_s = timeout_s
        self.retry_timeout_s = retry_timeout_s
        self.wait_s = wait_s
        self.clock = clock
        self.sleep = sleep if sleep is not None else time.sleep
        self._fake_time = sleep is not None
        self.attempts = attempts
        self.backoff_s = backoff_s
        self._mutexes: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self._queues: dict[tuple[str, str], _Queue] = {}  # (node, lock annotation) → its waiting binds
        self._queue_guard = threading.Lock()  # the one lock under every queue's condition
        self.poll_s = CONTENTION_POLL_S
        self._closed = False
        self._kept: dict[tuple[str, str], str] = {}  # (node, annotation) → the kept expired lock last logged
        #: attempts that found the lock held and then waited (not those refused at once)
        self.contended = 0
        #: binds that waited and took the lock, and their seconds of waiting in all (``hami_node_lock_wait_*``)
        self.waits = 0
        self.waited_s = 0.0
        #: binds refused after or instead of waiting: ``queue_full``, ``timeout``, ``shutdown``
        self.refused: dict[str, int] = {"queue_full": 0, "timeout": 0, "shutdown": 0}

    # ------------------------------------------------------------------------------------ public
    def acquire(self, node: str, pod: Mapping[str, Any], spec: LockSpec,
                seen: Mapping[str, Any] | None = None, *, seen_fresh: bool = True) -> Mapping[str, Any] | None:
        """Take ``spec``'s lock on ``node`` for ``pod``; raises :class:`LockContention` or another error.

        ``seen`` is the Node as the caller just read it: the first attempt decides from it instead of reading
        the node again (the lock write is a compare-and-swap on its resourceVersion, so a stale ``seen`` costs a
        conflict and a fresh read, never a wrong lock). ``seen_fresh=False`` (a watch cache's copy): ``seen`` may
        only decide to write the lock; a lock it shows, ours or another's, is judged from a fresh read, since a
        stale copy can show this pod's own lock after it was released and taken by another. Returns the Node as
        last read or written (for the next lock on the same node), or None when that is unknown.

        While another pod holds the lock, a PodGroup member waits up to ``retry_timeout_s`` and any other pod up
        to ``wait_s``, queued behind the binds already waiting for ``node`` (see the module's docstring).
        """
        budget = self.retry_timeout_s if is_pod_group_member(pod) and self.retry_timeout_s > 0 else self.wait_s
        if budget <= 0:
            return self._acquire_once(node, pod, spec, seen, seen_fresh)
        ticket = object()
        queued = False  # behind others, or found the lock held: this bind waited
        key = (node, spec.annotation)
        with self._queue_guard:  # find or make the queue and join it in one step: an empty one is dropped
            queue = self._queues.get(key)
            if queue is None:
                queue = self._queues[key] = _Queue(self._queue_guard)
            if not queue.tickets:  # nobody waiting: try at once, as without waiting
                queue.tickets.append(ticket)
            elif len(queue.tickets) >= MAX_WAITERS:
                self.refused["queue_full"] += 1
                log.info("node %s: %d binds already wait for its lock; %s/%s does not", node, len(queue.tickets),
                         *PodRef.of(pod))
                raise self._contention(node, spec)
            else:
                queue.tickets.append(ticket)
                queued = True
                seen, seen_fresh = None, True  # read when our turn comes
        now = self._now()
        deadline = now + budget
        try:
            with self._queue_guard:
                while queue.tickets[0] is not ticket:
                    self._pause(queue, queue.version, deadline, node, budget)
            while True:
                with self._queue_guard:
                    version = queue.version
                try:
                    obj = self._acquire_once(node, pod, spec, seen, seen_fresh)
                    seen_fresh = True
                except LockContention:
                    queued = True
                    with self._queue_guard:
                        self.contended += 1
                        self._pause(queue, version, deadline, node, budget)
                    # decide from the Node watch's copy, if there is one: it woke us, and is as new as its event
                    seen, seen_fresh = self._cached_node(node), False
                    continue
                if queued:
                    waited = self._now() - now
                    with self._queue_guard:
                        self.waits += 1
                        self.waited_s += waited
                    log.debug("node %s: %s/%s waited %.3f s for the lock", node, *PodRef.of(pod), waited)
                return obj
        finally:
            with self._queue_guard:
                queue.tickets.remove(ticket)
                if not queue.tickets:
                    self._queues.pop(key, None)
                queue.changed.notify_all()

    def node_changed(self, node: str) -> None:
        """A watch event for ``node``: wake the binds waiting for its lock (cheap; call it for every event)."""
        with self._queue_guard:
            for (name, _), queue in self._queues.items():  # only while binds wait: a handful at most
                if name == node:
                    queue.version += 1
                    queue.changed.notify_all()

    def on_node_event(self, event: str, node: str) -> None:
        """A Node watch event (``Sync.node_listeners``): a deleted node is forgotten, any other change wakes
        the binds waiting for the node's lock."""
        if event == "DELETED":
            self.forget(node)
        else:
            self.node_changed(node)

    def close(self) -> None:
        """Shutting down: every waiting bind gives up at once with contention (its pod is retried, by this
        scheduler's successor or another replica), rather than take a lock it may no longer be able to release."""
        with self._queue_guard:
            self._closed = True
            for queue in self._queues.values():
                queue.changed.notify_all()

    def waiting(self, node: str | None = None) -> int:
        """How many binds of this process wait for (or are taking) one of ``node``'s locks now (any node's by
        default)."""
        with self._queue_guard:
            return sum(len(q.tickets) for (name, _), q in self._queues.items() if node is None or name == node)

    def release(self, node: str, pod: Mapping[str, Any], spec: LockSpec, *, force: bool = False,
                seen: Mapping[str, Any] | None = None) -> None:
        """Remove the lock if ``pod`` holds it (or anyone, with ``force``; owner-less locks always). ``seen``: the
        Node as read a moment ago (the removal is a compare-and-swap on its resourceVersion; a Node changed since
        is read again), so that a release costs one write and no read."""
        namespace, name = PodRef.of(pod)
        obj = seen if seen is not None else self.cluster.get_node(node)
        value = annotations(obj).get(spec.annotation)
        if not value:
            return
        if not force and "," in value and not value.endswith(f",{namespace},{name}"):
            log.debug("node %s: lock %s is %r, not ours (%s/%s); left alone", node, spec.annotation, value,
                      namespace, name)
            return
        first: list[Mapping[str, Any]] = [obj]

        def step() -> None:
            self._release_step(node, spec, value, first.pop() if first else None)

        with self._mutex(node):
            self._retry(f"release lock on node {node}", step)

    # ------------------------------------------------------------------------------------ waiting
    def _now(self) -> float:
        return self.clock() if self._fake_time else time.monotonic()

    def _pause(self, queue: _Queue, version: int, deadline: float, node: str, budget: float) -> None:
        """With ``_queue_guard`` held: sleep until ``queue``'s node changes after ``version``, the queue moves, or
        the poll interval passes; raise the timeout's contention once ``deadline`` is past."""
        if self._closed:
            self.refused["shutdown"] += 1
            raise LockContention(f"node {node} is locked and the scheduler is shutting down: node lock contention")
        remaining = deadline - self._now()
        if remaining <= 0:
            self.refused["timeout"] += 1
            log.info("node %s: a bind waited %s for the lock and gives up (is the device plugin's Allocate slow?)",
                     node, go_duration(budget))
            raise LockContention(f"timed out after {go_duration(budget)} waiting for node {node} to be unlocked: "
                                 "node lock contention")
        if self._fake_time:
            self._queue_guard.release()
            try:
                self.sleep(self.poll_s)
            finally:
                self._queue_guard.acquire()
            return
        if queue.version == version:
            queue.changed.wait(min(remaining, self.poll_s))

    # ------------------------------------------------------------------------------------ steps
    def _timeout(self, spec: LockSpec) -> float:
        return spec.expiry_s if spec.expiry_s is not None else self.timeout_s

    def _contention(self, node: str, spec: LockSpec) -> LockContention:
        return LockContention(f"node {node} has been locked within {go_duration(self._timeout(spec))}: "
                              "node lock contention")

    def _acquire_once(self, node: str, pod: Mapping[str, Any], spec: LockSpec,
                      seen: Mapping[str, Any] | None = None, seen_fresh: bool = True) -> Mapping[str, Any] | None:
        namespace, name = PodRef.of(pod)
        obj = seen if seen is not None else self.cluster.get_node(node)
        value = annotations(obj).get(spec.annotation)
        if not value:
            return self._set(node, pod, spec, obj)
        try:
            lock = decode_node_lock(value, key=spec.annotation)
        except WireFormatError as exc:
            raise HamiError(f"node {node}: {exc}") from None
        if seen is not None and not seen_fresh and spec.owned and lock.owned_by(namespace, name):
            return self._acquire_once(node, pod, spec)  # "ours" from a cached copy is judged from a fresh read
        mine = spec.owned and lock.owned_by(namespace, name)
        age = self.clock() - lock.time.timestamp()
        if age > self._timeout(spec):
            if mine or lock.legacy or not self._holder_waits(lock.namespace or "", lock.name or "", node):
                log.info("node %s: lock %r expired; breaking it", node, value)
                self._break(node, spec, value)
                return self._set(node, pod, spec)
            self._log_kept(node, spec, value, lock, age)
            raise LockContention(
                f"node {node} is locked by pod {lock.namespace}/{lock.name}, which is bound there and still waits "
                f"for its device plugin's Allocate (locked {go_duration(age)} ago, past the "
                f"{go_duration(self._timeout(spec))} expiry; kept so that two pods' Allocates cannot be "
                "confused): node lock contention")
        if mine:
            return obj
        if not lock.legacy and self._owner_gone(lock.namespace or "", lock.name or ""):
            log.info("node %s: lock %r belongs to a pod that is gone or finished; breaking it", node, value)
            self._break(node, spec, value)
            return self._set(node, pod, spec)
        raise self._contention(node, spec)

    def _read_owner(self, namespace: str, name: str, *,
                    trust_cached: Callable[[Mapping[str, Any]], bool]) -> Mapping[str, Any] | None:
        """The lock owner as the Pod watch shows it when ``trust_cached`` accepts that copy, else as the API server
        has it now; ``None`` when it is gone. A cached copy is trusted only for the answer that keeps the lock:
        the watch brings news of a change to the waiting binds at their next Node event, while a stale copy that
        breaks a lock would put two pods under it."""
        cached = getattr(self.cluster, "cached_pod", None)
        view = cached(namespace, name) if cached is not None else None
        if view is not None and trust_cached(view):
            return view
        try:
            return self.cluster.get_pod(namespace, name)
        except NotFoundError:
            return None

    def _owner_gone(self, namespace: str, name: str) -> bool:
        """The lock's owner will never Allocate: gone, finished (Succeeded or Failed: HAMi #3047; a pod kubelet
        refused at admission is Failed), or being deleted. kubelet admits no pod that is being deleted, so a
        Terminating owner's lock would otherwise hold the node for the owner's whole grace period (found on the
        real API server, where a deleted pod stays Terminating until its kubelet confirms)."""
        owner = self._read_owner(namespace, name, trust_cached=lambda view: not _finished(view))
        return owner is None or _finished(owner)

    def _holder_waits(self, namespace: str, name: str, node: str) -> bool:
        """Whether the holder of an expired lock on ``node`` still waits for its Allocate there."""
        owner = self._read_owner(namespace, name, trust_cached=lambda view: awaits_allocate(view, node))
        return owner is not None and awaits_allocate(owner, node)

    def _log_kept(self, node: str, spec: LockSpec, value: str, lock: NodeLockValue, age: float) -> None:
        """Warn once per kept lock value (waiting binds re-decide at every Node event)."""
        with self._guard:
            if self._kept.get((node, spec.annotation)) == value:
                return
            self._kept[(node, spec.annotation)] = value
            if len(self._kept) > MAX_KEPT_LOGGED:
                self._kept.pop(next(iter(self._kept)))
        log.warning("node %s: lock %s=%r is %s old, past its %s expiry, and is kept: pod %s/%s is bound here and "
                    "still waits for its device plugin's Allocate. No other pod can be bound to the node until that "
                    "pod is allocated, fails or is deleted; is the kubelet or the device plugin on %s down?",
                    node, spec.annotation, value, go_duration(age), go_duration(self._timeout(spec)),
                    lock.namespace, lock.name, node)

    def _set(self, node: str, pod: Mapping[str, Any], spec: LockSpec,
             seen: Mapping[str, Any] | None = None) -> Mapping[str, Any] | None:
        """Write the lock with a compare-and-swap on the Node's resourceVersion. The first attempt decides from
        ``seen`` (read just before); if the node changed since (409), it decides again at once from a fresh read;
        other errors are retried with backoff, each from a fresh read. Returns the Node as written (or found
        ours)."""
        namespace, name = PodRef.of(pod)
        now = datetime.fromtimestamp(self.clock(), tz=UTC).astimezone()
        wanted = encode_node_lock(now, namespace, name) if spec.owned else encode_lock_time(now)

        def attempt(obj: Mapping[str, Any]) -> Mapping[str, Any]:
            current = annotations(obj).get(spec.annotation)
            if current:
                mine = current.endswith(f",{namespace},{name}") if spec.owned else current == wanted
                if mine:
                    return obj
                raise self._contention(node, spec)
            return self.cluster.patch_node(node, {"metadata": {
                "annotations": {spec.annotation: wanted},
                "resourceVersion": metadata(obj).get("resourceVersion")}})

        def step() -> Mapping[str, Any]:
            nonlocal seen
            if seen is not None:
                obj, seen = seen, None
                try:
                    return attempt(obj)
                except ConflictError:
                    pass  # the node changed since it was read: decide again from a fresh read, without backoff
            return attempt(self.cluster.get_node(node))

        with self._mutex(node):
            written = retry(f"lock node {node}", step, attempts=self.attempts, backoff_s=self.backoff_s,
                            sleep=self.sleep)
        log.debug("node %s: %s=%s", node, spec.annotation, wanted)
        return written

    def _break(self, node: str, spec: LockSpec, seen: str) -> None:
        """Remove the lock only while it still is ``seen`` (the value judged expired or dangling)."""
        with self._mutex(node):
            self._retry(f"break lock on node {node}", lambda: self._release_step(node, spec, seen))

    def _release_step(self, node: str, spec: LockSpec, seen: str, obj: Mapping[str, Any] | None = None) -> None:
        """Remove the lock while it is ``seen``, by CAS on ``obj`` (the Node just read; ``None``: read it now)."""
        cached = obj is not None
        if obj is None:
            obj = self.cluster.get_node(node)
        if annotations(obj).get(spec.annotation) != seen:
            return  # vanished or changed: nothing of ours to remove
        try:
            self.cluster.patch_node(node, {"metadata": {
                "annotations": {spec.annotation: None}, "resourceVersion": metadata(obj).get("resourceVersion")}})
        except ConflictError:
            if not cached:
                raise
            self._release_step(node, spec, seen)  # the Node changed since it was read: decide again, fresh

    def _retry(self, what: str, step: Callable[[], None]) -> None:
        retry(what, step, attempts=self.attempts, backoff_s=self.backoff_s, sleep=self.sleep)

    def _cached_node(self, node: str) -> Mapping[str, Any] | None:
        cached = getattr(self.cluster, "cached_node", None)
        return cached(node) if cached is not None else None

    def _mutex(self, node: str) -> threading.Lock:
        with self._guard:
            return self._mutexes.setdefault(node, threading.Lock())

    def forget(self, node: str) -> None:
        """Drop the per-node mutex of a deleted node (and wake its waiters, which then fail on reading it)."""
        with self._guard:
            self._mutexes.pop(node, None)
        self.node_changed(node)


def awaits_allocate(pod: Mapping[str, Any], node: str) -> bool:
    """Whether ``pod`` is bound to ``node`` and waits for its device plugin's Allocate there: not being deleted,
    ``Pending``, ``spec.nodeName == node`` and ``hami.io/bind-phase=allocating`` (bind writes it with the Binding;
    Allocate turns it into ``success`` or ``failed``)."""
    return (not metadata(pod).get("deletionTimestamp") and (pod.get("status") or {}).get("phase") == "Pending"
            and (pod.get("spec") or {}).get("nodeName") == node
            and annotations(pod).get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING)


def _finished(pod: Mapping[str, Any]) -> bool:
    return bool(metadata(pod).get("deletionTimestamp")) or (
        (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"))


def _contention(exc: BaseException) -> bool:
    return isinstance(exc, LockContention)


def retry(what: str, step: Callable[[], Any], *, attempts: int = ATTEMPTS, backoff_s: float = BACKOFF_S,
          sleep: Callable[[float], None] = time.sleep,
          final: Callable[[BaseException], bool] = _contention) -> Any:
    """:func:`hami_core.cluster.retry.retry` with the node lock's rules: ``attempts`` tries with exponential backoff
    (``backoff_s``, doubling, jitter 0.5) on any error for which ``final(error)`` is false (default: all but
    contention); the last error is raised as a :class:`HamiError` naming ``what``."""
    return _retry(what, step, attempts=attempts, backoff_s=backoff_s, sleep=sleep, final=final, logger=log)
