"""Writes made after the reply: filter's pod patch under ``--filter-patch async``.

kube-scheduler filters one pod at a time, so the time ``/filter`` takes bounds how many pods it can schedule a
second, and the pod patch that records the decision (an API round trip, retried on transient errors) is most of
it once the engine decides in well under a millisecond. With write-behind, filter books the reservation in the
ledger, replies, and leaves the patch to a small pool of threads; ``/bind`` of the same pod (which kube-scheduler
sends only after filter answered) first waits for that write, so the pod it reads carries its annotations, and a
second filter of the pod waits for the first one's write, so writes of one pod never overtake each other.

Writes are keyed by pod (namespace, name). A key's entry is dropped when its write ends; a later wait finds
nothing to wait for and reads the API server, which then has the write.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

__all__ = ["WRITERS", "WRITE_WAIT_S", "PendingWrites"]

log = logging.getLogger("hami.scheduler.writes")

#: Threads making write-behind patches (API round trips: I/O, not CPU).
WRITERS = 4
#: The longest a bind or a second filter waits for a pod's pending write (its retries take ~2 s at most unless the
#: API server hangs); then it goes on and reads the pod as the API server has it. Below kube-scheduler's 30 s
#: extender timeout.
WRITE_WAIT_S = 20.0


class PendingWrites:
    """At most one pending write per key, run in a thread pool; :meth:`wait` blocks until a key's write ends."""

    def __init__(self, workers: int = WRITERS) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hami-write")
        self._pending: dict[tuple[str, str], Future[None]] = {}
        self._guard = threading.Lock()
        #: how many waits found a write still pending (and so waited)
        self.waited = 0

    def submit(self, key: tuple[str, str], write: Callable[[], None]) -> None:
        """Run ``write()`` in the pool. The caller has waited for the key's previous write (:meth:`wait`)."""
        with self._guard:
            future = self._pool.submit(write)
            self._pending[key] = future
        future.add_done_callback(lambda done: self._forget(key, done))

    def wait(self, key: tuple[str, str], timeout_s: float = WRITE_WAIT_S) -> None:
        """Block until ``key``'s pending write, if any, has ended (or ``timeout_s`` has passed)."""
        with self._guard:
            future = self._pending.get(key)
            if future is None or future.done():
                return
            self.waited += 1
        try:
            future.result(timeout=timeout_s)
        except FutureTimeout:
            log.warning("pod %s/%s: its filter write is still pending after %.0f s; going on without it", *key,
                        timeout_s)
        except Exception:  # the write reports its own failures (log, event); the caller reads the pod afresh
            pass

    def pending(self) -> int:
        """How many writes have not ended yet."""
        with self._guard:
            return sum(not f.done() for f in self._pending.values())

    def close(self) -> None:
        """Finish every pending write (shutdown: a reservation the API server never hears of is lost)."""
        self._pool.shutdown(wait=True)

    def _forget(self, key: tuple[str, str], done: Future[None]) -> None:
        with self._guard:
            if self._pending.get(key) is done:
                del self._pending[key]
        error = done.exception() if not done.cancelled() else None
        if error is not None:
            log.error("pod %s/%s: filter write failed unexpectedly: %s", *key, error)
