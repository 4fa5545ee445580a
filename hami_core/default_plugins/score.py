"""HAMi's default node score (spec §7.3): occupancy of slots, cores and memory before the pod."""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import NodeScore, ScoreCandidate, UsageTotals


def default_score(t: UsageTotals) -> float:
    """``10 x (used/count + usedcores/totalcore + usedmem/totalmem)``; 0 if any denominator is 0."""
    if not t.count or not t.totalcore or not t.totalmem:
        return 0.0
    return 10.0 * (t.used / t.count + t.usedcores / t.totalcore + t.usedmem / t.totalmem)


@hookimpl
def hami_score_nodes(candidates: Sequence[ScoreCandidate]) -> list[NodeScore]:
    return [NodeScore(default_score(c.totals)) for c in candidates]
