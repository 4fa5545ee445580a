"""The examples in ``examples/mthreads/`` load with the simulator's loader and schedule onto the example node."""

from __future__ import annotations

from pathlib import Path

import yaml
from mthreads_testlib import ALLOCATED, GPU_INDEX, PREDICATE_NODE, Clock, make_engine

from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "mthreads"


def load(name: str, kind: str) -> list[dict]:
    return load_objects((EXAMPLES / name).read_text(encoding="utf-8"), source=name, kind=kind)


def test_example_config_is_the_chart_default() -> None:
    config = yaml.safe_load((EXAMPLES / "device-config.yaml").read_text(encoding="utf-8"))
    assert make_engine(config["mthreads"]).backends["Mthreads"] == make_engine().backends["Mthreads"]


def test_example_node_registers_eight_48_gib_gpus() -> None:
    (node,) = load("node.yaml", "Node")
    engine = make_engine()
    status = engine.upsert_node(node)
    assert status.devices == {"Mthreads": 8}
    assert status.errors == {}
    devs = engine.nodes["mtt-node-1"].devices["Mthreads"]
    assert [(d.id, d.totalmem, d.totalcore, d.count) for d in devs] == [
        (f"mtt-node-1-mthreads-{i}", 49152, 16, 100) for i in range(8)]


def test_every_example_pod_is_admitted_and_scheduled_onto_the_example_node(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    pods = load("pods.yaml", "Pod")
    assert [p["metadata"]["name"] for p in pods] == ["sgpu-small", "whole-card", "two-cards", "shared-gpu", "pinned"]
    engine = make_engine(clock=clock)
    engine.upsert_node(node)
    placed = {}
    for raw in pods:
        pod = engine.admit(raw)
        decision = engine.schedule(pod)
        assert decision.node == "mtt-node-1", (pod["metadata"]["name"], decision.failed)
        assert decision.annotations[PREDICATE_NODE] == "mtt-node-1"
        engine.reserve(pod, decision)
        placed[pod["metadata"]["name"]] = decision.annotations
    # Spread over idle GPUs tries the last one first; the pinned pod must use GPU 7 whatever its load.
    assert placed["sgpu-small"][ALLOCATED] == "mtt-node-1-mthreads-7,Mthreads,4096,4:;"
    assert placed["two-cards"][GPU_INDEX].count(",") == 1
    shared = placed["shared-gpu"][ALLOCATED].split(";")
    assert shared[0].split(",")[0] == shared[1].split(",")[0]
    assert placed["pinned"][ALLOCATED] == "mtt-node-1-mthreads-7,Mthreads,16384,8:;"
    assert placed["pinned"][GPU_INDEX] == "7"
