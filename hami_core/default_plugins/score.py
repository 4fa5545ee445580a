"""HAMi's default node score (spec §7.3): occupancy of slots, cores and memory before the pod."""

from __future__ import annotations

import numpy as np

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import NodeBatch, UsageTotals


def default_score(t: UsageTotals) -> float:
    """``10 x (used/count + usedcores/totalcore + usedmem/totalmem)``; 0 if any denominator is 0."""
    if not t.count or not t.totalcore or not t.totalmem:
        return 0.0
    return 10.0 * (t.used / t.count + t.usedcores / t.totalcore + t.usedmem / t.totalmem)


def default_scores(totals: np.ndarray) -> np.ndarray:
    """:func:`default_score` for every row of a ``(n, 6)`` totals array, vectorised."""
    used, count, usedcores, totalcore, usedmem, totalmem = totals.T
    valid = (count > 0) & (totalcore > 0) & (totalmem > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = 10.0 * (used / count + usedcores / totalcore + usedmem / totalmem)
    return np.where(valid, score, 0.0)


@hookimpl
def hami_prescore_nodes(batch: NodeBatch) -> np.ndarray:
    return default_scores(np.asarray(batch.totals, dtype=float).reshape(-1, 6))
