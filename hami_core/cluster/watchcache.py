"""What a watch has delivered, by key, and how far: :class:`WatchCache`.

Both of the scheduler's copies of the Pod watch are one: :class:`~hami_core.cluster.kube.KubeCluster`'s reflectors
keep the objects they delivered (for bind's read of the pods on a node and the node lock's read of a lock holder),
and :class:`~hami_core.scheduler.podview.PodView` keeps what the sync feed applied (for whom a ``/filter`` names).
Each holds entries by key and the highest resourceVersion delivered; readers wait, woken by deliveries (never by
polling), until an entry arrives or the cache has passed a version. A watch delivers in resourceVersion order, so
a cache at version ``v`` includes every change up to ``v`` (etcd's revision is one counter across all objects).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["WatchCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class WatchCache(Generic[K, V]):
    """Entries by key, the highest version delivered (:attr:`high`), and waits on both. Thread-safe: one writer
    (the watch), many readers; :meth:`get` takes no lock (a dictionary read is atomic).

    ``on_store(key, old, new)`` is called with the lock held whenever an entry is set (``new``) or removed
    (``new`` is None), for an index the owner keeps alongside (the reflector's pods by node)."""

    def __init__(self, on_store: Callable[[K, V | None, V | None], None] | None = None) -> None:
        self.lock = threading.Condition()
        self.entries: dict[K, V] = {}
        #: the highest resourceVersion delivered (0: none)
        self.high = 0
        self._on_store = on_store
        self._waiting = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, key: K) -> V | None:
        return self.entries.get(key)

    def put(self, key: K, value: V, version: int | None = None) -> V | None:
        """Set ``key``'s entry (and note ``version``); returns the entry it replaced."""
        with self.lock:
            old = self.entries.get(key)
            self.entries[key] = value
            if self._on_store is not None:
                self._on_store(key, old, value)
            self._advance(version)
            return old

    def pop(self, key: K, version: int | None = None, *, only: Callable[[V], bool] | None = None) -> V | None:
        """Remove ``key``'s entry (when ``only`` accepts it, if given) and note ``version``; returns the entry
        removed."""
        with self.lock:
            old = self.entries.get(key)
            if old is not None and (only is None or only(old)):
                del self.entries[key]
                if self._on_store is not None:
                    self._on_store(key, old, None)
            else:
                old = None
            self._advance(version)
            return old

    def retain(self, keep: Iterable[K]) -> list[K]:
        """Remove every entry not named in ``keep``; returns the keys removed."""
        wanted = set(keep)
        with self.lock:
            gone = [key for key in self.entries if key not in wanted]
            for key in gone:
                old = self.entries.pop(key)
                if self._on_store is not None:
                    self._on_store(key, old, None)
        return gone

    def advance(self, version: int | None) -> None:
        """Note a delivered version (a list's, a bookmark's) and wake the waiters to look again."""
        with self.lock:
            self._advance(version)

    def _advance(self, version: int | None) -> None:
        if version is not None and version > self.high:
            self.high = version
        if self._waiting:
            self.lock.notify_all()

    def wait(self, settled: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``settled()`` (called with the lock held, after every delivery) or ``timeout_s``; returns
        ``settled()``. The caller may read the cache under :attr:`lock` after it, as of that answer."""
        with self.lock:
            if settled():
                return True
            if timeout_s <= 0:
                return False
            self._waiting += 1
            try:
                return self.lock.wait_for(settled, timeout_s)
            finally:
                self._waiting -= 1

    def through(self, version: int, timeout_s: float) -> bool:
        """Whether the cache includes every change up to ``version``, waiting up to ``timeout_s`` for it."""
        return self.wait(lambda: self.high >= version, timeout_s)
