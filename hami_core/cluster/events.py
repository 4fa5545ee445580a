"""Events off the critical path: a bounded queue drained by one background thread, as client-go's event
broadcaster does for kube-scheduler.

An Event is a courtesy to the operator (``kubectl describe pod``), never a precondition of a decision: HAMi
records ``FilteringSucceed``/``BindingSucceed`` on every pod, and a synchronous POST put two API round trips on
every ``/filter`` and ``/bind`` and took two tokens of the client's ``qps`` budget from the writes that matter.
Here :meth:`EventRecorder.record` only queues; the thread posts with a rate limiter of its own, so a slow or
failing events endpoint costs a log line, not a scheduling delay. When the queue is full (the API server is
down or far behind) new events are dropped and counted, like client-go's ``watch.DropIfChannelFull``.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["DEFAULT_CAPACITY", "EventRecorder"]

log = logging.getLogger("hami.cluster.events")

#: Events queued before new ones are dropped (client-go's broadcaster queues 1,000).
DEFAULT_CAPACITY = 1000
_STOP = object()


class EventRecorder:
    """Posts Event bodies with ``post(body)`` from a daemon thread, started on the first :meth:`record`.

    ``post`` may raise: the failure is logged (one line, with the event's reason and object) and the next event
    goes on. :meth:`flush` waits until everything queued so far was posted or given up; :meth:`close` flushes
    (bounded) and stops the thread (a later :meth:`record` starts a new one: a cluster client may be closed and
    used again).
    """

    def __init__(self, post: Callable[[dict[str, Any]], None], *, capacity: int = DEFAULT_CAPACITY,
                 name: str = "hami-events") -> None:
        self._post = post
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, capacity))
        self._name = name
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.dropped = 0
        self.posted = 0
        self.failed = 0

    def record(self, body: dict[str, Any]) -> bool:
        """Queue one Event body; never blocks. False if it was dropped (the queue is full)."""
        self._ensure_thread()
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:  # the first, then every hundredth: not a log flood
                log.warning("event queue full (%d queued): dropped %d events so far, latest %s %s",
                            self._queue.maxsize, self.dropped, body.get("reason"), _about(body))
            return False
        return True

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every event queued before this call was handled; False on timeout."""
        if self._thread is None:
            return True
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout_s)
        except queue.Full:
            return False
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Post what is queued (up to ``timeout_s``) and stop the thread. Idempotent."""
        with self._start_lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        deadline = time.monotonic() + timeout_s
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            log.warning("event queue still full at close; %d events not posted", self._queue.qsize())
            return
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            log.warning("events still being posted after %.0f s at close; %d left queued", timeout_s,
                        self._queue.qsize())

    # ------------------------------------------------------------------------------------ the thread
    def _ensure_thread(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self._post(item)
                self.posted += 1
            except Exception as exc:
                self.failed += 1
                log.warning("could not record event %s %s about %s: %s", item.get("type"), item.get("reason"),
                            _about(item), " ".join(str(exc).split()))


def _about(body: dict[str, Any]) -> str:
    involved = body.get("involvedObject") or {}
    namespace = involved.get("namespace")
    name = involved.get("name") or "?"
    return f"{involved.get('kind', 'object')} {namespace}/{name}" if namespace else f"{involved.get('kind')} {name}"
