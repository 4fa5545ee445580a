"""HAMi's default node score (spec §7.3): occupancy of slots, cores and memory before the pod; and the operator's
score weights (``scheduler.scoreWeights``), which this plugin hands to the engine over every policy's defaults."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import numpy as np

from hami_core.engine.scoring import ScorerDefaults
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import NodeBatch

#: This plugin's scorer (``scheduler.scoreWeights.hami``).
HAMI_SCORER = "hami"
#: Points of a full node score: 10 x three occupancy ratios of at most 1.
SCALE = 30.0
#: Where the operator's weights are kept in the engine's plugin state.
_STATE_KEY = "hami.score"


def default_scores(totals: np.ndarray) -> np.ndarray:
    """HAMi's default node score for every row of a ``(n, 6)`` totals array, vectorised:
    ``10 x (used/count + usedcores/totalcore + usedmem/totalmem)``, 0 where any denominator is 0."""
    used, count, usedcores, totalcore, usedmem, totalmem = totals.T
    valid = (count > 0) & (totalcore > 0) & (totalmem > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = 10.0 * (used / count + usedcores / totalcore + usedmem / totalmem)
    return np.where(valid, score, 0.0)


@hookimpl
def hami_prescore_nodes(batch: NodeBatch) -> np.ndarray:
    return default_scores(np.asarray(batch.totals, dtype=float).reshape(-1, 6))


#: The answer without operator weights: HAMi's node score declares its scale.
_OWN = {HAMI_SCORER: ScorerDefaults(scale=SCALE)}


@hookimpl
def hami_policy_setup(config: Any, state: MutableMapping[str, Any]) -> None:
    weights: Mapping[str, float] = getattr(config, "score_weights", None) or {}
    answer = dict(_OWN)
    for name, weight in weights.items():
        answer[name] = ScorerDefaults(weight, answer[name].scale if name in answer else None)
    state[_STATE_KEY] = answer  # built once: the same answer every decision (the engine reuses its merge)


@hookimpl(trylast=True)
def hami_score_defaults(state: Mapping[str, Any]) -> Mapping[str, ScorerDefaults]:
    # trylast: answered last, so the operator's weights win over every policy's defaults
    answer = state.get(_STATE_KEY) if isinstance(state, Mapping) else None
    return answer if answer is not None else _OWN
