"""The examples in ``examples/cambricon/`` load with the simulator's loader and schedule as documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from cambricon_testlib import Clock, plugin_manager

from hami_core.engine.config import load_config
from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "cambricon"


def load(name: str, kind: str) -> list[dict]:
    return load_objects((EXAMPLES / name).read_text(encoding="utf-8"), source=name, kind=kind)


@pytest.mark.parametrize(("config", "nodes", "pods", "expected"), [
    ("config.yaml", "node.yaml", "pods.yaml", {
        "mlu-whole-card": ("mlu370-node-0", "hami.io/cambricon-mlu-devices-allocated",
                           "mlu370-node-0-cambricon-mlu-3,MLU,49152,100:;"),
        "mlu-shared": ("mlu370-node-0", "hami.io/cambricon-mlu-devices-allocated",
                       "mlu370-node-0-cambricon-mlu-2,MLU,5120,10:;"),
        "mlu-two-halves": ("mlu370-node-0", "hami.io/cambricon-mlu-devices-allocated",
                           "mlu370-node-0-cambricon-mlu-1,MLU,24576,50:mlu370-node-0-cambricon-mlu-0,MLU,24576,50:;"),
        "mlu-with-sidecar": ("mlu370-node-0", "hami.io/cambricon-mlu-devices-allocated",
                             "mlu370-node-0-cambricon-mlu-2,MLU,2048,5:;;mlu370-node-0-cambricon-mlu-2,MLU,4096,20:;"),
    }),
    ("models-config.yaml", "models-nodes.yaml", "models-pods.yaml", {
        "infer-on-mlu370": ("mlu370-node-0", "hami.io/cambricon-mlu370-devices-allocated",
                            "mlu370-node-0-cambricon-mlu370-3,MLU370,10240,25:;"),
        "train-on-mlu590": ("mlu590-node-0", "hami.io/cambricon-mlu590-devices-allocated",
                            "mlu590-node-0-cambricon-mlu590-7,MLU590,81920,100:mlu590-node-0-cambricon-mlu590-6,MLU590,"
                            "81920,100:mlu590-node-0-cambricon-mlu590-5,MLU590,81920,100:"
                            "mlu590-node-0-cambricon-mlu590-4,MLU590,81920,100:;"),
    }),
])
def test_every_example_pod_is_placed(config: str, nodes: str, pods: str, expected: dict) -> None:
    engine = Engine(load_config(EXAMPLES / config), plugins=plugin_manager(), clock=Clock())
    for node in load(nodes, "Node"):
        status = engine.upsert_node(node)
        assert status.devices and not status.errors, status
    placed = {}
    for pod in load(pods, "Pod"):
        admitted = engine.admit(pod)
        assert admitted["spec"]["schedulerName"] == "hami-scheduler"
        decision = engine.schedule(admitted)
        assert decision.node is not None, decision.failed
        engine.reserve(admitted, decision)
        key = expected[pod["metadata"]["name"]][1]
        placed[pod["metadata"]["name"]] = (decision.node, key, decision.annotations[key])
    assert placed == expected

