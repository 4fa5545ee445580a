"""HAMi ``VastaiDevices.ScoreNode``: per container, the share of its dies on its most used card, added raw to the
node score (not policy neutral)."""

from __future__ import annotations

from typing import Any

import pytest
from vastai_testlib import NODE_POLICY, Clock, card_node, die_node, make_backend, make_engine, make_pod, va_container

from hami_core.plugins.types import ContainerDevice, PodSingleDevice, ScoreCandidate, UsageTotals
from hami_core.testing import FakeNode
from hami_vastai.fit import aic_score


def dev(aic: Any = None, strategy: Any = "die", *, info: dict[str, Any] | None = None) -> ContainerDevice:
    custom = info if info is not None else {"DeviceStrategy": strategy, "AIC": aic}
    return ContainerDevice("d", "Vastai", 0, 0, custom_info=custom)


@pytest.mark.parametrize(("devices", "score"), [
    (((dev("1"), dev("1")),), 1.0),
    (((dev("1"), dev("2")),), 0.5),
    (((dev("1"), dev("1"), dev("2")),), 2 / 3),
    # one sum over containers; containers without devices are skipped
    (((dev("1"),), (), (dev("1"), dev("2"), dev("3"), dev("3"))), 1.5),
    # a device without custominfo, with another strategy or without an AIC key: the whole score is 0
    (((dev("1"),), (ContainerDevice("d", "Vastai", 0, 0),)), 0.0),
    (((dev("1"),), (dev("1", "card"),)), 0.0),
    (((dev("1"),), (dev(info={"DeviceStrategy": "die"}),)), 0.0),
    # no strategy key, or a strategy that is not a string, is not a refusal
    (((dev(info={"AIC": "1"}), dev(info={"AIC": "1"})),), 1.0),
    (((dev("1", None), dev("2", 7)),), 0.5),
    # an AIC that is not a string counts for nothing (and an empty custominfo has no AIC key)
    (((dev("1"), dev(5)),), 1.0),
    (((dev(5),),), 0.0),
    (((dev(info={}),),), 0.0),
    ((), 0.0),
])
def test_aic_score(devices: PodSingleDevice, score: float) -> None:
    assert aic_score(devices) == pytest.approx(score)


def test_hook_gives_none_where_the_pod_has_no_vastai_device() -> None:
    node = FakeNode("n")
    cands = [ScoreCandidate(node, {"Vastai": ((dev("1"), dev("2")),)}, {}, UsageTotals()),
             ScoreCandidate(node, {"NVIDIA": ((ContainerDevice("g", "NVIDIA", 1, 1),),)}, {}, UsageTotals()),
             ScoreCandidate(node, {"Vastai": ((),)}, {}, UsageTotals())]
    scores = make_backend().hami_score_nodes(cands)
    assert [s.value if s is not None else None for s in scores] == [0.5, None, None]
    assert not scores[0].neutral


@pytest.mark.parametrize(("policy", "node"), [("binpack", "compact"), ("spread", "split")])
def test_node_policy_sees_the_raw_score(clock: Clock, policy: str, node: str) -> None:
    # Raw, as HAMi adds it: binpack (highest) takes the node where both dies share a card; spread (lowest) the other.
    engine = make_engine(clock=clock)
    engine.upsert_node(die_node("compact", [2]))
    engine.upsert_node(die_node("split", [1, 1]))
    decision = engine.schedule(make_pod(va_container(num=2), annotations={NODE_POLICY: policy}))
    assert decision.node == node
    assert decision.scores == {"compact": pytest.approx(1.0), "split": pytest.approx(0.5)}


def test_whole_cards_score_zero_and_the_default_score_decides(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(card_node("idle", 2, count=2))
    engine.upsert_node(card_node("busy", 2, count=2))
    occupant = make_pod(va_container(), name="occupant")
    engine.reserve(occupant, engine.schedule(occupant, ["busy"]))
    decision = engine.schedule(make_pod(va_container(), annotations={NODE_POLICY: "binpack"}))
    # HAMi's default score: 10 x (used/count + 0 cores + 0 MiB) = 10 x 1/4 on "busy" (cores 100 per device).
    assert (decision.node, decision.scores) == ("busy", {"busy": pytest.approx(2.5), "idle": 0.0})
