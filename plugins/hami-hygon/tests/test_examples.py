"""``examples/hygon/``: the node, the pods and the config load as ``hami simulate`` reads them, and every
example pod is placed on the example node by an engine."""

from __future__ import annotations

from pathlib import Path

from hygon_testlib import ALLOCATED, HANDSHAKE, Clock, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "hygon"


def load(name: str, kind: str) -> list[dict]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def test_example_node_registers_four_k100_cards(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    status = engine.upsert_node(node)
    assert status.devices == {"DCU": 4}
    assert status.errors == {}
    assert set(status.patch) == {HANDSHAKE}  # the Reported_ mark is answered with a Requesting_ mark
    devices = engine.nodes["dcu-node-0"].devices["DCU"]
    assert {(d.type, d.count, d.totalmem, d.totalcore) for d in devices} == {("DCU-K100_AI", 4, 65520, 100)}


def test_every_example_pod_is_placed_on_the_example_node(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    pods = load("pods.yaml", "Pod")
    assert [p["metadata"]["name"] for p in pods] == ["dcu-exclusive-two-cards", "dcu-vdcu", "dcu-by-type",
                                                     "dcu-by-uuid"]
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    engine.upsert_node(node)
    placed = {}
    for pod in pods:
        admitted = engine.admit(pod)
        assert admitted["spec"]["schedulerName"] == "hami-scheduler"
        decision = engine.schedule(admitted)
        assert decision.node == "dcu-node-0", decision.failed
        engine.reserve(admitted, decision)
        placed[pod["metadata"]["name"]] = decision.annotations[ALLOCATED]
    assert placed == {
        "dcu-exclusive-two-cards": "DCU-TPXS320010040503,DCU,65520,100:DCU-TPXS320010040502,DCU,65520,100:;",
        "dcu-vdcu": "DCU-TPXS320010040501,DCU,2000,60:;",
        "dcu-by-type": "DCU-TPXS320010040501,DCU,8000,30:;",
        "dcu-by-uuid": "DCU-TPXS320016070601,DCU,4096,20:;",
    }
