"""The pods as the scheduler's own Pod watch has them, by namespace and name: whom a ``/filter`` or ``/bind`` body
names is looked up here, never believed (docs/security.md).

:class:`~hami_core.scheduler.sync.Sync` feeds the view from every Pod event it applies (and from its periodic
list); the extender reads it. Every pod has a small entry (UID, resourceVersion, node, phase); the object itself
is kept only while the pod is pending (not bound, not finished), the only pods a filter or a bind acts on, so the
view costs little memory however many pods run.

kube-scheduler filters a pod a few milliseconds after it was created, and this scheduler's watch may not have
delivered it yet: :meth:`PodView.wait` blocks until the watch brings that pod (woken by the events themselves,
never by polling) or a short time has passed, after which the caller reads the API server once. It returns at once
when the view has already passed the resourceVersion the request's copy of the pod carries (kube-scheduler's
informer copy): a pod missing from a view that far along does not exist (any more), and waiting would not bring it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_core.engine.pods import is_terminal, metadata

__all__ = ["PodView", "Seen", "version_of"]

_Key = tuple[str, str]


def version_of(pod: Mapping[str, Any]) -> int | None:
    """``metadata.resourceVersion`` as a number (etcd's revision: one counter across all objects), or None when it
    is absent or not a number (then versions cannot be ordered)."""
    raw = metadata(pod).get("resourceVersion")
    if type(raw) is str and raw.isdigit():
        return int(raw)
    return None


def _key(pod: Mapping[str, Any]) -> _Key:
    meta = metadata(pod)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


@dataclass(frozen=True, slots=True)
class Seen:
    """One pod as the watch last delivered it."""

    uid: str
    version: int | None
    node: str  # spec.nodeName ("" while pending)
    finished: bool  # Succeeded or Failed
    pod: Mapping[str, Any] | None  # the object while pending and not finished (read-only), else None

    def newer_than(self, pod: Mapping[str, Any]) -> bool:
        """Whether this entry is a later state of the pod's name than ``pod`` (a listed object): the same pod at a
        later version, or another pod of that name created after it. False when versions cannot be ordered, and for
        the very version listed (applying it again is how a pass repairs a ledger the extender changed since, a
        re-filter that found no node, say; the engine skips a version it still follows)."""
        listed = version_of(pod)
        if listed is None or self.version is None:
            return False
        return self.version > listed


def _seen(pod: Mapping[str, Any]) -> Seen:
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    node = node if isinstance(node, str) else ""
    finished = is_terminal(pod)
    return Seen(str(metadata(pod).get("uid") or ""), version_of(pod), node, finished,
                pod if not node and not finished else None)


class PodView:
    """Thread-safe; one writer (the sync feed), many readers (the HTTP handlers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pods: dict[_Key, Seen] = {}
        self._waiting = 0
        #: the highest resourceVersion delivered (a watch delivers in order: every earlier change is in the view)
        self.high = 0

    def __len__(self) -> int:
        return len(self._pods)

    def put(self, pod: Mapping[str, Any]) -> None:
        """The watch delivered ``pod`` (ADDED or MODIFIED); the caller hands it over and never changes it."""
        key = _key(pod)
        if not key[1]:
            return
        seen = _seen(pod)
        with self._lock:
            self._pods[key] = seen
            self._advance(seen.version)

    def _advance(self, version: int | None) -> None:
        """Lock held: note a delivered version and wake the waiters (if any) to look again."""
        if version is not None and version > self.high:
            self.high = version
        if self._waiting:
            self._changed.notify_all()

    def remove(self, pod: Mapping[str, Any]) -> None:
        """The watch delivered ``pod``'s deletion. A pod created since under the same name (another UID) stays."""
        key = _key(pod)
        uid = str(metadata(pod).get("uid") or "")
        with self._lock:
            current = self._pods.get(key)
            if current is not None and (not uid or current.uid == uid):
                del self._pods[key]
            self._advance(version_of(pod))

    def retain(self, keep: Iterable[_Key]) -> int:
        """Forget every pod not named in ``keep`` (a list of the API server's pods, plus the names the watch touched
        while it was taken): their deletions were missed. Returns how many went."""
        wanted = set(keep)
        with self._lock:
            gone = [key for key in self._pods if key not in wanted]
            for key in gone:
                del self._pods[key]
        return len(gone)

    def get(self, namespace: str, name: str) -> Seen | None:
        """The pod of that name as last delivered, or None."""
        return self._pods.get((namespace, name))

    def wait(self, namespace: str, name: str, uid: str, timeout_s: float, through: int | None = None) -> Seen | None:
        """The pod of that name and ``uid``, waiting up to ``timeout_s`` for the watch to deliver it; None when it
        does not by then (unknown to the watch, or the view holds another pod of that name), or as soon as the view
        has passed resourceVersion ``through`` without it (the version of the caller's copy of the pod)."""
        key = (namespace, name)

        def settled() -> bool:
            current = self._pods.get(key)
            return (current is not None and current.uid == uid) or (through is not None and self.high >= through)

        with self._changed:
            if not settled() and timeout_s > 0:
                self._waiting += 1
                try:
                    self._changed.wait_for(settled, timeout_s)
                finally:
                    self._waiting -= 1
            current = self._pods.get(key)
            return current if current is not None and current.uid == uid else None
