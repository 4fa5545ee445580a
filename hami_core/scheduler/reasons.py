"""Keeping a pending pod's filter reasons on the pod: ``hami.io/filter-reasons`` (:mod:`hami_core.wire.filterreasons`).

Why an annotation and not a pod condition: kube-scheduler owns the ``PodScheduled`` condition and rewrites its
message on every attempt; a condition of hami's own would be written through the ``pods/status`` subresource (a
second RBAC grant, and the kubelet's territory), while the scheduler already patches pod annotations in its filter
and is trusted by the webhook to do so. ``kubectl get pod -o yaml`` and ``hami explain`` both read an annotation.

The write is off the filter's path: :meth:`FilterReasons.refused` only records the refusal, and a daemon thread
summarises it, compares it with what the pod carries and what this writer wrote last, and patches the pod only when
the text changed. kube-scheduler retries a parked pod on cluster events, so a pending pod is refused again and
again with the same reasons: those retries cost no API write. (An annotation change is itself a pod update, which
kube-scheduler may answer with one more attempt; that attempt finds the same text and writes nothing.) When the pod
binds, the annotation is removed (only if the pod carries one or this writer wrote one). Writes are retried with the
extender's backoff; a write that finally fails is logged and forgotten, so the next refusal writes again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.cluster.base import Cluster, NotFoundError
from hami_core.cluster.refs import PodRef
from hami_core.engine.pods import annotations
from hami_core.wire.filterreasons import FILTER_REASONS, summarize

__all__ = ["MAX_PENDING", "MAX_REMEMBERED", "FilterReasons"]

log = logging.getLogger("hami.scheduler.reasons")

#: Pods whose last written value is remembered (the oldest is forgotten first; a forgotten pod is compared with
#: the annotation its watch copy carries instead).
MAX_REMEMBERED = 65536
#: Refusals waiting for the writer; past this the oldest waiting one is dropped (its pod is refused again later).
MAX_PENDING = 8192

Write = Callable[[str, Callable[[], Any]], Any]
_CLEAR = object()


class FilterReasons:
    """Writes ``hami.io/filter-reasons`` on refused pods and removes it from bound ones. Thread-safe.

    :param cluster: where pods are patched.
    :param write: ``write(what, step)`` runs an idempotent write with retries (:meth:`Extender.write`); default: once.
    """

    def __init__(self, cluster: Cluster, *, write: Write | None = None) -> None:
        self.cluster = cluster
        self._write: Write = write if write is not None else (lambda _what, step: step())
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        #: pod → (the annotation its copy carried, failed nodes, candidates, error), or _CLEAR; latest wins
        self._pending: OrderedDict[PodRef, Any] = OrderedDict()
        #: pod → the value this writer last wrote (None: removed)
        self._written: OrderedDict[PodRef, str | None] = OrderedDict()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._busy = 0  # flushes under way (the thread's, or inline ones)
        #: patches made (for tests and metrics)
        self.writes = 0

    # ------------------------------------------------------------------------------------------ events
    def refused(self, pod: Mapping[str, Any], failed: Mapping[str, str], total: int, *,
                error: str | None = None) -> None:
        """A filter left ``pod`` with no node: ``failed`` (node → reason) of ``total`` candidates, or ``error``.
        Costs the filter a dictionary store; the summary and the write happen on the writer thread."""
        ref = PodRef.of(pod)
        carried = annotations(pod).get(FILTER_REASONS)
        with self._lock:
            self._pending[ref] = (carried if isinstance(carried, str) else None, failed, total, error)
            self._pending.move_to_end(ref)
            while len(self._pending) > MAX_PENDING:
                self._pending.popitem(last=False)
            self._wake.notify()

    def bound(self, pod: Mapping[str, Any]) -> None:
        """``pod`` was bound: its reasons are history. Removed when the pod carries them or this writer wrote them."""
        ref = PodRef.of(pod)
        with self._lock:
            if FILTER_REASONS not in annotations(pod) and not self._written.get(ref):
                self._pending.pop(ref, None)
                return
            self._pending[ref] = _CLEAR
            self._pending.move_to_end(ref)
            self._wake.notify()

    def deleted(self, ref: PodRef) -> None:
        """The pod is gone: nothing to write, nothing to remember."""
        with self._lock:
            self._pending.pop(ref, None)
            self._written.pop(ref, None)

    # ------------------------------------------------------------------------------------------ writer
    def start(self) -> FilterReasons:
        with self._lock:
            if self._thread is None:
                self._stopped = False
                self._thread = threading.Thread(target=self._run, name="hami-filter-reasons", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
            self.flush()

    def flush(self) -> int:
        """Write everything pending now (the writer thread's work; tests and shutdown call it inline). Returns the
        patches made."""
        made = 0
        with self._lock:
            self._busy += 1
        try:
            while True:
                with self._lock:
                    if not self._pending:
                        return made
                    ref, item = self._pending.popitem(last=False)
                    last = self._written.get(ref, _CLEAR)
                made += self._write_one(ref, item, last)
        finally:
            with self._lock:
                self._busy -= 1
                self._wake.notify_all()

    def wait_idle(self, timeout_s: float = 5.0) -> bool:
        """Wait until nothing is pending or being written (tests, shutdown); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.wait(left)
        return True

    def _write_one(self, ref: PodRef, item: Any, last: Any) -> int:
        """Patch one pending item when its value differs from the last one written (or carried); 1 if patched."""
        if item is _CLEAR:
            value: str | None = None
            if last is None:
                return 0
        else:
            carried, failed, total, error = item
            value = summarize(failed, total, error=error)
            if value == last or (last is _CLEAR and value == carried):
                return 0  # the same refusal as the last one written: no API write per retry
        return 1 if self._patch(ref, value) else 0

    def _patch(self, ref: PodRef, value: str | None) -> bool:
        namespace, name = ref
        patch = {"metadata": {"annotations": {FILTER_REASONS: value}}}
        try:
            self._write(f"patch pod {ref} {FILTER_REASONS}",
                        lambda: self.cluster.patch_pod(namespace, name, patch))
        except NotFoundError:
            self.deleted(ref)
            return False
        except Exception as exc:  # the reasons are a courtesy: the pod is scheduled exactly as without them
            log.warning("pod %s: cannot write %s (the next refusal writes it again): %s: %s", ref, FILTER_REASONS,
                        type(exc).__name__, exc)
            with self._lock:
                self._written.pop(ref, None)
            return False
        with self._lock:
            self._written[ref] = value
            self._written.move_to_end(ref)
            while len(self._written) > MAX_REMEMBERED:
                self._written.popitem(last=False)
            self.writes += 1
        return True
