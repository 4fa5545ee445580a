"""``examples/iluvatar/``: the example node and pods load as the simulator loads them and all schedule."""

from __future__ import annotations

from pathlib import Path

import yaml
from iluvatar_testlib import Clock, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "iluvatar"
NODE = "iluvatar-bi150-0"
ALLOCATED = "hami.io/BI-V150-devices-allocated"


def load(name: str, kind: str) -> list[dict]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def engine() -> Engine:
    return Engine(str(EXAMPLES / "device-config.yaml"), plugins=plugin_manager(), clock=Clock())


def test_example_config_enables_the_chart_chips() -> None:
    assert yaml.safe_load((EXAMPLES / "device-config.yaml").read_text(encoding="utf-8")) == {"iluvatars": None}
    assert sorted(engine().backends) == ["BI-V100", "BI-V150", "MR-V100", "MR-V50"]


def test_example_node_registers_four_bi_v150_cards() -> None:
    (node,) = load("node.yaml", "Node")
    e = engine()
    status = e.upsert_node(node)
    assert status.devices == {"BI-V150": 4}
    assert status.errors == {} and status.unhealthy == {}
    devices = e.nodes[NODE].devices["BI-V150"]
    assert [(d.id[-4:], d.index, d.count, d.totalmem, d.totalcore, d.numa) for d in devices] == [
        ("0000", 0, 10, 32768, 100, 0), ("0001", 1, 10, 32768, 100, 0),
        ("0002", 2, 10, 32768, 100, 1), ("0003", 3, 10, 32768, 100, 1)]


def test_every_example_pod_schedules_onto_the_example_node() -> None:
    (node,) = load("node.yaml", "Node")
    pods = load("pods.yaml", "Pod")
    assert [p["metadata"]["name"] for p in pods] == [
        "bi150-infer-0", "bi150-whole-memory", "bi150-train-2cards", "bi150-infer-1"]
    e = engine()
    e.upsert_node(node)
    placed = {}
    for pod in pods:
        admitted = e.admit(pod)
        decision = e.schedule(admitted)
        assert decision.node == NODE, (pod["metadata"]["name"], decision.failed)
        e.reserve(admitted, decision)
        placed[pod["metadata"]["name"]] = decision.annotations[ALLOCATED]
    uuid = "GPU-b150000{}-8c1e-5a3f-9d2b-00000000000{}".format
    assert placed == {
        "bi150-infer-0": f"{uuid(0, 0)},BI-V150,16384,50:;",
        "bi150-whole-memory": f"{uuid(3, 3)},BI-V150,32768,0:;",
        "bi150-train-2cards": f"{uuid(2, 2)},BI-V150,32768,100:{uuid(1, 1)},BI-V150,32768,100:;",
        "bi150-infer-1": f"{uuid(0, 0)},BI-V150,8192,30:;",
    }
