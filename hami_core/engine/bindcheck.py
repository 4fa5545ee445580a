"""Bind's over-commit check: does a pod's allocation still fit next to the pods bound to its node?

The extender re-checks, under the node lock, that the pod fits next to the pods the API server says are bound to
the node (docs/reliability.md): two scheduler replicas whose ledgers lag each other's reservations can then never
over-commit a device. The check books those pods on a one-node :class:`~hami_core.engine.state.ClusterState`
(a mirror) and books the pod on top: no device may grow past its split count, memory or cores, and no MIG instance
the pod adds may overlap one held by a bound pod.

Built from nothing on every bind, that mirror decoded every pod on the node each time (80 pods on a node of 8 GPUs
split 10). Kept between binds (:class:`BoundLedgers`), only pods whose resourceVersion changed are decoded again
(:meth:`ClusterState.upsert_pod` skips a version it has applied) and pods gone from the node are removed, so the
result is the same as a fresh build.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hami_core.engine.inventory import NodeState
from hami_core.engine.pods import pod_key, pod_ref
from hami_core.engine.state import ClusterState
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import MigInstance

__all__ = ["BoundLedgers", "Overcommit"]


class Overcommit(HamiError):
    """Binding the pod would put a device over its memory, cores or split count (another replica's pod won)."""


class _Mirror:
    """A one-node state holding exactly the pods last read as bound to that node."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.members: dict[str, Mapping[str, Any]] = {}

    def sync(self, node_obj: Mapping[str, Any], bound: list[Mapping[str, Any]]) -> None:
        self.state.upsert_node(node_obj)
        now = {pod_key(pod): pod for pod in bound}
        for key, pod in self.members.items():
            if key not in now:
                self.state.remove_pod(pod)
        for pod in bound:
            self.state.upsert_pod(pod)
        self.members = now


class BoundLedgers:
    """The last ``size`` nodes' mirrors, most recently used kept; thread-safe.

    A mirror is taken out while a bind uses it (the node lock already serialises binds on a node; a bind that
    finds its node's mirror in use, e.g. after a lock expiry, builds a fresh one), and is dropped when the
    caller's block raises, so a half-updated mirror is never reused. Mirrors are built from ``template``'s
    configuration, plugins and clock, and read nothing else of it.
    """

    def __init__(self, template: Any, size: int = 64) -> None:
        self._template = template
        self._size = size
        self._lock = threading.Lock()
        self._mirrors: OrderedDict[str, _Mirror] = OrderedDict()

    def _new(self) -> _Mirror:
        t = self._template
        return _Mirror(ClusterState(t.config, t.plugins, t.clock))

    @contextmanager
    def bound(self, node: str, node_obj: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> Iterator[ClusterState]:
        """A state holding ``node_obj`` and exactly ``pods`` (the pods bound there), for the caller's check.

        The caller removes what it books on it in the ``with`` block (pods not in ``pods`` that it added would
        otherwise only leave at the next sync if they had been in ``pods`` before).
        """
        with self._lock:
            mirror = self._mirrors.pop(node, None)
        if mirror is None:
            mirror = self._new()
        mirror.sync(node_obj, pods)
        yield mirror.state
        with self._lock:
            self._mirrors[node] = mirror
            while len(self._mirrors) > self._size:
                self._mirrors.popitem(last=False)

    def forget(self, node: str) -> None:
        with self._lock:
            self._mirrors.pop(node, None)

    def check(self, pod: Mapping[str, Any], node: str, node_obj: Mapping[str, Any],
              bound: list[Mapping[str, Any]]) -> None:
        """Raise :class:`Overcommit` unless ``pod`` (carrying its allocation for ``node``) fits next to ``bound``,
        the other pods bound to ``node`` (``node_obj``: the Node as read under the lock)."""
        with self.bound(node, node_obj, bound) as scratch:
            state = scratch.nodes.get(node)
            if state is None:
                return
            if state.quarantine:
                raise Overcommit(f"node {node} is quarantined: {'; '.join(sorted(state.quarantine.values()))}")
            before = {d.id: (d.used, d.usedmem, d.usedcores) for d in state.by_uuid.values()}
            mig_before = {d.id: d.mig_in_use for d in state.by_uuid.values() if d.mig_in_use}
            scratch.upsert_pod(pod)
            try:
                _check_growth(pod, node, state, before, len(bound))
                _check_mig(pod, node, state, mig_before)
            finally:
                scratch.remove_pod(pod)  # the mirror holds bound pods only


def _check_growth(pod: Mapping[str, Any], node: str, state: NodeState,
                  before: Mapping[str, tuple[int, int, int]], others: int) -> None:
    if state.quarantine:
        raise Overcommit(f"pod {pod_ref(pod)}: {'; '.join(sorted(state.quarantine.values()))}")
    for d in state.by_uuid.values():
        used, mem, cores = before[d.id]
        for what, now, was, total in (("split count", d.used, used, d.count),
                                      ("memory", d.usedmem, mem, d.totalmem),
                                      ("cores", d.usedcores, cores, d.totalcore)):
            if now > was and now > total:
                raise Overcommit(f"pod {pod_ref(pod)} cannot bind to node {node}: device {d.id} would be over "
                                 f"its {what} ({now} > {total}) with the {others} pod(s) already bound "
                                 "there; it must be filtered again")


def _check_mig(pod: Mapping[str, Any], node: str, state: NodeState,
               before: Mapping[str, tuple[MigInstance, ...]]) -> None:
    """The MIG instances the pod adds must not overlap those of the pods already bound there.

    Split count, memory and cores cannot see it: two replicas that had not heard of each other's reservation
    may give two pods the same free placement (the device plugin would then hand one instance to both). Only
    the pod's own instances may share a placement (HAMi lets its init and app containers do so).
    """
    for d in state.by_uuid.values():
        held = before.get(d.id, ())
        if not held or not d.mig_in_use:
            continue
        added = Counter(d.mig_in_use)
        added.subtract(Counter(held))
        for inst in (i for i, n in added.items() if n > 0):
            clash = next((h for h in held if inst.placement.overlaps(h.placement)), None)
            if clash is not None:
                raise Overcommit(
                    f"pod {pod_ref(pod)} cannot bind to node {node}: its MIG instance {inst.profile} at "
                    f"placement {inst.placement.start}+{inst.placement.size} on device {d.id} overlaps "
                    f"{clash.profile} at {clash.placement.start}+{clash.placement.size}, held by a pod already "
                    "bound there; it must be filtered again")
