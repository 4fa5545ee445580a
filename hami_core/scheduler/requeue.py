"""Requeue nudges: make kube-scheduler retry the pods hami refused once devices they waited for are released.

kube-scheduler cannot ask an extender what would make a refused pod fit. It marks a pod an extender refused with
the pseudo-plugin ``Extender``, and such a pod leaves the unschedulable pool on the next cluster event of any
kind, or after ``podMaxInUnschedulablePodsDuration`` (5 minutes). When a device-holding pod goes away, both
kube-scheduler and hami learn it from their own watches. If kube-scheduler's watch is first, it retries the
waiting pod at once, hami (not yet aware of the release) refuses it again, and nothing else may happen in the
cluster for minutes: the pod waits although its devices are free (the e2e tier caught this on a quiet cluster).

The nudge closes that race: when hami sees a release that happened *after* it last refused some pod still
pending, it writes ``hami.io/devices-released-at`` on the node that freed devices. A Node annotation change is a
cluster event (``UpdateNodeAnnotation``), so kube-scheduler requeues every extender-refused pod, and hami, now
aware of the release, answers from the new state. Nudges are coalesced (at most one per ``min_interval_s``
whatever the churn) and only happen while refused pods are waiting, so a cluster without pending pods never
sees one. The annotation is hami's own and read by nobody; HAMi's components ignore it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from hami_core.cluster.base import Cluster

__all__ = ["DEFAULT_NUDGE_INTERVAL_S", "RELEASED_ANNOTATION", "RequeueNudger"]

log = logging.getLogger("hami.scheduler.requeue")

#: Node annotation a nudge writes (RFC 3339 time of the release hami saw).
RELEASED_ANNOTATION = "hami.io/devices-released-at"
#: ``--requeue-nudge`` default: at most one nudge a second, whatever the churn.
DEFAULT_NUDGE_INTERVAL_S = 1.0
#: Refused pods remembered at most (a bound: a flood of unschedulable pods must not grow memory without limit).
MAX_REFUSED = 100_000


class RequeueNudger:
    """Tracks the pods hami refused and nudges kube-scheduler after a release they may be waiting for.

    Thread-safe. :meth:`refused` when a filter left a pod with no node, :meth:`settled` when a pod was bound or
    deleted, :meth:`released` when a booking ended on a node. The write happens on a daemon thread started by
    :meth:`start` (or inline through :meth:`flush`, for tests and shutdown).
    """

    def __init__(self, cluster: Cluster, *, min_interval_s: float = DEFAULT_NUDGE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 on_nudge: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.min_interval_s = min_interval_s
        self._clock, self._wall = clock, wall
        self._on_nudge = on_nudge
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        #: pod key → monotonic time of its latest refusal (the bound evicts the oldest)
        self._refused: dict[str, float] = {}
        #: node whose release is waiting to be announced (any node's change requeues every refused pod)
        self._pending: str | None = None
        self._last_nudge = -float("inf")
        self._stopped = False
        self._thread: threading.Thread | None = None
        #: nudges written (for metrics and tests)
        self.nudges = 0

    # ------------------------------------------------------------------------------------------ events
    def refused(self, key: str) -> None:
        """The filter found no node for pod ``key``: kube-scheduler parks it until the next cluster event."""
        with self._lock:
            if len(self._refused) >= MAX_REFUSED and key not in self._refused:
                self._refused.pop(next(iter(self._refused)))
            self._refused[key] = self._clock()

    def settled(self, key: str) -> None:
        """Pod ``key`` was bound or deleted: it waits for nothing any more."""
        with self._lock:
            self._refused.pop(key, None)

    def released(self, node: str) -> None:
        """A booking on ``node`` ended now: devices there are free. Nudge when refused pods are waiting (they were
        refused before this release, so kube-scheduler may have retried them too early)."""
        with self._lock:
            if not self._refused:
                return
            self._pending = node
            # every pod refused so far is requeued by the nudge; a later refusal is a fresh answer
            self._refused.clear()
            self._wake.notify()

    # ------------------------------------------------------------------------------------------ writer
    def start(self) -> RequeueNudger:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hami-requeue-nudge", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._pending is None and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                delay = self._last_nudge + self.min_interval_s - self._clock()
                if delay > 0:  # coalesce: releases meanwhile join this nudge
                    self._wake.wait(delay)
                    continue
            self.flush()

    def flush(self) -> bool:
        """Write the pending nudge now, if any; True when one was written."""
        with self._lock:
            node, self._pending = self._pending, None
            if node is None:
                return False
            self._last_nudge = self._clock()
        stamp = datetime.fromtimestamp(self._wall(), UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            self.cluster.patch_node(node, {"metadata": {"annotations": {RELEASED_ANNOTATION: stamp}}})
        except Exception as exc:  # a nudge is an optimisation: kube-scheduler's own flush retries within 5 minutes
            log.warning("requeue nudge on node %s failed (pods hami refused wait for the next cluster event or "
                        "kube-scheduler's 5-minute flush): %s: %s", node, type(exc).__name__, exc)
            return False
        self.nudges += 1
        if self._on_nudge is not None:
            self._on_nudge(node)
        log.debug("requeue nudge on node %s: devices were released after hami refused pending pods", node)
        return True
