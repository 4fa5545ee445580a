"""Pods in flight per node: filtered onto a node, not yet through its device plugin's Allocate.

HAMi's node lock lets one pod per node (and lock annotation) be between bind and Allocate, because Allocate
carries no pod identity (docs/device-plugin.md). A burst that binpack sends to one node therefore binds one pod
per Allocate round trip, however idle the rest of the cluster is: 12 pods a second on the real control plane
(``make bench-e2e``, docs/performance.md), against 226 for kube-scheduler alone. With ``--node-inflight-limit N``
the filter keeps its policy's order among nodes that have fewer than ``N`` pods in flight and uses the others only
when nothing else fits, so a burst fills the best few nodes side by side instead of queueing on the first; a pod
that can only go to a busy node still goes there (and its bind waits for the lock, ``--node-lock-wait``).

A pod is in flight on a node from its filter until its ``hami.io/bind-phase`` is ``success`` or ``failed``, it is
filtered again, finished or deleted, or :data:`TTL_S` has passed (a bind that never came).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from hami_core.engine.pods import annotations, is_terminal, pod_key
from hami_core.wire import keys

__all__ = ["DEFAULT_INFLIGHT_LIMIT", "TTL_S", "InFlight"]

#: ``--node-inflight-limit``: a node with this many pods between filter and Allocate is used only when no other
#: node fits; 0 (the default) places as HAMi does. Opt-in: it trades packing for burst latency (docs/scheduler.md).
DEFAULT_INFLIGHT_LIMIT = 0

#: How long a filtered pod counts as in flight without any news of it.
TTL_S = 60.0
_DONE = frozenset({keys.BIND_PHASE_SUCCESS, keys.BIND_PHASE_FAILED})


class InFlight:
    """Thread-safe: filters add, Pod watch events clear."""

    def __init__(self, limit: int, clock: Callable[[], float], ttl_s: float = TTL_S) -> None:
        self.limit = limit
        self.clock = clock
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._node_of: dict[str, tuple[str, float]] = {}  # pod key -> (node, since)
        self._pods: dict[str, set[str]] = {}  # node -> pod keys

    def _drop(self, key: str) -> None:
        entry = self._node_of.pop(key, None)
        if entry is not None:
            pods = self._pods.get(entry[0])
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._pods[entry[0]]

    def add(self, pod: Mapping[str, Any], node: str) -> None:
        """``pod`` was just filtered onto ``node``."""
        if self.limit <= 0:
            return
        key = pod_key(pod)
        with self._lock:
            self._drop(key)
            self._node_of[key] = (node, self.clock())
            self._pods.setdefault(node, set()).add(key)

    def busy(self, pod: Mapping[str, Any]) -> Collection[str]:
        """Nodes with ``limit`` or more pods in flight, other than ``pod`` itself (empty when the limit is 0)."""
        if self.limit <= 0 or not self._pods:
            return ()
        key = pod_key(pod)
        oldest = self.clock() - self.ttl_s
        out = set()
        with self._lock:
            for node, pods in self._pods.items():
                live = sum(1 for p in pods if p != key and self._node_of[p][1] >= oldest)
                if live >= self.limit:
                    out.add(node)
            for p in [p for p, (_, since) in self._node_of.items() if since < oldest]:
                self._drop(p)
        return out

    def on_pod_event(self, event: str, pod: Mapping[str, Any]) -> None:
        """A Pod watch event: a pod through Allocate (or failed), finished, gone or elsewhere is no longer in
        flight."""
        if not self._node_of:
            return
        key = pod_key(pod)
        with self._lock:
            entry = self._node_of.get(key)
            if entry is None:
                return
            annos = annotations(pod)
            if (event == "DELETED" or is_terminal(pod) or annos.get(keys.BIND_PHASE) in _DONE
                    or (annos.get(keys.VGPU_NODE) not in (None, entry[0]))):
                self._drop(key)

    def __len__(self) -> int:
        with self._lock:
            return len(self._node_of)
