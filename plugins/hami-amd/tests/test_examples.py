"""``examples/amd/``: the node, the pods and the config load as ``hami simulate`` reads them, every example pod is
placed on the example node by an engine, and Allocate then gives the pods sharing a GPU disjoint CU masks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amd_testlib import ALLOCATED, CU_ALLOCATED, MI300X, Clock, make_backend, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.plugins.node_context import NodeContext, bound
from hami_core.sim.loader import load_objects
from hami_core.wire.pods import decode_pod_single_device

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "amd"
G0, G1 = "amd-node-0~0000%3A05%3A00.0", "amd-node-0~0000%3A26%3A00.0"


def load(name: str, kind: str) -> list[dict[str, Any]]:
    path = EXAMPLES / name
    return load_objects(path.read_text(encoding="utf-8"), source=str(path), kind=kind)


def engine(clock: Clock) -> Engine:
    return Engine(EXAMPLES / "device-config.yaml", plugins=plugin_manager(), clock=clock)


def test_example_node_registers_two_mi300x(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    eng = engine(clock)
    status = eng.upsert_node(node)
    assert (status.devices, status.errors, status.patch) == ({"AMD": 2}, {}, {})  # no handshake for AMD
    devices = eng.nodes["amd-node-0"].devices["AMD"]
    assert {(d.type, d.count, d.totalmem, d.totalcore) for d in devices} == {(MI300X, 4, 196608, 304)}


def test_every_example_pod_is_placed_and_gets_an_exclusive_cu_mask(clock: Clock) -> None:
    (node,) = load("node.yaml", "Node")
    pods = load("pods.yaml", "Pod")
    eng = engine(clock)
    eng.upsert_node(node)
    placed, bound_pods = {}, []
    for pod in pods:
        admitted = eng.admit(pod)
        assert admitted["spec"]["schedulerName"] == "hami-scheduler"
        decision = eng.schedule(admitted)
        assert decision.node == "amd-node-0", decision.failed
        eng.reserve(admitted, decision)
        placed[pod["metadata"]["name"]] = decision.annotations[ALLOCATED]
        admitted["metadata"].setdefault("annotations", {}).update(decision.annotations)
        bound_pods.append(admitted)
    assert placed == {
        "amd-whole-gpu": f"{G1},{MI300X},196608,304:;",
        "amd-vgpu-quarter": f"{G0},{MI300X},16384,76:;",
        "amd-vgpu-by-type": f"{G0},{MI300X},49152,100:;",
        "amd-two-containers": f"{G0},{MI300X},4096,30:;{G0},{MI300X},4096,30:;",
    }
    # The device plugin allocates the pods in order; each sees the records of those before it.
    amd, masks = make_backend(), {}
    with bound(NodeContext("amd-node-0", lambda: bound_pods)):
        for pod in bound_pods:
            for index, devices in enumerate(decode_pod_single_device(pod["metadata"]["annotations"][ALLOCATED])):
                if not devices:  # the codec pads a trailing container slot
                    continue
                out = amd.hami_allocate(pod, index, devices)
                pod["metadata"]["annotations"].update(out.pod_annotations)
                masks[(pod["metadata"]["name"], index)] = out.env["HSA_CU_MASK"]
    assert masks == {("amd-whole-gpu", 0): "0:0-303", ("amd-vgpu-quarter", 0): "0:0-75",
                     ("amd-vgpu-by-type", 0): "0:76-175", ("amd-two-containers", 0): "0:176-205",
                     ("amd-two-containers", 1): "0:206-235"}
    assert bound_pods[3]["metadata"]["annotations"][CU_ALLOCATED] == f'{{"{G0}":"176-235"}}'
