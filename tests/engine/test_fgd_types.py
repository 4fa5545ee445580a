"""The ``fgd`` policy with classes constrained to device types: scored with the paper's 100 steps at least.

A class that refuses a node's device type counts all of that node's free share as fragments, so any pod placed
there removes fragments of that class: FGD steers pods towards device types that few classes need and keeps
the others for the classes that need them. That preference is ``weight of the refusing classes x share
placed``, small against a score step of 25 (docs/simulation.md, gpuspec33).
"""

from __future__ import annotations

from typing import Any

from core_helpers import acme, acme_device, make_node, make_pod, scheduled

from hami_core.engine.workload import Shape
from hami_core.policies.fgd.growth import node_growth
from hami_core.policies.fgd.mix import DEFAULT_SCORE_STEPS, TYPED_SCORE_STEPS, Workload
from hami_core.policies.fgd.plugin import engine_state
from hami_core.policies.fgd.score import quantised_score

HALF = {"backend": "ACME", "cores": 50, "memory": 500}


def _engine(make_engine: Any, workload: list[dict[str, Any]], steps: int | None = None, reserve: float = 1.0) -> Any:
    fgd: dict[str, Any] = {"workload": workload, "reserve": reserve}
    if steps is not None:
        fgd["scoreSteps"] = steps
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                    "fgd": fgd}})
    # t4: one card 30 % used; g2: one idle card. Both have room for half a card after a 10 % pod.
    engine.upsert_node(make_node("t4", [acme_device(0, devmem=1000, id="t4-g0", type="ACME-T4")]))
    engine.upsert_node(make_node("g2", [acme_device(0, devmem=1000, id="g2-g0", type="ACME-G2")]))
    engine.upsert_pod(scheduled(make_pod("run"), "t4", "t4-g0,ACME,300,30:;"))
    return engine


def test_typed_mix_keeps_the_needed_device_type_free(make_engine: Any) -> None:
    pod = make_pod("p", acme(1, 100, 10))
    # Without type constraints both placements leave every class able to use the card (growth 0): packing
    # decides, and t4 is the fuller node.
    plain = _engine(make_engine, [HALF])
    assert plain.schedule(pod, limit=1).node == "t4"
    # Half the mix only runs on T4 cards. On g2 that half can never use the card, so the 100 the pod takes
    # there were fragments of it: growth -50. On t4 nothing changes for either half: growth 0.
    typed_mix = [{**HALF, "types": ["T4"], "weight": 1}, {**HALF, "weight": 1}]
    typed = _engine(make_engine, typed_mix)
    workload: Workload = engine_state(typed).model.snapshot()
    shapes = (Shape("ACME", 1, 10, 100),)
    growth = node_growth([typed.nodes["t4"], typed.nodes["g2"]], shapes, workload, "binpack")
    assert growth.tolist() == [0.0, -50.0]
    # 25 steps put 0 and -50 in one step (packing would choose t4); the typed mix is scored in 100 steps
    assert quantised_score(growth, DEFAULT_SCORE_STEPS).tolist() == [12.0, 12.0]
    assert workload.steps == TYPED_SCORE_STEPS
    assert quantised_score(growth, workload.steps).tolist() == [50.0, 51.0]
    assert typed.schedule(pod, limit=1).node == "g2"  # t4's card stays free for the T4-only half
    # an operator who sets scoreSteps gets exactly that: 25 steps tie the two, and packing picks t4 (with the
    # reservation term off: the T4-only half claims the T4 card, which adds 100 to t4's growth, a step of 25)
    coarse = _engine(make_engine, typed_mix, steps=DEFAULT_SCORE_STEPS, reserve=0)
    assert engine_state(coarse).model.snapshot().steps == DEFAULT_SCORE_STEPS
    assert coarse.schedule(pod, limit=1).node == "t4"
    assert _engine(make_engine, typed_mix, steps=DEFAULT_SCORE_STEPS).schedule(pod, limit=1).node == "g2"


def test_score_steps_of_a_mix() -> None:
    half = Shape("ACME", 1, 50, 500)
    t4_only = Shape("ACME", 1, 50, 500, use_types=("T4",))
    not_g2 = Shape("ACME", 1, 50, 500, nouse_types=("G2",))
    # not configured: 25 steps, 100 once a class is constrained to device types
    assert Workload(1, ((half, 1.0, 0, 0),)).steps == 25
    assert Workload(1, ((half, 0.5, 0, 0), (t4_only, 0.5, 0, 0))).steps == 100
    assert Workload(1, ((not_g2, 1.0, 0, 0),)).steps == 100
    assert Workload(1, ()).steps == 25
    # configured (scheduler.fgd.scoreSteps): exactly that, typed or not
    assert Workload(1, ((half, 0.5, 0, 0), (t4_only, 0.5, 0, 0)), 25).steps == 25
    assert Workload(1, ((t4_only, 1.0, 0, 0),), 400).steps == 400
    assert Workload(1, ((half, 1.0, 0, 0),), 12).steps == 12
