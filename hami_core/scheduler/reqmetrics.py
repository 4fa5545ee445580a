"""What the scheduler's requests did: counters by result and reason, and duration histograms per phase.

The names are HAMi's where HAMi has them (PR #2650: ``hami_scheduler_bind_duration_seconds{phase,result}``,
``hami_scheduler_bind_total``, ``hami_scheduler_filter_duration_seconds{result}``, ``hami_scheduler_filter_total``,
with its buckets); hami-py adds a ``reason`` label to the two totals (a dashboard summing by ``result`` reads them
as HAMi's), and its own ``hami_scheduler_webhook_*``, ``hami_scheduler_denials_total``,
``hami_scheduler_filter_node_failures_total`` and ``hami_scheduler_leader``.

**Every label set is bounded.** A reason is one word of a fixed vocabulary (:data:`FILTER_REASONS`,
:data:`BIND_REASONS`, :data:`WEBHOOK_REASONS`, :data:`DENIAL_REASONS`), each belonging to one result, and no label
names a pod or a node: a scrape's size does not grow with the cluster's traffic. The per-node failure words of
unschedulable filters come from the device plugins (``CardInsufficientMemory`` ...); the first
:data:`MAX_FAILURE_WORDS` distinct words that look like one are kept, anything else counts as ``other``.

Counters of every (result, reason) pair are created at zero up front, so that ``rate()`` and alerts see a series
before the first event of its kind. Histograms are created on first use (a histogram is 15 series a label set).

Nothing here is global: each :class:`RequestMetrics` is its own set of collectors, registered into the registry
its scheduler serves (several schedulers can live in one process, as the tests run them).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.registry import Collector

__all__ = ["BIND_PHASES", "BIND_REASONS", "BUCKETS", "DENIAL_REASONS", "FILTER_REASONS", "MAX_FAILURE_WORDS",
           "WEBHOOK_REASONS", "RequestMetrics"]

#: HAMi's buckets (PR #2650): 1 ms to 10 s.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: ``/filter``: reason → result.
FILTER_REASONS: Mapping[str, str] = {
    "scheduled": "success",            # a node was chosen and its devices booked
    "no_device_request": "success",    # the pod asks for no device: every node passes
    "simulated": "success",            # ExtenderArgs.Nodes given: fitted on a throwaway engine
    "no_fit": "unschedulable",         # no node fits (FailedNodes)
    "simulated_no_fit": "unschedulable",
    "pod_refused": "refused",          # the pod named is not an identified pending pod of this scheduler
    "not_synced": "error",             # the first registration pass had not finished in time
    "missing_pod": "error",            # ExtenderArgs without a pod
    "bad_request": "error",            # 400: a malformed body
    "pod_read_failed": "error",        # the pod was not in the watch and could not be read
    "decision_error": "error",         # the engine could not decide (a malformed request or annotation)
    "write_failed": "error",           # the allocation patch failed (--write-allocation filter)
    "exception": "error",              # an unexpected error (500; logged with its traceback)
}

#: ``/bind``: reason → result.
BIND_REASONS: Mapping[str, str] = {
    "bound": "success",
    "already_bound": "success",        # bound to that node before: nothing to do
    "pod_refused": "refused",          # not an identified pending pod of ours, or not filtered for that node
    "bad_request": "error",
    "write_failed": "error",           # --write-allocation bind: the decision could not be taken up
    "node_not_found": "error",
    "lock_contention": "error",        # another pod holds the node lock (after --node-lock-wait)
    "overcommit": "error",             # under the lock, the devices no longer fit next to the pods bound there
    "api_error": "error",              # the API server refused or failed the lock, patch or Binding
    "exception": "error",
}

#: ``/bind``'s phases (HAMi's five, ``fit_check`` and ``total``). ``patch_annotations`` happens only under
#: ``--write-allocation bind``: under ``filter`` the bind phase rides on the Binding.
BIND_PHASES = ("pod_lookup", "node_lookup", "node_lock", "fit_check", "patch_annotations", "apiserver_bind",
               "total")

#: ``/webhook``: reason → result.
WEBHOOK_REASONS: Mapping[str, str] = {
    "mutated": "allowed",              # CREATE patched (schedulerName, defaults)
    "unchanged": "allowed",            # CREATE with nothing to patch, or an UPDATE touching no owned key
    "opted_out": "allowed",            # hami.io/webhook=ignore
    "trusted_update": "allowed",       # an owned key changed by a trusted identity
    "other_operation": "allowed",
    "owned_annotation": "denied",      # CREATE carrying, or an untrusted UPDATE changing, a scheduler-owned key
    "quota": "denied",                 # the request alone exceeds the namespace's ResourceQuota
    "policy": "denied",                # another admission rule (privileged container, node assigned, ...)
    "invalid_request": "denied",       # a device request a backend rejects (AdmissionFailed)
    "bad_request": "error",            # 400: not a Pod, not an AdmissionReview
    "exception": "error",
}

#: ``hami_scheduler_denials_total``: callers refused, by why (``endpoint`` is filter, bind or webhook).
DENIAL_REASONS: Mapping[str, tuple[str, ...]] = {
    "unauthenticated": ("filter", "bind", "webhook"),   # 401: no client certificate or token, or a bad token
    "forbidden": ("filter", "bind", "webhook"),         # 403: authenticated, not for this route
    "pod_refused": ("filter", "bind"),                  # the extender's caller named a pod that is not ours
    "owned_annotation": ("webhook",),
    "quota": ("webhook",),
    "policy": ("webhook",),
    "invalid_request": ("webhook",),
}

#: Distinct per-node failure words kept before the rest count as ``other``.
MAX_FAILURE_WORDS = 32
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
_OPERATIONS = ("CREATE", "UPDATE")


class RequestMetrics:
    """The request metrics of one scheduler. Thread-safe (prometheus-client's metrics lock themselves).

    :param is_leader: ``() -> bool`` for ``hami_scheduler_leader`` (None: this replica always acts, 1).
    """

    def __init__(self, is_leader: Callable[[], bool] | None = None) -> None:
        self.filter_total = Counter("hami_scheduler_filter", "Filter requests processed, by result and reason",
                                    ["result", "reason"], registry=None)
        self.filter_duration = Histogram("hami_scheduler_filter_duration_seconds",
                                         "Time spent processing Filter requests", ["result"], buckets=BUCKETS,
                                         registry=None)
        self.node_failures = Counter("hami_scheduler_filter_node_failures",
                                     "Nodes an unschedulable filter refused, by the device plugin's reason word",
                                     ["reason"], registry=None)
        self.bind_total = Counter("hami_scheduler_bind", "Bind requests processed, by result and reason",
                                  ["result", "reason"], registry=None)
        self.bind_duration = Histogram("hami_scheduler_bind_duration_seconds",
                                       "Time spent in each phase of the Bind workflow", ["phase", "result"],
                                       buckets=BUCKETS, registry=None)
        self.webhook_total = Counter("hami_scheduler_webhook", "Admission reviews answered, by operation, result "
                                     "and reason", ["operation", "result", "reason"], registry=None)
        self.webhook_duration = Histogram("hami_scheduler_webhook_duration_seconds",
                                          "Time spent answering admission reviews", ["result"], buckets=BUCKETS,
                                          registry=None)
        self.denials = Counter("hami_scheduler_denials", "Callers refused: unauthenticated or forbidden requests, "
                               "extender requests naming pods that are not ours, admission denials",
                               ["endpoint", "reason"], registry=None)
        self.leader = Gauge("hami_scheduler_leader", "1 while this replica is the leader (registers nodes); "
                            "1 without --leader-elect", registry=None)
        self.leader.set_function(lambda: 1.0 if (is_leader is None or is_leader()) else 0.0)
        self._words: set[str] = set()
        self._words_lock = threading.Lock()
        for reason, result in FILTER_REASONS.items():
            self.filter_total.labels(result, reason)
        for reason, result in BIND_REASONS.items():
            self.bind_total.labels(result, reason)
        for reason, result in WEBHOOK_REASONS.items():
            for operation in _OPERATIONS:
                self.webhook_total.labels(operation, result, reason)
        for reason, endpoints in DENIAL_REASONS.items():
            for endpoint in endpoints:
                self.denials.labels(endpoint, reason)

    def collectors(self) -> list[Collector]:
        """What a registry serving these metrics registers."""
        return [self.filter_total, self.filter_duration, self.node_failures, self.bind_total, self.bind_duration,
                self.webhook_total, self.webhook_duration, self.denials, self.leader]

    # ------------------------------------------------------------------------------------------ filter
    def filtered(self, reason: str, seconds: float) -> None:
        result = FILTER_REASONS[reason]
        self.filter_total.labels(result, reason).inc()
        self.filter_duration.labels(result).observe(seconds)
        if result == "refused":
            self.denials.labels("filter", reason).inc()

    def node_failure_words(self, words: Iterable[str]) -> None:
        """Count one unschedulable filter's per-node reason words (each node's words, as ``parse_reasons``
        gives them)."""
        for word in words:
            self.node_failures.labels(self._bounded(word)).inc()

    def _bounded(self, word: str) -> str:
        if word in self._words:
            return word
        if not _WORD.fullmatch(word):
            return "other"
        with self._words_lock:
            if word in self._words:
                return word
            if len(self._words) >= MAX_FAILURE_WORDS:
                return "other"
            self._words.add(word)
            return word

    # ------------------------------------------------------------------------------------------ bind
    def bound(self, reason: str) -> None:
        result = BIND_REASONS[reason]
        self.bind_total.labels(result, reason).inc()
        if result == "refused":
            self.denials.labels("bind", reason).inc()

    def bind_phase(self, phase: str, ok: bool, seconds: float) -> None:
        self.bind_duration.labels(phase, "success" if ok else "error").observe(seconds)

    # ------------------------------------------------------------------------------------------ webhook
    def reviewed(self, operation: Any, reason: str, seconds: float) -> None:
        result = WEBHOOK_REASONS[reason]
        op = operation if operation in _OPERATIONS else "other"
        self.webhook_total.labels(op, result, reason).inc()
        self.webhook_duration.labels(result).observe(seconds)
        if result == "denied":
            self.denials.labels("webhook", reason).inc()

    # ------------------------------------------------------------------------------------------ auth
    def refused_caller(self, path: str, status: int) -> None:
        """A 401/403 from :mod:`.auth` for ``path`` (one of the POST routes)."""
        endpoint = path.strip("/")
        if endpoint in ("filter", "bind", "webhook"):
            self.denials.labels(endpoint, "unauthenticated" if status == 401 else "forbidden").inc()
