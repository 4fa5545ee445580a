"""The ``fgd`` policy's reservation term: device types kept for the classes that can use nothing else.

FGD's measure charges nothing for *taking* share, so without the term an unconstrained pod may fill a device type
whose own pods then find no room (docs/fgd.md, "Device types in short supply"). The claims are made by water
filling, the most constrained group first; the numbers below are worked by hand.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from hami_core import Engine
from hami_core.engine.workload import Shape
from hami_core.policies.fgd.config import FgdConfig
from hami_core.policies.fgd.scarcity import Claims, claimed_penalty, demand
from hami_core.sim import openb
from hami_core.sim.openb import Task, TraceNode

WHOLE = {"cores": 100, "memPercentage": 100}
ANY = Shape("NVIDIA", 1, 100, 0, 100)
T4 = Shape("NVIDIA", 1, 100, 0, 100, use_types=("T4",))
G2 = Shape("NVIDIA", 1, 100, 0, 100, use_types=("G2",))
T4_OR_P100 = Shape("NVIDIA", 1, 100, 0, 100, use_types=("T4", "P100"))
TYPES = ("NVIDIA-T4", "NVIDIA-G2", "NVIDIA-P100")


def test_demand_of_a_shape() -> None:
    assert demand(ANY) == 1000
    assert demand(Shape("NVIDIA", 4, 100, 0, 100)) == 4000
    assert demand(Shape("NVIDIA", 1, 30, 0, 30)) == 300
    assert demand(Shape("NVIDIA", 2, 0, 4096)) == 2  # MiB alone: no share known, one milli per device


def test_a_type_asked_beyond_its_supply_is_wholly_claimed() -> None:
    claims = Claims([(T4, 0.5, 0, 0), (ANY, 0.5, 0, 0)], TYPES[:2])
    free = np.array([800.0, 2000.0])
    # demand scaled to the 2,800 free: T4-only asks 1,400 of the T4's 800, so all 800 are claimed
    assert claims.pressure(ANY, free).tolist() == [1.0, 0.0]
    assert claims.pressure(T4, free).tolist() == [0.0, 0.0]  # a group's own claim never weighs on it
    # a smaller T4-only share claims part: 0.2 of 1,000 milli per pod, scaled by 2,800: 560 of 800
    part = Claims([(T4, 0.2, 0, 0), (ANY, 0.8, 0, 0)], TYPES[:2])
    assert part.pressure(ANY, free) == pytest.approx([0.7, 0.0])


def test_groups_claim_in_order_of_their_accepted_free_share() -> None:
    free = np.array([1000.0, 6000.0, 1000.0])
    # scale 8000 / 1000: T4-only 0.1 -> 800; T4-or-P100 0.2 -> 1600 of the 200 + 1000 left, in proportion;
    # G2-only 0.2 -> 1600 of 6000
    claims = Claims([(T4, 0.1, 0, 0), (T4_OR_P100, 0.2, 0, 0), (G2, 0.2, 0, 0), (ANY, 0.5, 0, 0)], TYPES)
    assert claims.pressure(T4_OR_P100, free) == pytest.approx([0.8, 0.0, 0.0])
    # the next group (T4 or P100, 2,000 accepted) takes all it can reach; G2-only (6,000) comes after it
    assert claims.pressure(G2, free) == pytest.approx([1.0, 0.0, 1.0])
    assert claims.pressure(ANY, free) == pytest.approx([1.0, 1600 / 6000, 1.0])
    # a shape no class of the mix has is ordered by its own accepted share: G2 or P100 (7,000) comes after every
    # group but the unconstrained one (8,000)
    g2_or_p100 = Shape("NVIDIA", 1, 50, 0, 50, use_types=("G2", "P100"))
    assert claims.pressure(g2_or_p100, free) == pytest.approx([1.0, 1600 / 6000, 1.0])
    # one accepting as little as the first group (a tie in share and count) is ordered by its types, never by
    # the order classes were listed
    p100 = Shape("NVIDIA", 1, 50, 0, 50, use_types=("P100",))
    assert claims.pressure(p100, free).tolist() == Claims(list(reversed(
        [(T4, 0.1, 0, 0), (T4_OR_P100, 0.2, 0, 0), (G2, 0.2, 0, 0), (ANY, 0.5, 0, 0)])), TYPES).pressure(
        p100, free).tolist()


def test_penalty_is_the_share_taken_times_the_pressure_of_the_rows_type() -> None:
    claims = Claims([(T4, 0.2, 0, 0), (ANY, 0.8, 0, 0)], TYPES[:2])
    free = np.array([800.0, 2000.0])
    half = Shape("NVIDIA", 1, 50, 0, 50)
    # rows: a T4 node, a G2 node, a node of both (the pod's best device there is the G2), an empty row
    type_idx = np.array([[0, 0], [1, 1], [0, 1], [-1, -1]])
    assert claimed_penalty(claims, free, [half], type_idx) == pytest.approx([0.7 * 500, 0.0, 0.0, 0.0])
    assert claimed_penalty(claims, free, [T4], type_idx).tolist() == [0.0, 0.0, 0.0, 0.0]


def test_a_mix_without_type_constraints_claims_nothing() -> None:
    claims = Claims([(ANY, 0.5, 0, 0), (Shape("NVIDIA", 1, 30, 0, 30), 0.5, 0, 0)], TYPES[:2])
    assert not claims.constrained
    assert claimed_penalty(claims, np.array([10.0, 10.0]), [ANY], np.array([[0], [1]])).tolist() == [0.0, 0.0]


def _engine(reserve: float) -> Engine:
    workload = [{**WHOLE, "types": ["T4"], "weight": 0.3}, {**WHOLE, "types": ["G2"], "weight": 0.3},
                {**WHOLE, "weight": 0.4}]
    engine = Engine({"nvidia": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "fgd",
                                                 "fgd": {"workload": workload, "reserve": reserve}}})
    # the T4 node is learned first, so ties in node order favour it
    for node in (TraceNode("t4", 64000, 262144, 2, "T4"), TraceNode("g2", 96000, 786432, 6, "G2")):
        engine.upsert_node(openb.node_object(node))
    return engine


def _place(engine: Engine, task: Task) -> str | None:
    pod = engine.admit(openb.pod_object(task))
    decision = engine.schedule(pod, limit=1)
    if decision.node is None:
        return None
    engine.reserve(pod, decision)
    engine.mark_placed(pod)
    return decision.node


@pytest.mark.parametrize(("reserve", "expected"), [
    # without the term both placements of an unconstrained card remove the same fragments (the classes refusing
    # each type weigh 0.3): the tie goes to the T4 node, and the T4-only pods find nothing
    (0.0, ["t4", "t4", None, None]),
    # with it the T4 cards are claimed (T4-only asks 0.3 x 8,000 of their 2,000): the unconstrained pods go to G2
    (1.0, ["g2", "g2", "t4", "t4"]),
])
def test_unconstrained_pods_leave_a_scarce_type_to_its_own_pods(reserve: float, expected: list[str | None]) -> None:
    engine = _engine(reserve)
    tasks = [Task("any-0", 4000, 8192, 1, 1000), Task("any-1", 4000, 8192, 1, 1000),
             Task("t4-0", 4000, 8192, 1, 1000, "T4"), Task("t4-1", 4000, 8192, 1, 1000, "T4")]
    assert [_place(engine, t) for t in tasks] == expected


def test_reserve_config_is_validated() -> None:
    assert FgdConfig().reserve == 1.0
    assert FgdConfig.model_validate({"reserve": 0}).reserve == 0
    for bad in (-1, float("nan"), "lots"):
        with pytest.raises(ValueError, match="reserve"):
            FgdConfig.model_validate({"reserve": bad})


def test_an_engine_without_typed_classes_scores_as_before() -> None:
    def placements(reserve: float) -> list[Any]:
        engine = Engine({"nvidia": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "fgd",
                                                     "fgd": {"reserve": reserve}}})
        for i in range(4):
            engine.upsert_node(openb.node_object(TraceNode(f"n{i}", 32000, 131072, 2 + i % 2, "G2")))
        return [_place(engine, Task(f"p{i}", 1000 * (1 + i % 3), 4096, 1, 100 * (1 + i % 10))) for i in range(30)]
    assert placements(1.0) == placements(0.0)
