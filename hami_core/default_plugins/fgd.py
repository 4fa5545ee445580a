"""The ``fgd`` node policy: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23).

Each candidate node is scored by how much placing the pod there grows the node's expected
fragmentation under the workload mix (:mod:`hami_core.engine.fragmentation`), normalised as in the
paper to a few score steps (:func:`quantised_score`); the node in the best step wins, and within a step
the fullest node (:func:`packing_scores`). The pod's devices on the node are chosen by the GPU policy,
so the growth is computed for the device that policy's fit would take (``fgd``: the least growth,
``binpack``: the busiest usable one, otherwise the idlest). See docs/fgd.md.

It is a state-only score (``hami_prescore_nodes``), so the engine keeps its best-first evaluation. The
growth per node is cached per request signature at the node's table stamp: a decision recomputes only
the nodes that changed since the last pod of the same signature, which keeps it within a small factor of
binpack. Where the device choice does not depend on the mix (GPU policy binpack/spread, pods without
devices) the cache holds each class's unweighted growth, so a new mix version re-weights it and computes
only the classes new to the mix (:mod:`.fgd_growth`); under GPU policy ``fgd`` a new version recomputes.
Before any workload is known it behaves as binpack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hami_core.default_plugins.fgd_growth import FgdState, node_growth
from hami_core.default_plugins.score import default_scores
from hami_core.engine.pods import host_requests
from hami_core.engine.workload import Workload
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import GpuPolicy, NodeBatch, PolicyInfo

FGD = "fgd"
#: Score of a node where the pod's devices cannot go at all (the fit rejects it anyway).
INFEASIBLE = -1e12
#: One step of the quantised growth score outweighs any tie-break (packing: 0-20; order: 0-50).
_BUCKET = 100.0
#: Table rows the ``order`` tie-break tells apart (more than any cluster has nodes).
_ROW_SPAN = float(2**31)


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


def order_scores(rows: np.ndarray) -> np.ndarray:
    """The ``order`` tie-break: 50 for the node the scheduler learned first (table row 0), falling with the row."""
    return 50.0 * (1.0 - np.asarray(rows, dtype=float) / _ROW_SPAN)


def device_select(policy: GpuPolicy) -> str:
    """The device the GPU policy's fit prefers: the least growth (``fgd``), the busiest (``binpack``) or
    the idlest (anything else)."""
    for token in policy.gpu_tokens:
        if token in ("binpack", "spread", "fgd"):
            return token
    return "binpack" if policy.has("topology-aware") else "spread"


@hookimpl
def hami_scheduling_policies() -> list[PolicyInfo]:
    return [PolicyInfo(FGD, "node", "fragmentation gradient descent: the node whose expected fragmentation "
                                    "under the recent workload mix grows least (ties: binpack)",
                       ranks_all_pods=True)]


@hookimpl
def hami_prescore_nodes(pod: Mapping[str, Any], batch: NodeBatch, policy: GpuPolicy) -> np.ndarray | None:
    if policy.node != FGD:
        return None
    workload = batch.workload
    if isinstance(workload, Workload) and workload.ties == "order":
        tie = order_scores(batch.rows if batch.rows is not None else np.arange(len(batch.nodes)))
    else:
        tie = packing_scores(batch.totals)
    if not isinstance(workload, Workload) or not workload.classes:
        return tie  # nothing learned yet (or a hand-built batch): the tie-break alone
    select = device_select(policy)
    if batch.cache is not None and batch.rows is not None and batch.generations is not None:
        state = batch.cache.get(FGD)
        if not isinstance(state, FgdState):
            state = batch.cache[FGD] = FgdState(workload.cache_mib * 2**20)
        growth = state.growth(batch, workload, select, policy.weights, host_requests(pod))
    else:
        growth = node_growth(batch.nodes, batch.shapes, workload, select, policy.weights, host_requests(pod))
    return np.where(np.isfinite(growth), quantised_score(growth, workload.steps) * _BUCKET, INFEASIBLE) + tie
