"""examples/metax: the example nodes and pods load as the simulator loads them and all get placed."""

from __future__ import annotations

from pathlib import Path

from metax_testlib import Clock, InProcess, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects
from hami_metax.gpu import GPU_ALLOCATED
from hami_metax.sgpu import SGPU_ALLOCATED

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "metax"


def load(name: str, kind: str) -> list[dict]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def test_example_nodes_register_both_backends(clock: Clock) -> None:
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    statuses = {n["metadata"]["name"]: engine.upsert_node(n) for n in load("node.yaml", "Node")}
    assert {name: dict(s.devices) for name, s in statuses.items()} == {
        "metax-sgpu-node-1": {"Metax-SGPU": 4}, "metax-gpu-node-1": {"Metax-GPU": 8}}
    assert all(not s.errors for s in statuses.values())
    zones = [d.info.custom_info["LinkZone"] for d in engine.nodes["metax-sgpu-node-1"].devices["Metax-SGPU"]]
    assert zones == [1, 1, 2, 2]


def test_every_example_pod_is_placed(clock: Clock) -> None:
    cluster = InProcess(Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock))
    for node in load("node.yaml", "Node"):
        cluster.add_node(node)
    pods = load("pods.yaml", "Pod")
    placed = {p["metadata"]["name"]: cluster.submit(p) for p in pods}
    assert {name: p.node for name, p in placed.items()} == {
        "sgpu-inference": "metax-sgpu-node-1",
        "sgpu-notebook": "metax-sgpu-node-1",
        "sgpu-train-2cards": "metax-sgpu-node-1",
        "metax-gpu-train": "metax-gpu-node-1",
    }
    annotations = {name: p.decision.annotations for name, p in placed.items()}
    # The online pod and the normal pod do not share a card; the exclusive pair stays in MetaLink zone 1.
    inference = annotations["sgpu-inference"][SGPU_ALLOCATED]
    notebook = annotations["sgpu-notebook"][SGPU_ALLOCATED]
    assert inference.endswith(",Metax-SGPU,16384,0:;")
    assert notebook.endswith(",Metax-SGPU,8192,30:;")
    assert inference.split(",")[0] != notebook.split(",")[0]
    assert annotations["sgpu-train-2cards"][SGPU_ALLOCATED] == (
        "GPU-9f2a0c11-0002,Metax-SGPU,65536,100:GPU-9f2a0c11-0001,Metax-SGPU,65536,100:;")
    assert annotations["metax-gpu-train"][GPU_ALLOCATED] == (
        "metax-gpu-node-1-metax-7,Metax-GPU,65536,100:metax-gpu-node-1-metax-6,Metax-GPU,65536,100:;")
