"""examples/enflame: the example nodes and pods load as the simulator loads them and all get placed."""

from __future__ import annotations

from pathlib import Path

from enflame_testlib import T0, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "enflame"


def load(name: str, kind: str) -> list[dict]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def test_every_example_pod_is_placed() -> None:
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=lambda: T0)
    statuses = {n["metadata"]["name"]: engine.upsert_node(n) for n in load("node.yaml", "Node")}
    assert {name: dict(s.devices) for name, s in statuses.items()} == {
        "enflame-drs-node-1": {"Enflame": 2}, "enflame-gcu-node-1": {"GCU": 4}}
    assert all(not s.errors for s in statuses.values())
    allocated = {}
    for pod in load("pods.yaml", "Pod"):
        admitted = engine.admit(pod)
        decision = engine.schedule(admitted)
        assert decision.node is not None, dict(decision.failed)
        engine.reserve(admitted, decision)
        allocated[pod["metadata"]["name"]] = (decision.node, {k: v for k, v in decision.annotations.items()
                                                              if k.endswith("-allocated")})
    assert allocated == {
        "drs-direct-3-slices": ("enflame-drs-node-1", {
            "hami.io/enflame-vgpu-devices-allocated": "enflame-drs-node-1-enflame-drs-1,Enflame,20480,50:;"}),
        "drs-by-spec": ("enflame-drs-node-1", {
            "hami.io/enflame-vgpu-devices-allocated": "enflame-drs-node-1-enflame-drs-0,Enflame,6144,17:;"}),
        "gcu-train-2cards": ("enflame-gcu-node-1", {
            "hami.io/enflame-gcu-devices-allocated": "enflame-gcu-node-1-GCU-3,GCU,100,100:"
                                                     "enflame-gcu-node-1-GCU-2,GCU,100,100:;"}),
    }
