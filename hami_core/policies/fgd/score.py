"""The ``fgd`` node policy's score: Fragmentation Gradient Descent (Weng et al., USENIX ATC '23).

Each candidate node is scored by how much placing the pod there grows the node's expected
fragmentation under the workload mix (:mod:`.fragmentation`, cached per request signature in :mod:`.growth`),
normalised as in the paper to a few score steps (:func:`quantised_score`); the node in the best step wins, and
within a step the ``scheduler.fgd.ties`` tie-break decides: the fullest node (:func:`packing_scores`), the first
learned (:func:`order_scores`) or the one the pod brings closest to the mix's CPU per device share
(:func:`balance_scores`). The pod's devices on the node are chosen by the GPU policy, so the growth is computed for
the device that policy's fit would take (``fgd``: the least growth, ``binpack``: the busiest usable one, otherwise
the idlest). Before any workload is known it is the tie-break alone. See docs/fgd.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hami_core.default_plugins.score import default_scores
from hami_core.engine.pods import host_requests
from hami_core.engine.workload import Shape, shape_share
from hami_core.plugins.types import GpuPolicy, NodeBatch
from hami_core.policies.fgd.growth import FgdState
from hami_core.policies.fgd.mix import Workload
from hami_core.policies.fgd.scarcity import Claims, claimed_penalty

__all__ = ["CACHE_KEY", "CLAIMS_KEY", "INFEASIBLE", "TIE_SPAN", "balance_scores", "claimed_growth", "device_select",
           "node_scores", "order_scores", "packing_scores", "quantised_score", "score_scale"]

#: Where the growth caches live in ``NodeBatch.cache`` (the engine's plugin cache).
CACHE_KEY = "fgd"

#: Where :func:`claimed_growth` keeps each backend's claims in ``NodeBatch.cache``.
CLAIMS_KEY = "fgd.claims"

#: Score of a node where the pod's devices cannot go at all (the fit rejects it anyway).
INFEASIBLE = -1e12
#: One step of the quantised growth score outweighs any tie-break (packing: 0-20; order, balance: 0-50).
_BUCKET = 100.0
#: The most any tie-break adds to a step's score.
TIE_SPAN = 50.0
#: Packing's weight under ``balance``: its 0-20 then moves a score by less than 0.02 of balance's 0-50.
_PACKING_UNDER_BALANCE = 1e-3
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


def balance_scores(cpu_free: np.ndarray, share_free: np.ndarray, need: tuple[float, float],
                   ratio: float) -> np.ndarray:
    """The ``balance`` tie-break, 0..50: how much placing the pod moves each node's free host CPU towards
    ``ratio`` times its free device share (the mix's CPU per share, :meth:`Workload.cpu_per_share`).

    A node's imbalance is ``|cpu_free - ratio x share_free|``; the pod (``need``: CPU milli, device share milli)
    changes it by at most ``cpu + ratio x share`` either way, which maps to 0 (grows it most) .. 50 (shrinks it
    most), 25 for no change. CPU-heavy pods thus go to nodes with CPU to spare and CPU-light ones to nodes short
    of it, so that neither a node's CPU nor its devices run out first. Nodes of unknown CPU score 25.
    """
    cpu, share = need
    span = abs(cpu) + ratio * share
    if ratio <= 0 or span <= 0:
        return np.full(len(cpu_free), 25.0)
    with np.errstate(invalid="ignore"):
        before = np.abs(cpu_free - ratio * share_free)
        after = np.abs(cpu_free - cpu - ratio * (share_free - share))
        out = 25.0 * (1.0 - (after - before) / span)
    return np.where(np.isfinite(out), np.clip(out, 0.0, 50.0), 25.0)


def device_select(policy: GpuPolicy) -> str:
    """The device the GPU policy's fit prefers: the least growth (``fgd``), the busiest (``binpack``) or
    the idlest (anything else)."""
    for token in policy.gpu_tokens:
        if token in ("binpack", "spread", "fgd"):
            return token
    return "binpack" if policy.has("topology-aware") else "spread"


def node_scores(pod: Mapping[str, Any], batch: NodeBatch, policy: GpuPolicy, workload: Workload | None,
                scope: NodeBatch | None = None) -> np.ndarray:
    """The score of every node of ``batch`` for ``pod``: ``quantised growth x 100 + tie-break`` (``INFEASIBLE`` where
    its devices cannot go); the tie-break alone while ``workload`` knows no class.

    Where the engine says which nodes passed its capacity prefilter (``batch.possible``) only those are scored, the
    others get ``INFEASIBLE`` (their scores are not read); the reservation term's claims are still made on the whole
    batch (``scope``: the batch the claims are made on, when ``batch`` is a part of it)."""
    mask = batch.possible
    if (mask is not None and batch.cache is not None and batch.rows is not None and batch.generations is not None
            and isinstance(workload, Workload) and workload.classes and not mask.all()):
        at = np.flatnonzero(mask)
        nodes = batch.nodes
        part = NodeBatch([nodes[i] for i in at.tolist()], np.asarray(batch.totals)[at],
                         rows=np.asarray(batch.rows)[at], generations=np.asarray(batch.generations)[at],
                         shapes=batch.shapes, workload=batch.workload, cache=batch.cache, host=batch.host)
        out = np.full(len(nodes), INFEASIBLE)
        out[at] = node_scores(pod, part, policy, workload, scope=batch)
        return out
    ties = workload.tie_break if isinstance(workload, Workload) else "packing"
    if ties == "order":
        tie = order_scores(batch.rows if batch.rows is not None else np.arange(len(batch.nodes)))
    else:
        tie = packing_scores(batch.totals)
    if not isinstance(workload, Workload) or not workload.classes:
        return tie  # nothing learned yet (or a hand-built batch): packing (balance needs the mix) or order alone
    select = device_select(policy)
    host = batch.host if batch.host is not None else host_requests(pod)
    if batch.cache is not None and batch.rows is not None and batch.generations is not None:
        state = batch.cache.get(CACHE_KEY)
        if not isinstance(state, FgdState):
            state = batch.cache[CACHE_KEY] = FgdState(workload.cache_mib * 2**20)
        rows = np.asarray(batch.rows, dtype=np.intp)
        growth = state.growth(batch, workload, select, policy.weights, host)
    else:  # a hand-built batch: computed afresh (what node_growth does), keeping the stores for the tie-break
        state = FgdState()
        rows = np.arange(len(batch.nodes), dtype=np.intp)
        growth = state.compute(rows, rows.astype(np.int64) + 1, batch.nodes, tuple(batch.shapes), workload, select,
                               policy.weights, host)
    if workload.reserve > 0 and workload.typed:
        scope_rows = None
        if scope is not None and scope.rows is not None and scope.generations is not None:
            scope_rows = np.asarray(scope.rows, dtype=np.intp)
            state.refresh(scope_rows, np.asarray(scope.generations, dtype=np.int64), scope.nodes, tuple(batch.shapes),
                          workload)
        growth = growth + workload.reserve * claimed_growth(state, rows, tuple(batch.shapes), workload, batch.cache,
                                                            scope_rows)
    if ties == "balance":
        shapes = tuple(batch.shapes)
        need = (float(host[0]), sum(s.nums * shape_share(s) for s in shapes))
        ratio = workload.cpu_per_share()
        # packing decides where balance cannot: the mix gives no CPU, the pod asks nothing, or nodes alike
        tie = 25.0 + tie * _PACKING_UNDER_BALANCE
        if ratio > 0 and any(need):  # (else the stores may not hold these rows)
            tie += balance_scores(*state.free_resources(rows, shapes, workload), need, ratio) - 25.0
    return np.where(np.isfinite(growth), quantised_score(growth, workload.steps) * _BUCKET, INFEASIBLE) + tie


def claimed_growth(state: FgdState, rows: np.ndarray, shapes: tuple[Shape, ...], workload: Workload,
                   cache: dict[str, Any] | None = None, scope: np.ndarray | None = None) -> np.ndarray:
    """Per row, the growth (milli) of the pod's ``shapes`` taking device types that more constrained classes claim
    (:mod:`.scarcity`), from the row stores :meth:`FgdState.growth` refreshed. The claims are made on the free
    share of each type over the batch's rows (``scope``, where ``rows`` are a part of the batch: its rows, refreshed
    in the stores too): the engine's batch is every node that can take pods. ``cache`` (the engine's plugin cache)
    keeps each backend's :class:`~.scarcity.Claims` while the mix stands."""
    total = np.zeros(len(rows))
    over = rows if scope is None else scope
    memo = cache.setdefault(CLAIMS_KEY, {}) if cache is not None else {}
    for backend in sorted({s.backend for s in shapes if not s.deviceless}):
        store = state.stores.get(backend)
        if store is None or not len(rows):
            continue
        types = tuple(store.type_list())
        claims = memo.get(backend)
        if claims is None or claims[0] != (workload.version, types):
            claims = memo[backend] = ((workload.version, types), Claims(workload.for_backend(backend), types))
        if not claims[1].constrained:
            continue
        type_idx = store.type_idx[over]
        first = type_idx[:, :1]
        if np.all((type_idx == first) | (type_idx < 0)):  # one type per node: its free share is the row's
            free = np.bincount(first[:, 0][first[:, 0] >= 0], weights=store.free[over][first[:, 0] >= 0],
                               minlength=len(types))
        else:
            shares, valid = store.view(over).free_share(), type_idx >= 0
            free = np.bincount(type_idx[valid], weights=shares[valid], minlength=len(types))
        total += claimed_penalty(claims[1], free, [s for s in shapes if s.backend == backend], store.type_idx[rows])
    return total


def score_scale(workload: Workload | None) -> float:
    """The points of a full score (what normalises to 1.0, ``scheduler.scoreWeights``): the best growth step plus the
    largest tie-break."""
    steps = workload.steps if isinstance(workload, Workload) else Workload(0).steps
    return steps * _BUCKET + TIE_SPAN
