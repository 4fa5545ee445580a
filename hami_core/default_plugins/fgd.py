"""The ``fgd`` node policy: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23).

Each candidate node is scored by how much placing the pod there grows the node's expected
fragmentation under the workload mix (:mod:`hami_core.engine.fragmentation`), normalised as in the
paper to a few score steps (:func:`quantised_score`); the node in the best step wins, and within a step
the fullest node (:func:`packing_scores`). The pod's devices on the node are chosen by the GPU policy,
so the growth is computed for the device that policy's fit would take (``fgd``: the least growth,
``binpack``: the busiest usable one, otherwise the idlest). See docs/fgd.md.

It is a state-only score (``hami_prescore_nodes``), so the engine keeps its best-first evaluation. The
growth per node is cached at the node's table stamp and the mix's version: a decision recomputes only
the nodes that changed since the last pod of the same shape, which keeps it within a small factor of
binpack. Before any workload is known it behaves as binpack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hami_core.default_plugins.score import default_scores
from hami_core.engine.fragmentation import host_growth, placement_delta
from hami_core.engine.pods import host_requests
from hami_core.engine.rowstore import RowStore
from hami_core.engine.workload import Shape, Workload
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import GpuPolicy, NodeBatch, PolicyInfo

FGD = "fgd"
#: Score of a node where the pod's devices cannot go at all (the fit rejects it anyway).
INFEASIBLE = -1e12
#: One step of the quantised growth score outweighs any packing tie-break (which is 0-20).
_BUCKET = 100.0


def quantised_score(growth: np.ndarray, steps: int = 100) -> np.ndarray:
    """The paper's normalisation: ``floor(steps x sigmoid(-growth / 1000))``, an integer 0..steps.

    Growth differences within one step are ties, decided by packing. The paper scores with 100 steps;
    fewer steps treat more of the small differences (which come from an estimated mix) as ties, and on
    the openb traces 25 beats both 100 and pure packing (docs/simulation.md).
    """
    with np.errstate(over="ignore"):
        return np.floor(steps / (1.0 + np.exp(np.clip(growth, -1e5, 1e5) / 1000.0)))


def packing_scores(totals: np.ndarray) -> np.ndarray:
    """The tie-break: how full each node's devices are, ``10 x (usedcores/totalcore + usedmem/totalmem)``
    (HAMi's node score without its slot term, which counts small pods as if they filled a device)."""
    t = np.array(totals, dtype=float, copy=True).reshape(-1, 6)
    t[:, 0] = 0.0
    return default_scores(t)


def device_select(policy: GpuPolicy) -> str:
    """The device the GPU policy's fit prefers: the least growth (``fgd``), the busiest (``binpack``) or
    the idlest (anything else)."""
    for token in policy.gpu_tokens:
        if token in ("binpack", "spread", "fgd"):
            return token
    return "binpack" if policy.has("topology-aware") else "spread"


class _Cache:
    """Fragmentation growth per table row for one request signature, valid at the row's stamp."""

    __slots__ = ("stamp", "value")

    def __init__(self) -> None:
        self.stamp = np.full(0, -1, dtype=np.int64)
        self.value = np.zeros(0)

    def ensure(self, size: int) -> None:
        if size > len(self.stamp):
            grow = max(size, 2 * len(self.stamp)) - len(self.stamp)
            self.stamp = np.concatenate([self.stamp, np.full(grow, -1, dtype=np.int64)])
            self.value = np.concatenate([self.value, np.zeros(grow)])


class FgdState:
    """The policy's per-engine caches (kept in ``NodeBatch.cache``): per backend, every row's devices and
    mix state (:class:`RowStore`); per request signature, every row's growth at the row's stamp."""

    def __init__(self) -> None:
        self.version = -1
        self.by_signature: dict[tuple[Any, ...], _Cache] = {}
        self.stores: dict[str, RowStore] = {}

    def growth(self, batch: NodeBatch, workload: Workload, select: str, weights: tuple[int, int, int],
               host: tuple[int, int]) -> np.ndarray:
        if workload.version != self.version:
            self.version = workload.version
            self.by_signature.clear()
        cache = self.by_signature.setdefault((batch.shapes, select, weights, host), _Cache())
        rows = np.asarray(batch.rows, dtype=np.intp)
        stamps = np.asarray(batch.generations, dtype=np.int64)
        cache.ensure(int(rows.max()) + 1 if len(rows) else 0)
        stale = np.flatnonzero(cache.stamp[rows] != stamps)
        if len(stale):
            nodes = batch.nodes if len(stale) == len(rows) else [batch.nodes[i] for i in stale.tolist()]
            values = self.compute(rows[stale], stamps[stale], nodes, batch.shapes, workload, select, weights, host)
            cache.value[rows[stale]] = values
            cache.stamp[rows[stale]] = stamps[stale]
        return cache.value[rows]

    def compute(self, rows: np.ndarray, stamps: np.ndarray, nodes: Sequence[Any], shapes: Sequence[Shape],
                workload: Workload, select: str, weights: tuple[int, int, int],
                host: tuple[int, int]) -> np.ndarray:
        """Growth per node (``nodes[i]`` at table row ``rows[i]``, stamp ``stamps[i]``); ``inf`` where a
        request has no usable device. Each (container, backend) request adds its growth on its backend's
        devices; the pod's CPU and memory count against the node's, with its first request."""
        out = np.zeros(len(rows))
        if not shapes:  # no device: only its CPU and memory change what the mix can still use
            if not any(host):
                return out
            for backend in sorted({c[0].backend for c in workload.classes}):
                store = self._store(backend, rows, stamps, nodes)
                mix = store.mix_for(workload.version, workload.for_backend(backend))
                out += host_growth(store.state(rows, mix), store.host[rows], host, mix)
            return out
        for i, shape in enumerate(shapes):
            store = self._store(shape.backend, rows, stamps, nodes)
            mix = store.mix_for(workload.version, workload.for_backend(shape.backend))
            out += placement_delta(store.view(rows), shape, mix, select=select, weights=weights,
                                   host_need=host if i == 0 else (0, 0), state=store.state(rows, mix))
        return out

    def _store(self, backend: str, rows: np.ndarray, stamps: np.ndarray, nodes: Sequence[Any]) -> RowStore:
        store = self.stores.get(backend)
        if store is None:
            store = self.stores[backend] = RowStore(backend)
        store.refresh(rows, stamps, nodes)
        return store


def node_growth(nodes: Sequence[Any], shapes: Sequence[Shape], workload: Workload, select: str,
                weights: tuple[int, int, int] = (1, 1, 1), host: tuple[int, int] = (0, 0)) -> np.ndarray:
    """Fragmentation growth (milli) of each node if the pod with ``shapes`` is placed there, computed
    from scratch (no engine caches); see :meth:`FgdState.compute`."""
    rows = np.arange(len(nodes), dtype=np.intp)
    return FgdState().compute(rows, rows.astype(np.int64) + 1, nodes, shapes, workload, select, weights, host)


@hookimpl
def hami_scheduling_policies() -> list[PolicyInfo]:
    return [PolicyInfo(FGD, "node", "fragmentation gradient descent: the node whose expected fragmentation "
                                    "under the recent workload mix grows least (ties: binpack)",
                       ranks_all_pods=True)]


@hookimpl
def hami_prescore_nodes(pod: Mapping[str, Any], batch: NodeBatch, policy: GpuPolicy) -> np.ndarray | None:
    if policy.node != FGD:
        return None
    tie = packing_scores(batch.totals)
    workload = batch.workload
    if not isinstance(workload, Workload) or not workload.classes:
        return tie  # nothing learned yet (or a hand-built batch): plain binpack
    select = device_select(policy)
    if batch.cache is not None and batch.rows is not None and batch.generations is not None:
        state = batch.cache.get(FGD)
        if not isinstance(state, FgdState):
            state = batch.cache[FGD] = FgdState()
        growth = state.growth(batch, workload, select, policy.weights, host_requests(pod))
    else:
        growth = node_growth(batch.nodes, batch.shapes, workload, select, policy.weights, host_requests(pod))
    return np.where(np.isfinite(growth), quantised_score(growth, workload.steps) * _BUCKET, INFEASIBLE) + tie
