"""``hami dra-driver``: discovery through the node-side hooks, publishing, republishing on change only, health,
restarts, ``--dry-run`` and ``--withdraw``, on the in-memory cluster; and the same publication through the official
client against the fake API server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core.cli import main
from hami_core.cluster.memory import MemoryCluster
from hami_core.dra.driver import DraDriver, node_slices, withdraw
from hami_core.dra.model import driver_name
from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.node_context import current
from hami_core.plugins.standard import StandardBackend
from hami_core.plugins.types import DeviceInfo, ResourceNames
from hami_core.wire import keys

NODE = "gpu-1"
DRIVER = driver_name("ACME")


class Watch:
    def __init__(self, on_health: Callable[[str, bool], None]) -> None:
        self.on_health = on_health
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


@dataclass(frozen=True, slots=True)
class AcmeBackend(StandardBackend):
    """A vendor with node-side discovery and a health watch, as NVIDIA has them."""

    def hami_discover_devices(self) -> list[DeviceInfo]:
        ctx = current()
        assert ctx is not None and ctx.node_name == NODE  # discovery runs in the node context, as the device plugin's
        return list(FOUND)

    def hami_watch_health(self, devices: Sequence[DeviceInfo], on_health: Callable[[str, bool], None]) -> Watch:
        WATCHES.append(Watch(on_health))
        return WATCHES[-1]


FOUND: list[DeviceInfo] = []
WATCHES: list[Watch] = []
BACKEND = AcmeBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"),
                      register_annotation="hami.io/node-acme-register")


def gpu(i: int, *, health: bool = True) -> DeviceInfo:
    return DeviceInfo(id=f"ACME-{i}", index=i, count=4, devmem=16384, devcore=100, type="ACME-X", health=health)


@pytest.fixture(autouse=True)
def _devices() -> Iterator[None]:
    FOUND[:] = [gpu(0), gpu(1)]
    WATCHES.clear()
    yield


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "uid": "node-uid-1"}}])


def make(cluster: Any, **kw: Any) -> DraDriver:
    return DraDriver(get_plugin_manager(load_entrypoints=False), [BACKEND], cluster, NODE, **kw)


def published(cluster: Any) -> list[dict[str, Any]]:
    return cluster.list_resource_slices(node=NODE, driver=DRIVER)


def names(item: dict[str, Any]) -> list[str]:
    return [d["name"] for d in item["spec"].get("devices") or []]


def test_publishes_the_discovered_devices(cluster: MemoryCluster) -> None:
    d = make(cluster)
    d.discover()
    plans = d.publish()
    assert plans["ACME"].generation == 1 and len(plans["ACME"].create) == 1
    (item,) = published(cluster)
    assert item["metadata"]["name"] == f"{NODE}-acme"
    assert item["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": NODE,
                                                    "uid": "node-uid-1", "controller": True}]
    assert item["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert names(item) == ["acme-0", "acme-1"]
    assert item["spec"]["devices"][0]["attributes"][f"{DRIVER}/uuid"] == {"string": "ACME-0"}


def test_no_change_writes_nothing(cluster: MemoryCluster) -> None:
    d = make(cluster)
    d.discover()
    d.publish()
    version = published(cluster)[0]["metadata"]["resourceVersion"]
    plans = d.publish()
    assert not plans["ACME"].changed and plans["ACME"].generation == 1
    assert published(cluster)[0]["metadata"]["resourceVersion"] == version


def test_a_health_change_withdraws_the_device_and_bumps_the_generation(cluster: MemoryCluster) -> None:
    d = make(cluster, resync_s=3600).start()
    try:
        wait_for(lambda: published(cluster))
        (watch,) = WATCHES
        watch.on_health("ACME-1", False)  # from the vendor's watch thread: the driver republishes at once
        wait_for(lambda: names(published(cluster)[0]) == ["acme-0"])
        item = published(cluster)[0]
        assert item["spec"]["pool"]["generation"] == 2
        assert d.device(DRIVER, "acme-1") is not None and not d.device(DRIVER, "acme-1").healthy
        watch.on_health("ACME-1", True)
        wait_for(lambda: names(published(cluster)[0]) == ["acme-0", "acme-1"])
        assert published(cluster)[0]["spec"]["pool"]["generation"] == 3
        watch.on_health("no-such-device", False)  # ignored with a warning
        assert set(d.devices()[DRIVER]) == {"acme-0", "acme-1"}
    finally:
        d.stop()
    assert WATCHES[0].stopped


def test_a_restart_republishes_without_losing_anything(cluster: MemoryCluster) -> None:
    first = make(cluster)
    first.start()
    wait_for(lambda: published(cluster))
    first.stop()
    before = published(cluster)
    assert before, "the slices stay when the driver stops"
    second = make(cluster)
    second.discover()
    assert not second.publish()["ACME"].changed  # same devices: nothing rewritten, the generation kept
    assert published(cluster) == before
    FOUND.append(gpu(2))  # a new card after the restart: the pool moves on from the published generation
    third = make(cluster)
    third.discover()
    assert third.publish()["ACME"].generation == 2
    assert names(published(cluster)[0]) == ["acme-0", "acme-1", "acme-2"]


def test_a_removed_device_is_unpublished(cluster: MemoryCluster) -> None:
    d = make(cluster)
    d.discover()
    d.publish()
    FOUND[:] = [gpu(1)]
    d.discover()
    assert d.publish()["ACME"].generation == 2
    assert names(published(cluster)[0]) == ["acme-1"]


def test_a_failed_pass_is_retried(cluster: MemoryCluster) -> None:
    calls: list[int] = []
    real = cluster.create_resource_slice

    def flaky(obj: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise HamiError("create resourceslice: HTTP 500: injected")
        return real(obj)

    cluster.create_resource_slice = flaky  # type: ignore[method-assign]
    d = make(cluster, error_interval_s=0.05).start()
    try:
        wait_for(lambda: published(cluster))
    finally:
        d.stop()
    assert len(calls) == 2


def test_withdraw_deletes_this_nodes_slices_only(cluster: MemoryCluster) -> None:
    d = make(cluster)
    d.discover()
    d.publish()
    other = dict(published(cluster)[0])
    other["metadata"] = {"name": "gpu-2-acme"}
    other["spec"] = {**other["spec"], "nodeName": "gpu-2"}
    cluster.create_resource_slice(other)
    assert withdraw(cluster, NODE, [BACKEND]) == [f"{NODE}-acme"]
    assert not published(cluster) and cluster.list_resource_slices(node="gpu-2")


def test_registration_fallback_for_vendors_without_discovery(cluster: MemoryCluster) -> None:
    plain = StandardBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"),
                            register_annotation="hami.io/node-acme-register")
    cluster.patch_node(NODE, {"metadata": {"annotations": {"hami.io/node-acme-register": registration(2)}}})
    silent = DraDriver(get_plugin_manager(load_entrypoints=False), [plain], cluster, NODE)
    silent.discover()
    silent.publish()
    assert names(published(cluster)[0]) == []  # nothing discovered, no fallback asked for
    d = DraDriver(get_plugin_manager(load_entrypoints=False), [plain], cluster, NODE, registration=True)
    d.discover()
    d.publish()
    assert names(published(cluster)[0]) == ["acme-0", "acme-1"]


def test_a_driver_needs_a_node_name(cluster: MemoryCluster) -> None:
    with pytest.raises(HamiError, match="node-name"):
        DraDriver(get_plugin_manager(load_entrypoints=False), [BACKEND], cluster, "")


# ------------------------------------------------------------------------------------------ dry run

def registration(n: int, *, unhealthy: int | None = None) -> str:
    return json.dumps([{"id": f"GPU-{i}", "index": i, "count": 10, "devmem": 40960, "devcore": 100,
                        "type": "NVIDIA-A100", "numa": 0, "mode": "hami-core", "health": i != unhealthy}
                       for i in range(n)])


def node_file(tmp_path: Path, annotations: dict[str, str], name: str = NODE) -> Path:
    path = tmp_path / "node.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": name, "annotations": annotations}}))
    return path


def test_dry_run_prints_the_slices_as_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = node_file(tmp_path, {keys.NODE_NVIDIA_REGISTER: registration(3, unhealthy=1)})
    assert main(["dra-driver", "--dry-run", "--node", str(path)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    (item,) = docs
    assert item["kind"] == "ResourceSlice" and item["spec"]["driver"] == "hami-core-gpu.project-hami.io"
    assert item["spec"]["nodeName"] == NODE and item["spec"]["pool"]["generation"] == 1
    assert names(item) == ["gpu-0", "gpu-2"]  # the unhealthy one withdrawn
    assert item["spec"]["devices"][0]["capacity"]["memory"]["value"] == "40960Mi"


def test_dry_run_of_a_node_without_registration_prints_nothing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dra-driver", "--dry-run", "--node", str(node_file(tmp_path, {}))]) == 0
    assert capsys.readouterr().out.strip() == ""


@pytest.mark.parametrize(("content", "message"), [
    ("kind: Node\nmetadata: {}\n", "metadata.name"),
    ("kind: Pod\nmetadata: {name: p}\n", "node file"),
    ("- [unclosed\n", "node file"),
    (f"kind: Node\nmetadata:\n  name: {NODE}\n  annotations:\n    {keys.NODE_NVIDIA_REGISTER}: '{{broken'\n",
     keys.NODE_NVIDIA_REGISTER),
])
def test_dry_run_bad_input_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                            message: str) -> None:
    path = tmp_path / "node.yaml"
    path.write_text(content)
    assert main(["dra-driver", "--dry-run", "--node", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hami: error: ") and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dra-driver", "--dry-run"]) == 2
    assert "--node NODE.yaml" in capsys.readouterr().err
    assert main(["dra-driver", "--node", "x.yaml"]) == 2
    assert "--dry-run" in capsys.readouterr().err
    path = node_file(tmp_path, {})
    assert main(["dra-driver", "--dry-run", "--node", str(path), "--vendor", "nosuch"]) == 2
    assert "--vendor nosuch" in capsys.readouterr().err


def test_help_names_the_modes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dra-driver", "--help"]) == 0
    out = capsys.readouterr().out
    for flag in ("--dry-run", "--node NODE.yaml", "--withdraw", "--resync", "--from-registration"):
        assert flag in out


def test_node_slices_names_the_node_on_a_bad_registration() -> None:
    node = {"kind": "Node", "metadata": {"name": NODE, "annotations": {"hami.io/node-acme-register": "[{"}}}
    with pytest.raises(HamiError, match=f"node {NODE}: backend ACME: .*hami.io/node-acme-register"):
        node_slices(get_plugin_manager(load_entrypoints=False), [BACKEND], node)


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)




# ------------------------------------------------------------------------------------------ over the official client

@pytest.fixture
def kube() -> Iterator[tuple[Any, Any]]:
    from kubeapi.fake_apiserver import FakeApiServer
    from kubernetes import client

    from hami_core.cluster.kube import KubeCluster

    with FakeApiServer() as server:
        api = client.ApiClient(client.Configuration(host=server.url))
        cluster = KubeCluster(api_client=api, qps=0, request_timeout_s=5)
        server.create("nodes", "", {"metadata": {"name": NODE}})
        try:
            yield server, cluster
        finally:
            cluster.close()
            api.close()


def test_publishing_through_the_api_server(kube: tuple[Any, Any]) -> None:
    server, cluster = kube
    FOUND[:] = [DeviceInfo(id="ACME-0", index=0, count=4, devmem=81920, devcore=100, type="ACME-X", health=True)]
    d = make(cluster)
    d.discover()
    assert d.publish()["ACME"].generation == 1
    (item,) = published(cluster)
    assert item["kind"] == "ResourceSlice" and item["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert item["spec"]["devices"][0]["capacity"]["memory"]["value"] == "80Gi"  # the server's canonical form
    assert ("GET", "/apis/resource.k8s.io/v1/resourceslices") in [(m, p) for m, p, _ in server.requests]
    writes = len([r for r in server.requests if r[0] in ("POST", "PUT", "DELETE")])
    assert not d.publish()["ACME"].changed  # 80Gi is 81920Mi: nothing to write
    assert len([r for r in server.requests if r[0] in ("POST", "PUT", "DELETE")]) == writes
    d.on_health("ACME", "ACME-0", False)
    assert d.publish()["ACME"].generation == 2
    (item,) = published(cluster)
    assert item["spec"]["pool"]["generation"] == 2 and "devices" not in item["spec"]
    assert withdraw(cluster, NODE, [BACKEND]) == [f"{NODE}-acme"] and not published(cluster)


def test_device_classes_through_the_api_server(kube: tuple[Any, Any]) -> None:
    from hami_core.dra.deviceclass import device_class

    _, cluster = kube
    created = cluster.create_device_class(device_class("ACME"))
    assert created["metadata"]["name"] == "hami-core-acme.project-hami.io"
    created["spec"]["selectors"].append({"cel": {"expression": "true"}})
    cluster.update_device_class(created)
    (listed,) = cluster.list_device_classes()
    assert len(listed["spec"]["selectors"]) == 2 and listed["kind"] == "DeviceClass"
    cluster.delete_device_class(listed["metadata"]["name"])
    assert cluster.list_device_classes() == []


def test_memory_cluster_slices_and_classes(cluster: MemoryCluster) -> None:
    from hami_core.cluster.base import ConflictError, NotFoundError
    from hami_core.dra.deviceclass import device_class
    from hami_core.dra.slices import build_slices
    from hami_core.plugins.standard import standard_dra_devices

    (item,) = build_slices(NODE, "ACME", standard_dra_devices(BACKEND, [gpu(0)]))
    stored = cluster.create_resource_slice(item)
    with pytest.raises(ConflictError):
        cluster.create_resource_slice(item)
    stale = dict(stored, metadata={**stored["metadata"]})
    cluster.update_resource_slice(stored)  # unchanged spec: metadata.generation stays
    assert published(cluster)[0]["metadata"]["generation"] == 1
    with pytest.raises(ConflictError):
        cluster.update_resource_slice(stale)  # its resourceVersion is behind now
    assert cluster.list_resource_slices(node="other") == [] and cluster.list_resource_slices(driver="x") == []
    cluster.delete_resource_slice(item["metadata"]["name"])
    with pytest.raises(NotFoundError):
        cluster.delete_resource_slice(item["metadata"]["name"])
    cls = cluster.create_device_class(device_class("ACME"))
    cls["spec"]["selectors"] = []
    assert cluster.update_device_class(cls)["metadata"]["generation"] == 2
    assert [c["metadata"]["name"] for c in cluster.list_device_classes()] == ["hami-core-acme.project-hami.io"]
    cluster.delete_device_class("hami-core-acme.project-hami.io")
    assert cluster.list_device_classes() == []
