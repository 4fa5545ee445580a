"""HAMi's default node score (spec §7.3): occupancy of slots, cores and memory before the pod."""

from __future__ import annotations

import numpy as np

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import GpuPolicy, NodeBatch


def default_scores(totals: np.ndarray) -> np.ndarray:
    """HAMi's default node score for every row of a ``(n, 6)`` totals array, vectorised:
    ``10 x (used/count + usedcores/totalcore + usedmem/totalmem)``, 0 where any denominator is 0."""
    used, count, usedcores, totalcore, usedmem, totalmem = totals.T
    valid = (count > 0) & (totalcore > 0) & (totalmem > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = 10.0 * (used / count + usedcores / totalcore + usedmem / totalmem)
    return np.where(valid, score, 0.0)


#: Node policies that rank by their own prescore and include the default score themselves (as a tie-break).
OWN_SCORE_POLICIES = frozenset({"fgd"})


@hookimpl
def hami_prescore_nodes(batch: NodeBatch, policy: GpuPolicy) -> np.ndarray | None:
    if policy.node in OWN_SCORE_POLICIES:
        return None
    return default_scores(np.asarray(batch.totals, dtype=float).reshape(-1, 6))
