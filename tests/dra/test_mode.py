"""One mode per node: the extender never books a DRA node's devices, ``hami device-plugin`` refuses a DRA node and
``hami dra-driver`` refuses a node not in DRA mode or configured for both, each with a Warning event on the Node."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core.cli import main
from hami_core.cluster.devicemode import check_device_plugin_node
from hami_core.cluster.memory import MemoryCluster
from hami_core.dra.mode import DRA, MODE_LABEL, REFUSED_REASON, check_dra_node, dra_driver_refusal
from hami_core.engine.facade import Engine
from hami_core.plugins.errors import HamiError
from hami_core.scheduler.app import Options, Scheduler
from hami_core.wire import keys


def node(name: str, *, dra: bool = False, registered: bool = True) -> dict[str, Any]:
    devices = [{"id": f"GPU-{name}-{i}", "index": i, "count": 10, "devmem": 24576, "devcore": 100,
                "type": "NVIDIA A10", "mode": "hami-core", "health": True} for i in range(2)]
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "annotations": {}, "labels": {}}
    if registered:
        meta["annotations"][keys.NODE_NVIDIA_REGISTER] = json.dumps(devices)
    if dra:
        meta["labels"][MODE_LABEL] = DRA
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "status": {"allocatable": {"nvidia.com/gpu": "20"}, "capacity": {"nvidia.com/gpu": "20"}}}


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"schedulerName": "hami-scheduler", "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1",
                                                                     "nvidia.com/gpumem": "1000"}}}]},
            "status": {"phase": "Pending"}}


@pytest.fixture
def cluster() -> MemoryCluster:
    # node-d is configured for both modes (labelled DRA, yet registered by the device plugin): still never booked
    return MemoryCluster(nodes=[node("node-a"), node("node-d", dra=True)])


@pytest.fixture
def service(cluster: MemoryCluster) -> Iterator[Scheduler]:
    svc = Scheduler(Engine({"nvidia": {}}), cluster, Options(host="127.0.0.1", port=0, metrics_host=None,
                                                             sync_wait_s=2.0))
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def warnings(cluster: MemoryCluster, name: str) -> list[str]:
    return [e["message"] for e in cluster.events
            if e["reason"] == REFUSED_REASON and e["involvedObject"] == {"kind": "Node", "name": name,
                                                                         "namespace": None, "uid": f"uid-{name}"}]


def test_extender_never_books_a_dra_node(service: Scheduler, cluster: MemoryCluster) -> None:
    only_dra = service.extender.filter({"Pod": cluster.add_pod(pod("p1")), "NodeNames": ["node-d"]})
    assert only_dra["NodeNames"] is None
    assert only_dra["FailedNodes"]["node-d"].startswith(f"node in DRA mode (label {MODE_LABEL}=dra)")
    both = service.extender.filter({"Pod": cluster.add_pod(pod("p2")), "NodeNames": ["node-d", "node-a"]})
    assert both["NodeNames"] == ["node-a"] and both["Error"] == ""


def test_device_plugin_refuses_a_dra_node_with_an_event(cluster: MemoryCluster) -> None:
    check_device_plugin_node(cluster, "node-a")  # device-plugin mode: served
    assert warnings(cluster, "node-a") == []
    with pytest.raises(HamiError, match=r"node node-d is in DRA mode .*hami device-plugin does not serve it"):
        check_device_plugin_node(cluster, "node-d")
    (message,) = warnings(cluster, "node-d")
    assert message.startswith("hami device-plugin: node node-d is in DRA mode")


def test_dra_driver_refuses_a_node_not_in_dra_mode_or_in_both(cluster: MemoryCluster) -> None:
    engine = Engine({"nvidia": {}})
    backends = list(engine.backends.values())
    with pytest.raises(HamiError, match=re.escape("node node-a is not in DRA mode: label it hami.io/device-mode=dra")):
        check_dra_node(cluster, "node-a", backends)
    assert len(warnings(cluster, "node-a")) == 1
    with pytest.raises(HamiError, match=f"node node-d is labelled {MODE_LABEL}=dra but carries NVIDIA's "
                                        f"device-plugin registration annotation {keys.NODE_NVIDIA_REGISTER}"):
        check_dra_node(cluster, "node-d", backends)
    (message,) = warnings(cluster, "node-d")
    assert message.startswith("hami dra-driver: node node-d is labelled")
    # --from-registration publishes that annotation itself: not a second mode
    check_dra_node(cluster, "node-d", backends, from_registration=True)
    cluster.add_node(node("node-r", dra=True, registered=False))
    check_dra_node(cluster, "node-r", backends)
    assert dra_driver_refusal(node("node-r", dra=True, registered=False), backends) is None
    with pytest.raises(HamiError, match="node node-x not found"):
        check_dra_node(cluster, "node-x", backends)


def test_commands_exit_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([node("node-a"), node("node-d", dra=True)]))
    assert main(["dra-driver", "--node-name", "node-a", "--cluster-file", str(path)]) != 0
    assert "node node-a is not in DRA mode" in capsys.readouterr().err
    assert main(["device-plugin", "--vendor", "nvidia", "--node-name", "node-d", "--cluster-file", str(path)]) != 0
    assert "node node-d is in DRA mode" in capsys.readouterr().err


def test_extender_simulation_never_places_on_a_dra_node(service: Scheduler) -> None:
    nodes = {"items": [node("node-d", dra=True), node("node-a")]}
    answer = service.extender.filter({"Pod": pod("sim"), "Nodes": nodes})
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["node-a"]
    assert answer["FailedNodes"]["node-d"].startswith("node in DRA mode")
    only = service.extender.filter({"Pod": pod("sim2"), "Nodes": {"items": [node("node-d", dra=True)]}})
    assert only["Nodes"] is None and set(only["FailedNodes"]) == {"node-d"}
