"""examples/ascend: the node, the pods and the device config load and schedule as documented."""

from __future__ import annotations

from pathlib import Path

from ascend_testlib import Clock, allocated_key, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "ascend"
B3 = "Ascend910B3"


def load(name: str, kind: str) -> list[dict]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def test_every_example_pod_is_placed_on_the_example_node() -> None:
    (node,) = load("node.yaml", "Node")
    pods = load("pods.yaml", "Pod")
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=Clock())
    assert len(engine.backends) == 7
    status = engine.upsert_node(node)
    assert status.devices == {B3: 8}
    assert status.errors == {}
    placed = {}
    for pod in pods:
        admitted = engine.admit(pod)
        decision = engine.schedule(admitted)
        assert decision.node == "ascend-910b3-0", (pod["metadata"]["name"], decision.failed)
        engine.reserve(admitted, decision)
        placed[pod["metadata"]["name"]] = decision.annotations[allocated_key(B3)]
    chip = "NPU-910b3-{:02d}-7f3c2a,Ascend910B3,{},{}:".format
    assert placed == {
        "train-910b3-0": "".join(chip(i, 65536, 0) for i in (7, 6, 5, 4)) + ";",
        "infer-vnpu-16g": chip(3, 16384, 0) + ";",
        "infer-vnpu-32g": chip(2, 32768, 0) + ";",
        "notebook-soft-split": chip(1, 15360, 20) + ";",
        "batch-with-sidecar": ";" + chip(0, 65536, 0) + ";",
    }
