"""Scores of several scorers: normalised by scale, weighed (``scheduler.scoreWeights``), summed; HAMi's by default.

The default weights must reproduce HAMi's arithmetic to the bit (the figures reach the extender's FilteringSucceed
event as ``%.2f``, where even a ``-0.0`` would show), so the first test replays the sum the engine did before it
weighed scorers on random clusters and probe scorers, and compares every figure's bits and every ranking.
"""

from __future__ import annotations

import logging
import random
from typing import Any

import numpy as np
import pytest
from core_helpers import acme, acme_device, make_node, make_pod

from hami_core.default_plugins.score import default_scores
from hami_core.engine.scoring import NEUTRAL_WEIGHT, ScorerDefaults, Weights, scorer_name
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import NodeScore

SPREAD = {"hami.io/node-scheduler-policy": "spread"}
#: Probe values: zeros of both signs, negatives, fractions whose sums round.
VALUES = (0.0, -0.0, 1.0, -3.0, 0.1, 0.7, 2.5, 1e-9, 12345.678)


class Pre:
    """A state-only scorer with a fixed value per node name."""

    HAMI_SCORER = "pre"

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table

    @hookimpl
    def hami_prescore_nodes(self, batch: Any) -> Any:
        return np.array([self.table[n.name] for n in batch.nodes])


class Place:
    """A placement scorer answering a fixed NodeScore per node name (None where the table has no entry)."""

    def __init__(self, name: str, table: dict[str, float], neutral: bool) -> None:
        self.HAMI_SCORER = name
        self.table, self.neutral = table, neutral

    @hookimpl
    def hami_score_nodes(self, candidates: Any) -> Any:
        return [NodeScore(self.table[c.node.name], neutral=self.neutral) if c.node.name in self.table else None
                for c in candidates]


def _cluster(engine: Any, rng: random.Random, names: list[str]) -> None:
    for name in names:
        engine.upsert_node(make_node(name, [acme_device(i) for i in range(rng.randint(1, 3))]))
    for i in range(rng.randint(0, 6)):
        pod = make_pod(f"busy{i}", acme(1, rng.choice((500, 1000, 2000)), rng.choice((0, 10, 30))))
        decision = engine.schedule(pod, [rng.choice(names)])
        if decision.node is not None:
            engine.reserve(pod, decision)


def test_default_weights_are_hamis_arithmetic_to_the_bit(make_engine: Any) -> None:
    rng = random.Random(27)
    for _ in range(60):
        names = [f"n{i}" for i in range(rng.randint(2, 6))]
        pre = Pre({n: rng.choice(VALUES) for n in names})
        places = [Place(f"v{k}", {n: rng.choice(VALUES) for n in names if rng.random() < 0.8}, rng.random() < 0.5)
                  for k in range(rng.randint(0, 3))]
        engine = make_engine(None, pre, *places)
        _cluster(engine, rng, names)
        for policy in ({}, SPREAD):
            pod = make_pod("p", acme(1, 100), annotations=policy)
            decision = engine.schedule(pod)
            if decision.node is None:
                continue
            spread = bool(policy)
            rows = engine.table.rows([engine.nodes[n] for n in names])
            hami = dict(zip(names, default_scores(engine.table.totals[rows]).tolist(), strict=True))
            expected = {}
            for n in decision.scores:
                total = float(np.zeros(1)[0] + pre.table[n] + hami[n])  # pluggy: the last registered first
                for place in reversed(places):
                    if n in place.table:
                        value = place.table[n]
                        total += value * (-10000.0 if spread else 10000.0) if place.neutral else value
                expected[n] = total
            assert {n: s.hex() for n, s in decision.scores.items()} == {n: s.hex() for n, s in expected.items()}
            sign = 1.0 if spread else -1.0
            order = sorted(expected, key=lambda n, e=expected, k=sign: (k * e[n], n))
            assert list(decision.nodes) == order


def test_weights_normalise_by_scale_and_multiply(make_engine: Any) -> None:
    nodes = [("busy", 600), ("idle", 0)]

    def engine_with(weights: dict[str, float] | None = None) -> Any:
        engine = make_engine({"acme": {}, "scheduler": {"scoreWeights": weights or {}}})
        for name, used in nodes:
            engine.upsert_node(make_node(name, [acme_device(0, devmem=1000)]))
            if used:
                engine.reserve(pod := make_pod(f"on-{name}", acme(1, used, 50)), engine.schedule(pod, [name]))
        return engine

    base = engine_with().schedule(make_pod("p", acme(1, 100)))
    assert base.node == "busy" and base.scores["idle"] == 0.0
    # hami's scale is 30: a weight of 60 doubles HAMi's points, 30 is the default exactly
    assert engine_with({"hami": 60}).schedule(make_pod("p", acme(1, 100))).scores == {
        n: 2 * s for n, s in base.scores.items()}
    assert engine_with({"hami": 30}).schedule(make_pod("p", acme(1, 100))).scores == base.scores
    # 0 turns the scorer off (ties go to the name); a negative weight prefers what it dislikes
    assert engine_with({"hami": 0}).schedule(make_pod("p", acme(1, 100))).nodes == ("busy", "idle")
    assert engine_with({"hami": -30}).schedule(make_pod("p", acme(1, 100))).node == "idle"
    # spread reverses the scorers that follow the policy; figures stay HAMi's (lowest best)
    spread = engine_with().schedule(make_pod("p", acme(1, 100), annotations=SPREAD))
    assert spread.node == "idle" and spread.scores == base.scores


def test_neutral_scorer_has_its_own_weight(make_engine: Any) -> None:
    prefer_c = Place("probe", {"c": 2.0}, neutral=True)
    cases = (({}, 2 * NEUTRAL_WEIGHT), ({"probe.neutral": 1.5}, 3.0), ({"probe": 7}, 2 * NEUTRAL_WEIGHT))
    for weights, figure in cases:
        engine = make_engine({"acme": {}, "scheduler": {"scoreWeights": weights}}, prefer_c)
        for name in ("a", "b", "c"):
            engine.upsert_node(make_node(name, [acme_device(0)]))
        d = engine.schedule(make_pod("p", acme(1, 100)))
        assert d.node == "c" and d.scores["c"] == figure
        spread = engine.schedule(make_pod("p", acme(1, 100), annotations=SPREAD))
        assert spread.node == "c" and spread.scores["c"] == -figure  # neutral: c wins under spread too


def test_fgd_weighs_hamis_node_score_zero_unless_the_operator_says(make_engine: Any) -> None:
    def fgd_engine(weights: dict[str, float]) -> Any:
        engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "scoreWeights": weights}})
        for name in ("a", "b"):
            engine.upsert_node(make_node(name, [acme_device(0, devmem=1000)]))
        return engine

    plain = fgd_engine({}).schedule(make_pod("p", acme(1, 100)))
    with_hami = fgd_engine({"hami": 30}).schedule(make_pod("p", acme(1, 100)))
    assert plain.scores and with_hami.scores == {n: s + with_hami.scores[n] - plain.scores[n]
                                                 for n, s in plain.scores.items()}
    assert all(w >= p for w, p in zip(with_hami.scores.values(), plain.scores.values(), strict=True))


@pytest.mark.parametrize(("weight", "needle"), [
    (True, r"scheduler\.scoreWeights\.hami: .*must be a number"),
    ("2", r"scheduler\.scoreWeights\.hami: .*must be a number"),
    (float("nan"), r"scheduler\.scoreWeights\.hami: .*finite"),
    (1e10, r"scheduler\.scoreWeights\.hami: .*less than or equal"),
])
def test_bad_weight_names_the_scorer(weight: object, needle: str) -> None:
    from hami_core.engine.config import load_config

    with pytest.raises(ConfigError, match=needle):
        load_config({"scheduler": {"scoreWeights": {"hami": weight}}})


def test_weights_resolution() -> None:
    w = Weights([{"hami": ScorerDefaults(scale=30.0)}, {"hami": ScorerDefaults(weight=0.0), "x": (None, 4.0)},
                 {"x": ScorerDefaults(weight=2.0)}, None], "spread")
    assert (w.factor("hami"), w.factor("x"), w.factor("y"), w.factor("y.neutral")) == (0.0, 0.5, 1.0, -NEUTRAL_WEIGHT)
    assert w.key(3.0) == -3.0 and Weights([], "binpack").factor("y.neutral") == NEUTRAL_WEIGHT
    assert scorer_name("hami.default.score") == "score" and scorer_name("backend:NVIDIA") == "NVIDIA"
    assert scorer_name("anything", Pre({})) == "pre"


def test_debug_log_says_what_each_scorer_moved(make_engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine(None, Pre({"a": 0.0, "b": 50.0, "c": 0.0}))
    for name in ("a", "b", "c"):
        engine.upsert_node(make_node(name, [acme_device(0)]))
    engine.upsert_node(make_node("d"))
    with caplog.at_level(logging.DEBUG, logger="hami.engine"):
        engine.schedule(make_pod("p", acme(1, 100)), ["a", "b", "c", "d"])
    text = caplog.text
    assert "prescore: 3 nodes; nodes each scorer moved: pre 2, hami 0" in text
    assert "filters removed 1 nodes: node unregistered 1" in text
