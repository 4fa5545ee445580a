"""``examples/awsneuron/``: the node, the pods and the config load as ``hami simulate`` reads them, and every
example pod is placed on the example node by an engine."""

from __future__ import annotations

from pathlib import Path

from awsneuron_testlib import ALLOCATED, AWS_NEURON_IDS, RESOURCE_TYPE, Clock, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_objects

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "awsneuron"
NODE = "awsneuron-node-0"


def load(name: str, kind: str) -> list[dict]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def dev(i: int, cores: int) -> str:
    return f"{NODE}-AWSNeuron-{i},AWSNeuron,0,{cores}:"


def test_example_node_registers_sixteen_two_core_devices(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    status = engine.upsert_node(node)
    assert status.devices == {"AWSNeuron": 16}
    assert status.errors == {}
    assert status.patch == {}  # no handshake: HAMi's Neuron CheckHealth is always healthy
    devices = engine.nodes[NODE].devices["AWSNeuron"]
    assert [d.index for d in devices] == list(range(16))
    assert {(d.type, d.count, d.totalmem, d.totalcore) for d in devices} == {("AWSNeuron", 2, 0, 3)}
    assert {d.info.custom_info["AWSNodeType"] for d in devices} == {"trn1.32xlarge"}


def test_every_example_pod_is_placed_on_the_example_node(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    pods = load("pods.yaml", "Pod")
    assert [p["metadata"]["name"] for p in pods] == ["neuron-device", "neuron-core", "neuron-multi-containers",
                                                     "neuron-four-devices"]
    engine = Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)
    engine.upsert_node(node)
    placed = {}
    for pod in pods:
        admitted = engine.admit(pod)
        assert admitted["spec"]["schedulerName"] == "hami-scheduler"
        decision = engine.schedule(admitted)
        assert decision.node == NODE, decision.failed
        engine.reserve(admitted, decision)
        placed[pod["metadata"]["name"]] = (decision.annotations[ALLOCATED], decision.annotations[AWS_NEURON_IDS],
                                           decision.annotations.get(RESOURCE_TYPE))
    core = "aws.amazon.com/neuroncore"
    assert placed == {
        # a whole device lists its index; spread takes the last idle device first
        "neuron-device": (dev(15, 3) + ";", "15", None),
        # one core: device 14's first core, NeuronCore 2 x 14
        "neuron-core": (dev(14, 1) + ";", "28", core),
        # the second core of device 14, then the first of device 13; the ids list both containers
        "neuron-multi-containers": (dev(14, 2) + ";" + dev(13, 1) + ";", "29,26", core),
        # 8 cores = 4 devices: the first aligned group of idle devices, all their cores
        "neuron-four-devices": ("".join(dev(i, 3) for i in range(4)) + ";", "0,1,2,3,4,5,6,7", core),
    }
