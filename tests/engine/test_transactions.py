"""The two transactions a scheduler runs on the engine: the filter's (Engine.refilter: unreserve, schedule, reserve
on one plan of the pod) and bind's fit check (Engine.check_bind on a mirror of the node), and the plan they share."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.engine.bindcheck import Overcommit
from hami_core.engine.facade import Engine


@pytest.fixture
def engine() -> Engine:
    e = make_engine()
    for name in ("node-a", "node-b"):
        e.upsert_node(nvidia_node(name, gpus=1, mem=10000))
    return e


def _usage(engine: Engine) -> dict[str, int]:
    return {name: sum(d.usedmem for d in s.by_uuid.values()) for name, s in engine.nodes.items()}


def _placed(pod: dict[str, Any], decision: Any) -> dict[str, Any]:
    return {**pod, "metadata": {**pod["metadata"], "annotations": dict(decision.annotations)},
            "spec": {**pod["spec"], "nodeName": decision.node}}


def test_refilter_replaces_the_earlier_reservation(engine: Engine) -> None:
    pod = gpu_pod("p", mem=6000)
    first = engine.refilter(pod, ["node-a"])
    assert first.node == "node-a" and _usage(engine) == {"node-a": 6000, "node-b": 0}
    again = engine.refilter(pod, ["node-a", "node-b"])  # its own reservation does not count against it
    assert again.node is not None and sum(_usage(engine).values()) == 6000


def test_refilter_prefers_nodes_not_avoided_and_falls_back_to_them(engine: Engine) -> None:
    best = engine.schedule(gpu_pod("probe", mem=1000), ["node-a", "node-b"], limit=1).node
    other = "node-b" if best == "node-a" else "node-a"
    assert engine.refilter(gpu_pod("p", mem=1000), ["node-a", "node-b"], avoid={best}).node == other
    engine.unreserve(gpu_pod("p", mem=1000))
    # nothing fits among the others: the avoided node is taken after all
    engine.refilter(gpu_pod("big", mem=9500), [other])
    assert engine.refilter(gpu_pod("q", mem=1000), ["node-a", "node-b"], avoid={best}).node == best


def test_refilter_that_finds_no_node_reserves_nothing(engine: Engine) -> None:
    pod = gpu_pod("p", mem=6000)
    engine.refilter(pod, ["node-a"])
    decision = engine.refilter({**pod, "metadata": {**pod["metadata"]}}, ["nowhere"])
    assert not decision.ok and _usage(engine) == {"node-a": 0, "node-b": 0}


def test_a_plan_is_what_schedule_makes_of_the_pod(engine: Engine) -> None:
    pod = gpu_pod("p", mem=3000)
    plan = engine.plan(pod)
    assert plan.requests == engine.requests(pod) and not plan.empty and plan.policy is not None
    assert plan.key == "uid-default-p" and plan.ref == "default/p" and plan.host_need == (0, 0)
    assert engine.schedule(pod, plan=plan) == engine.schedule(pod)
    bad = gpu_pod("w", mem=1000)
    bad["metadata"]["annotations"] = {"hami.io/device-scoring-weights": "slot=1,core=1"}
    error = engine.plan(bad).error
    assert error is not None and error.startswith("calcScore failed") and engine.schedule(bad).error == error


def test_check_bind_refuses_what_does_not_fit_next_to_the_bound_pods(engine: Engine) -> None:
    node = nvidia_node("node-a", gpus=1, mem=10000)
    first = gpu_pod("a", mem=6000)
    placed = _placed(first, engine.schedule(first, ["node-a"]))
    second = gpu_pod("b", mem=6000)
    late = _placed(second, engine.schedule(second, ["node-a"]))  # decided before ``a`` was booked anywhere
    engine.check_bind(late, "node-a", node, [])  # alone on the node: fits
    with pytest.raises(Overcommit, match="would be over its memory"):
        engine.check_bind(late, "node-a", node, [placed])
    assert _usage(engine) == {"node-a": 0, "node-b": 0}  # the engine's own ledger is untouched


def test_lock_specs_and_simulate(engine: Engine) -> None:
    pod = gpu_pod("p", mem=1000)
    specs = engine.lock_specs(pod)
    assert specs and specs == engine.lock_specs(pod, requests=engine.requests(pod))
    decision = engine.simulate(pod, [nvidia_node("elsewhere", gpus=1)])
    assert decision.node == "elsewhere" and "elsewhere" not in engine.nodes
