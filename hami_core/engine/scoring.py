"""How the scores of several scorers make one score per node (spec §7.3; ``scheduler.scoreWeights``).

A *scorer* is one plugin's answers: its ``hami_prescore_nodes`` values, or its ``hami_score_nodes`` NodeScores (the
policy-neutral ones, ``NodeScore(neutral=True)``, are the scorer ``<name>.neutral``). It is named by the plugin
(:func:`scorer_name`): ``hami`` for HAMi's node score, a policy package's name for its score, a backend object's
backend name (``NVIDIA``, ``Metax-SGPU``), a module plugin's registered name (``metax``).

Each scorer's value ``v`` is normalised by its *scale* ``c``, the points it gives a full score (``v / c`` is 0..1:
HAMi's node score is ``10 x`` three occupancy ratios, so ``c = 30``), and multiplied by its *weight* ``w``. The score
of a node is the sum over the scorers::

    score = sum_s  d_s x w_s x v_s / c_s

``d_s`` is the node policy's direction: ``spread`` counts the scorers that follow the policy (every scorer but the
policy-neutral ones) against a node, as a negative multiplier does in nova's weighers. The best node has the highest
score. The weight comes from ``scheduler.scoreWeights.<scorer>``, else from the pod's node policy
(``hami_score_defaults``: a node policy whose own score packs as a tie-break weighs HAMi's node score 0),
else it is the scale itself: the scorer's own points, ``w / c = 1``, and for a policy-neutral scorer
:data:`NEUTRAL_WEIGHT` points per unit. These defaults are HAMi's arithmetic (the raw sum, neutral scores x 10000), so
rankings and scores are HAMi's until an operator sets a weight.

Decisions report the score as HAMi does, in the node policy's orientation (:data:`Decision.scores`, the extender's
FilteringSucceed event): under ``spread`` the lowest figure is the best node. The figure reported is ``d x score``,
computed in that orientation with the very operations HAMi's sum uses, so every default figure is HAMi's to the bit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

__all__ = ["NEUTRAL", "NEUTRAL_WEIGHT", "SPREAD", "ScorerDefaults", "Weights", "log_moves", "log_moves_enabled",
           "scorer_name"]

log = logging.getLogger("hami.engine.score")

#: The suffix naming a scorer's policy-neutral NodeScores (``NodeScore(neutral=True)``).
NEUTRAL = ".neutral"
#: Points per unit of a policy-neutral NodeScore when no weight is set (HAMi's PolicyNeutralScore: it outweighs
#: the policy's own scores).
NEUTRAL_WEIGHT = 10000.0
#: The node policy whose direction is negative: it prefers the node the scorers like least.
SPREAD = "spread"
#: Registered-name prefixes that do not belong in a scorer's name (built-in plugins, backend objects).
_PREFIXES = ("hami.default.", "backend:")


class ScorerDefaults(NamedTuple):
    """What a plugin declares about a scorer (``hami_score_defaults``): its default ``weight`` under the pod's node
    policy (``None``: its own points) and its ``scale``, the points of a full score (``None``: 1, the values are
    taken as normalised already)."""

    weight: float | None = None
    scale: float | None = None


def scorer_name(plugin_name: str, plugin: object = None) -> str:
    """The scorer a plugin's score answers belong to: the plugin's ``HAMI_SCORER`` attribute, or its registered name
    without the built-in (``hami.default.``) or backend-object (``backend:``) prefix."""
    own = getattr(plugin, "HAMI_SCORER", None)
    if isinstance(own, str) and own:
        return own
    for prefix in _PREFIXES:
        if plugin_name.startswith(prefix):
            return plugin_name[len(prefix):]
    return plugin_name


class Weights:
    """The multipliers of one decision's scorers, in the reported orientation (see the module docstring).

    ``answers`` are the ``hami_score_defaults`` answers in call order: a later answer's weight wins, a scale is
    taken from whichever answer declares one (the operator's ``scheduler.scoreWeights`` come last, from HAMi's
    built-in score plugin).
    """

    __slots__ = ("_cache", "_scale", "_weight", "orientation")

    def __init__(self, answers: Iterable[Mapping[str, Any] | None], node_policy: str) -> None:
        #: +1, or -1 under spread (the reported figure is ``orientation x score``)
        self.orientation = -1.0 if node_policy == SPREAD else 1.0
        self._weight: dict[str, float] = {}
        self._scale: dict[str, float] = {}
        self._cache: dict[str, float] = {}
        for answer in answers:
            for name, spec in (answer or {}).items():
                weight, scale = ScorerDefaults(*spec) if isinstance(spec, tuple) else ScorerDefaults(spec)
                if weight is not None:
                    self._weight[name] = float(weight)
                if scale is not None:
                    self._scale[name] = float(scale)

    @classmethod
    def of(cls, answers: list[Mapping[str, Any] | None], node_policy: str) -> Weights:
        """:class:`Weights` of ``answers``, reused while the same answer objects come back (plugins answer the same
        mapping while nothing changed, so a decision costs no merge; answers are not to be changed once given)."""
        key = (node_policy, *map(id, answers))
        hit = _REUSED.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], answers, strict=True)):
            return hit[1]
        if len(_REUSED) >= _REUSED_MAX:
            _REUSED.clear()
        weights = cls(answers, node_policy)
        _REUSED[key] = (list(answers), weights)  # (holding the answers keeps their ids from being reused)
        return weights

    def factor(self, scorer: str) -> float:
        """What the reported figure adds per point of ``scorer``: ``w / c`` for a scorer that follows the policy
        (its direction and the orientation cancel), ``orientation x w / c`` for a policy-neutral one. Exactly 1.0
        (and ``+-NEUTRAL_WEIGHT``) for a scorer without a weight, so defaults cost no arithmetic."""
        cached = self._cache.get(scorer)
        if cached is not None:
            return cached
        neutral = scorer.endswith(NEUTRAL)
        weight = self._weight.get(scorer)
        # no weight: the scorer's own points, exactly (1.0 and NEUTRAL_WEIGHT multiply without rounding)
        value = (NEUTRAL_WEIGHT if neutral else 1.0) if weight is None else weight / self._scale.get(scorer, 1.0)
        if neutral:
            value *= self.orientation
        self._cache[scorer] = value
        return value

    def key(self, reported: float) -> float:
        """The ranking key of a reported figure: higher is better."""
        return reported * self.orientation


#: :meth:`Weights.of`'s cache: (node policy, answer ids) → (the answers, their weights).
_REUSED: dict[tuple[Any, ...], tuple[list[Any], Weights]] = {}
_REUSED_MAX = 256


def log_moves_enabled() -> bool:
    """Whether :func:`log_moves` logs (callers skip collecting the parts otherwise)."""
    return log.isEnabledFor(logging.DEBUG)


def log_moves(phase: str, names: list[str], reported: np.ndarray, parts: list[tuple[str, np.ndarray]],
              weights: Weights) -> None:
    """At DEBUG: how many of ``names`` each scorer moved in the ranking (their rank with and without its part of
    ``reported``), for tuning ``scheduler.scoreWeights``."""
    if not log_moves_enabled() or len(names) < 2:
        return
    order = np.asarray(names, dtype=object)

    def ranks(figures: np.ndarray) -> np.ndarray:
        by_name = np.argsort(order, kind="stable")
        best = by_name[np.argsort(-weights.key(1.0) * figures[by_name], kind="stable")]
        out = np.empty(len(best), dtype=np.intp)
        out[best] = np.arange(len(best))
        return out

    base = ranks(reported)
    moved = {name: int((ranks(reported - part) != base).sum()) for name, part in parts}
    log.debug("%s: %d nodes; nodes each scorer moved: %s", phase, len(names),
              ", ".join(f"{n} {m}" for n, m in moved.items()) or "none")
