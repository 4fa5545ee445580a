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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_core.cluster.refs import PodRef, resource_version
from hami_core.cluster.watchcache import WatchCache
from hami_core.engine.pods import is_terminal, metadata

__all__ = ["PodView", "Seen", "version_of"]

#: ``metadata.resourceVersion`` as a number (etcd's revision: one counter across all objects), or None when it is
#: absent or not a number (then versions cannot be ordered); kept under this name for callers of this module
version_of = resource_version


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
        listed = resource_version(pod)
        if listed is None or self.version is None:
            return False
        return self.version > listed


def _seen(pod: Mapping[str, Any]) -> Seen:
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    node = node if isinstance(node, str) else ""
    finished = is_terminal(pod)
    return Seen(str(metadata(pod).get("uid") or ""), resource_version(pod), node, finished,
                pod if not node and not finished else None)


class PodView:
    """Thread-safe; one writer (the sync feed), many readers (the HTTP handlers). Its entries live in a
    :class:`~hami_core.cluster.watchcache.WatchCache`, the same store and waits as the cluster's own watch cache."""

    def __init__(self) -> None:
        self._cache: WatchCache[PodRef, Seen] = WatchCache()

    @property
    def high(self) -> int:
        """The highest resourceVersion delivered (a watch delivers in order: every earlier change is in the view)."""
        return self._cache.high

    def __len__(self) -> int:
        return len(self._cache)

    def put(self, pod: Mapping[str, Any]) -> None:
        """The watch delivered ``pod`` (ADDED or MODIFIED); the caller hands it over and never changes it."""
        key = PodRef.of(pod)
        if not key.name:
            return
        seen = _seen(pod)
        self._cache.put(key, seen, seen.version)

    def remove(self, pod: Mapping[str, Any]) -> None:
        """The watch delivered ``pod``'s deletion. A pod created since under the same name (another UID) stays."""
        uid = str(metadata(pod).get("uid") or "")
        self._cache.pop(PodRef.of(pod), resource_version(pod), only=lambda current: not uid or current.uid == uid)

    def retain(self, keep: Iterable[tuple[str, str]]) -> int:
        """Forget every pod not named in ``keep`` (a list of the API server's pods, plus the names the watch touched
        while it was taken): their deletions were missed. Returns how many went."""
        return len(self._cache.retain(keep))  # type: ignore[arg-type]

    def get(self, namespace: str, name: str) -> Seen | None:
        """The pod of that name as last delivered, or None."""
        return self._cache.get(PodRef(namespace, name))

    def wait(self, namespace: str, name: str, uid: str, timeout_s: float, through: int | None = None) -> Seen | None:
        """The pod of that name and ``uid``, waiting up to ``timeout_s`` for the watch to deliver it; None when it
        does not by then (unknown to the watch, or the view holds another pod of that name), or as soon as the view
        has passed resourceVersion ``through`` without it (the version of the caller's copy of the pod)."""
        key = PodRef(namespace, name)
        cache = self._cache

        def settled() -> bool:
            current = cache.get(key)
            return (current is not None and current.uid == uid) or (through is not None and cache.high >= through)

        with cache.lock:
            cache.wait(settled, timeout_s)
            current = cache.get(key)
            return current if current is not None and current.uid == uid else None
