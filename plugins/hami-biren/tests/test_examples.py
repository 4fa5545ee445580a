"""``examples/biren/``: the node, the pods and the config load as ``hami simulate`` reads them, and every example
pod is placed on the example node by an engine."""

from __future__ import annotations

from pathlib import Path

from biren_testlib import ALLOCATED, HANDSHAKE, Clock, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "biren"


def load(name: str, kind: str) -> list[dict]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def test_example_node_registers_four_cards(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    status = engine.upsert_node(node)
    assert status.devices == {"Biren": 4}
    assert status.errors == {}
    assert set(status.patch) == {HANDSHAKE}  # the Reported_ mark is answered with a Requesting_ mark
    devices = engine.nodes["biren-node-0"].devices["Biren"]
    assert [(d.id, d.index, d.count, d.totalmem, d.totalcore) for d in devices] == [
        (f"card_{i}", i, 1, 65024, 100) for i in range(4)]


def test_every_example_pod_is_placed_on_the_example_node(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    pods = load("pods.yaml", "Pod")
    assert [p["metadata"]["name"] for p in pods] == ["biren-default-use", "biren-two-cards", "biren-by-uuid"]
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    engine.upsert_node(node)
    placed = {}
    for pod in pods:
        admitted = engine.admit(pod)
        assert admitted["spec"]["schedulerName"] == "hami-scheduler"
        decision = engine.schedule(admitted)
        assert decision.node == "biren-node-0", decision.failed
        engine.reserve(admitted, decision)
        placed[pod["metadata"]["name"]] = decision.annotations[ALLOCATED]
    assert placed == {
        "biren-default-use": "card_3,Biren,0,0:;",
        "biren-two-cards": "card_2,Biren,0,0:card_1,Biren,0,0:;",
        "biren-by-uuid": "card_0,Biren,0,0:;",
    }
