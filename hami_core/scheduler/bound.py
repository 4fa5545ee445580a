"""Ledgers of what is bound on a node, read fresh under the node lock, for bind's over-commit check.

``Extender.bind`` re-checks, under the node lock, that the pod fits next to the pods the API server says are
bound to the node (docs/reliability.md). Built from nothing on every bind, that ledger decoded every pod on the
node each time (80 pods on a node of 8 GPUs split 10). Kept between binds, only pods whose resourceVersion
changed are decoded again (:meth:`Engine.upsert_pod` skips a version it has applied) and pods gone from the
node are removed, so the result is the same as a fresh build.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hami_core.engine.facade import Engine
from hami_core.engine.pods import pod_key

__all__ = ["BoundLedgers"]


class _Mirror:
    """A one-node engine holding exactly the pods last read as bound to that node."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.members: dict[str, Mapping[str, Any]] = {}

    def sync(self, node_obj: Mapping[str, Any], bound: list[Mapping[str, Any]]) -> None:
        self.engine.upsert_node(node_obj)
        now = {pod_key(pod): pod for pod in bound}
        for key, pod in self.members.items():
            if key not in now:
                self.engine.remove_pod(pod)
        for pod in bound:
            self.engine.upsert_pod(pod)
        self.members = now


class BoundLedgers:
    """The last ``size`` nodes' mirrors, most recently used kept.

    A mirror is taken out while a bind uses it (the node lock already serialises binds on a node; a bind that
    finds its node's mirror in use, e.g. after a lock expiry, builds a fresh one), and is dropped when the
    caller's block raises, so a half-updated mirror is never reused.
    """

    def __init__(self, engine: Engine, size: int = 64) -> None:
        self._template = engine
        self._size = size
        self._lock = threading.Lock()
        self._mirrors: OrderedDict[str, _Mirror] = OrderedDict()

    def _new(self) -> _Mirror:
        t = self._template
        return _Mirror(Engine(t.config, plugins=t.plugins, clock=t.clock))

    @contextmanager
    def bound(self, node: str, node_obj: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> Iterator[Engine]:
        """An engine holding ``node_obj`` and exactly ``pods`` (the pods bound there), for the caller's check.

        The caller removes what it books on it in the ``with`` block (pods not in ``pods`` that it added would
        otherwise only leave at the next sync if they had been in ``pods`` before).
        """
        with self._lock:
            mirror = self._mirrors.pop(node, None)
        if mirror is None:
            mirror = self._new()
        mirror.sync(node_obj, pods)
        yield mirror.engine
        with self._lock:
            self._mirrors[node] = mirror
            while len(self._mirrors) > self._size:
                self._mirrors.popitem(last=False)

    def forget(self, node: str) -> None:
        with self._lock:
            self._mirrors.pop(node, None)
