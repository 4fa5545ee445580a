"""``examples/vastai/`` as ``hami simulate`` reads it: the node registers its dies, and the pods, admitted and
scheduled in order by an engine on the example config, all land on the example node."""

from __future__ import annotations

from pathlib import Path

from vastai_testlib import ALLOCATED, HANDSHAKE, Clock, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

DIR = Path(__file__).resolve().parents[3] / "examples" / "vastai"


def example(name: str, kind: str) -> list[dict]:
    text = (DIR / name).read_text(encoding="utf-8")
    return load_objects(text, source=str(DIR / name), kind=kind)


def example_engine(clock: Clock) -> tuple[Engine, dict]:
    """An engine on ``device-config.yaml`` that has seen ``node.yaml``, and the status of that node."""
    engine = Engine(DIR / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    (node,) = example("node.yaml", "Node")
    return engine, engine.upsert_node(node)


def test_the_node_registers_six_dies_on_three_cards(clock: Clock) -> None:
    engine, status = example_engine(clock)
    assert (status.devices, status.errors, set(status.patch)) == ({"Vastai": 6}, {}, {HANDSHAKE})
    dies = engine.nodes["vastai-node-0"].devices["Vastai"]
    assert {(d.type, d.count, d.totalmem, d.totalcore) for d in dies} == {("Vastai", 1, 32768, 100)}
    assert sorted({d.info.custom_info["AIC"] for d in dies}) == ["aic-0", "aic-1", "aic-2"]


def test_the_pods_land_in_order_on_the_node(clock: Clock) -> None:
    engine, _ = example_engine(clock)
    got: dict[str, str] = {}
    for pod in map(engine.admit, example("pods.yaml", "Pod")):
        decision = engine.schedule(pod)
        assert (pod["spec"]["schedulerName"], decision.node) == ("hami-scheduler", "vastai-node-0"), decision.failed
        engine.reserve(pod, decision)
        got[pod["metadata"]["name"]] = decision.annotations[ALLOCATED]
    # One die: the preferred (last) one; two: both dies of one free card; mutex: a die on the idle card; by id.
    assert got == {"vastai-pod": "VA16-2-die1,Vastai,0,0:;",
                   "vastai-two-dies": "VA16-1-die1,Vastai,0,0:VA16-1-die0,Vastai,0,0:;",
                   "vastai-exclusive-card": "VA16-0-die1,Vastai,0,0:;",
                   "vastai-by-uuid": "VA16-2-die0,Vastai,0,0:;"}
