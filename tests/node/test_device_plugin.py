"""The generic device-plugin server against a fake kubelet (real gRPC on unix sockets) and MemoryCluster."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from hami_core import hookimpl
from hami_core.cluster.memory import MemoryCluster
from hami_core.node.allocate import physical_device_id
from hami_core.node.app import DevicePluginApp
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import ContainerAllocation, DeviceBackend, DeviceInfo, Mount, ResourceNames
from hami_core.testing.fake_kubelet import FakeKubelet, running_kubelet
from hami_core.wire import keys
from hami_core.wire.nodes import decode_node_devices_json

NODE = "node1"
GPU_A = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
GPU_B = "GPU-1a1b1c1d-0000-1111-2222-333344445555"
LOCK = "2025-01-01T00:00:00Z,default,p1"

BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"),
                        register_annotation="hami.io/node-acme-register",
                        to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE, lock_annotation=keys.NODE_LOCK)


class AcmeVendor:
    """A vendor plugin that answers the node-side hooks only."""

    @hookimpl
    def hami_discover_devices(self, backend):
        return [DeviceInfo(id=GPU_B, index=1, count=2, devmem=8000, devcore=100, type="ACME-X", health=True),
                DeviceInfo(id=GPU_A, index=0, count=2, devmem=8000, devcore=100, type="ACME-X", health=True)]

    @hookimpl
    def hami_allocate(self, backend, pod, container_index, devices):
        return ContainerAllocation(
            env={"ACME_VISIBLE": ",".join(d.uuid for d in devices), "ACME_MEM": str(devices[0].usedmem),
                 "ACME_CTR": str(container_index)},
            mounts=(Mount("/acme", "/host/acme", True),))


def pod(name: str = "p1", to_allocate: str = f"{GPU_A},ACME,3000,30:;", containers: int = 1) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": {
        keys.VGPU_DEVICES_TO_ALLOCATE: to_allocate, keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        keys.BIND_TIME: "1700000000", keys.VGPU_NODE: NODE}},
        "spec": {"nodeName": NODE, "containers": [{"name": f"c{i}"} for i in range(containers)]},
        "status": {"phase": "Pending"}}


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    with running_kubelet("hdp") as k:
        yield k


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "annotations": {keys.NODE_LOCK: LOCK}}}],
                         pods=[pod()])


@pytest.fixture
def app(kubelet: FakeKubelet, cluster: MemoryCluster) -> Iterator[DevicePluginApp]:
    pm = get_plugin_manager(load_entrypoints=False, plugins=[AcmeVendor()])
    a = DevicePluginApp(pm, BACKEND, cluster, NODE, plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05)
    a.start()
    yield a
    a.stop()


def test_registers_with_kubelet(app: DevicePluginApp, kubelet: FakeKubelet) -> None:
    reg = kubelet.next_registration()
    assert (reg.version, reg.endpoint, reg.resource_name) == ("v1beta1", "acme-gpu.sock", "acme.com/gpu")
    with kubelet.connect(reg.endpoint) as client:
        opts = client.options()
        assert opts.get_preferred_allocation_available and not opts.pre_start_required
        assert client.pre_start(["x"]) is not None


def test_registration_annotation_sorted_and_cached(app: DevicePluginApp, cluster: MemoryCluster) -> None:
    deadline = time.monotonic() + 5
    while keys.NODE_LOCK and "hami.io/node-acme-register" not in cluster.get_node(NODE)["metadata"]["annotations"]:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    value = cluster.get_node(NODE)["metadata"]["annotations"]["hami.io/node-acme-register"]
    assert [d.id for d in decode_node_devices_json(value)] == [GPU_A, GPU_B]
    assert app.writer.write(app.server.devices()) is False  # unchanged: no second patch


def test_registration_writer_remembers_only_successful_patches() -> None:
    from hami_core.node.register import RegistrationWriter

    class Flaky(MemoryCluster):
        fail = True

        def patch_node(self, name, patch):
            if self.fail:
                raise RuntimeError("API down")
            return super().patch_node(name, patch)

    c = Flaky(nodes=[{"metadata": {"name": NODE}}])
    w = RegistrationWriter(c, NODE, "k")
    devs = [DeviceInfo(id=GPU_A, count=1, devmem=1, devcore=100, type="T", health=True)]
    with pytest.raises(RuntimeError):
        w.write(devs)
    assert w.last_written is None
    c.fail = False
    assert w.write(devs) is True and w.write(devs) is False


def test_list_and_watch_split_devices_and_health_change(app: DevicePluginApp, kubelet: FakeKubelet) -> None:
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        stream = client.list_and_watch()
        first = next(stream)
        assert sorted(d.ID for d in first.devices) == sorted(
            [f"{GPU_A}-0", f"{GPU_A}-1", f"{GPU_B}-0", f"{GPU_B}-1"])
        assert {d.health for d in first.devices} == {"Healthy"}
        assert not first.devices[0].HasField("topology")
        app.server.set_health(GPU_B, False)
        second = next(stream)
        health = {d.ID: d.health for d in second.devices}
        assert health[f"{GPU_B}-0"] == health[f"{GPU_B}-1"] == "Unhealthy"
        assert health[f"{GPU_A}-0"] == "Healthy"
        stream.cancel()
    assert [d.health for d in app.server.devices() if d.id == GPU_B] == [False]


def test_allocate_consumes_annotation_marks_success_releases_lock(app, kubelet, cluster) -> None:
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        resp = client.allocate([f"{GPU_A}-1"])
    (ctr,) = resp.container_responses
    assert dict(ctr.envs) == {"ACME_VISIBLE": GPU_A, "ACME_MEM": "3000", "ACME_CTR": "0"}
    assert [(m.container_path, m.host_path, m.read_only) for m in ctr.mounts] == [("/acme", "/host/acme", True)]
    annos = cluster.get_pod("default", "p1")["metadata"]["annotations"]
    assert annos[keys.VGPU_DEVICES_TO_ALLOCATE] == ";;"
    assert annos[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert keys.NODE_LOCK not in cluster.get_node(NODE)["metadata"]["annotations"]


def test_two_containers_two_calls(app, kubelet, cluster) -> None:
    cluster.delete_pod("default", "p1")  # one pod waits for Allocate at a time
    cluster.add_pod(pod("p2", f"{GPU_A},ACME,1000,10:;{GPU_A},ACME,2000,0:{GPU_B},ACME,2000,0:;", containers=2))
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: "2025-01-01T00:00:00Z,default,p2"}}})
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        first = client.allocate([f"{GPU_A}-0"]).container_responses[0]
        assert dict(first.envs)["ACME_MEM"] == "1000"
        assert cluster.get_pod("default", "p2")["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
        second = client.allocate([f"{GPU_A}-1", f"{GPU_B}-0"]).container_responses[0]
    assert dict(second.envs) == {"ACME_VISIBLE": f"{GPU_A},{GPU_B}", "ACME_MEM": "2000", "ACME_CTR": "1"}
    assert cluster.get_pod("default", "p2")["metadata"]["annotations"][keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in cluster.get_node(NODE)["metadata"]["annotations"]


@pytest.mark.parametrize(("ids", "what"), [
    ([f"{GPU_A}-0", f"{GPU_B}-0"], "device number not matched"),
    ([f"{GPU_B}-1"], "devices not matched")])
def test_kubelet_ids_for_other_devices_are_refused_and_nothing_written(app, kubelet, cluster, ids, what) -> None:
    """kubelet's IDs name other devices than the pod's booking (HAMi serves the booking and ignores them; HAMi
    also fails the pod on a count mismatch): the pod kubelet admits may not be p1, so p1 keeps its booking, its
    bind phase and its lock for its own Allocate."""
    before = cluster.get_pod("default", "p1")
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client, pytest.raises(grpc.RpcError) as err:
        client.allocate(ids)
    assert err.value.details().startswith(f"pod default/p1: {what}: kubelet's IDs {', '.join(ids)} are devices ")
    assert f"booked on {GPU_A}; " in err.value.details() and "nothing was written" in err.value.details()
    after = cluster.get_pod("default", "p1")
    assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
    assert cluster.get_node(NODE)["metadata"]["annotations"][keys.NODE_LOCK] == LOCK
    with kubelet.connect(reg.endpoint) as client:  # p1's own Allocate still gets its devices
        assert dict(client.allocate([f"{GPU_A}-1"]).container_responses[0].envs)["ACME_VISIBLE"] == GPU_A


def test_malformed_annotation_fails_clearly(app, kubelet, cluster) -> None:
    cluster.patch_pod("default", "p1", {"metadata": {"annotations": {keys.VGPU_DEVICES_TO_ALLOCATE: "GPU-x,ACME:;"}}})
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client, pytest.raises(grpc.RpcError) as err:
        client.allocate([f"{GPU_A}-0"])
    assert keys.VGPU_DEVICES_TO_ALLOCATE in err.value.details()
    assert "default/p1" in err.value.details()
    assert cluster.get_pod("default", "p1")["metadata"]["annotations"][keys.BIND_PHASE] == "failed"
    assert keys.NODE_LOCK not in cluster.get_node(NODE)["metadata"]["annotations"]


def test_finish_leaves_another_pods_lock_alone(cluster) -> None:
    from hami_core.node.allocate import Allocator

    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: "2025-01-01T00:00:00Z,default,p9"}}})
    Allocator(cluster, NODE, BACKEND, lambda *a: None)._finish(cluster.get_pod("default", "p1"), "failed")
    assert cluster.get_pod("default", "p1")["metadata"]["annotations"][keys.BIND_PHASE] == "failed"
    assert cluster.get_node(NODE)["metadata"]["annotations"][keys.NODE_LOCK].endswith(",p9")


def test_no_pending_pod(app, kubelet, cluster) -> None:
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    cluster.patch_pod("default", "p1", {"metadata": {"annotations": {keys.BIND_PHASE: "failed"}}})
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client, pytest.raises(grpc.RpcError) as err:
        client.allocate([f"{GPU_A}-0"])
    assert err.value.details() == f"no binding pod found on node {NODE}"


def test_pending_pod_found_without_lock(app, kubelet, cluster) -> None:
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        assert dict(client.allocate([f"{GPU_A}-0"]).container_responses[0].envs)["ACME_VISIBLE"] == GPU_A
    assert cluster.get_pod("default", "p1")["metadata"]["annotations"][keys.BIND_PHASE] == "success"


def test_kubelet_restart_reregisters(app: DevicePluginApp, kubelet: FakeKubelet) -> None:
    kubelet.next_registration()
    kubelet.restart()
    reg = kubelet.next_registration(timeout=5)
    assert reg.endpoint == "acme-gpu.sock"
    with kubelet.connect(reg.endpoint) as client:
        assert len(next(client.list_and_watch()).devices) == 4


def test_preferred_allocation(app, kubelet, cluster) -> None:
    cluster.patch_pod("default", "p1", {"metadata": {"annotations": {
        keys.VGPU_DEVICES_TO_ALLOCATE: f"{GPU_B},ACME,1,0:{GPU_A},ACME,1,0:;"}}})
    reg = kubelet.next_registration()
    available = [f"{GPU_A}-0", f"{GPU_A}-1", f"{GPU_B}-0", f"{GPU_B}-1"]
    with kubelet.connect(reg.endpoint) as client:
        assert list(client.preferred(available, [], 2).container_responses[0].deviceIDs) == [
            f"{GPU_B}-0", f"{GPU_A}-0"]
        assert list(client.preferred(available, [f"{GPU_A}-1"], 2).container_responses[0].deviceIDs) == [
            f"{GPU_A}-1", f"{GPU_B}-0"]
        assert len(client.preferred(available, [], 3).container_responses) == 0  # count mismatch: left out


def test_physical_device_id() -> None:
    assert physical_device_id(f"{GPU_A}-7") == GPU_A
    assert physical_device_id(f"{GPU_A}::3") == GPU_A
    assert physical_device_id(GPU_A) == GPU_A
    assert physical_device_id("MIG-abc-1") == "MIG-abc-1"


def test_one_allocate_costs_two_reads_and_two_writes(cluster) -> None:
    """Allocate reads the node (its lock) and lists the node's pods (the lock's owner among them, and whoever else
    might be waiting), then writes the pod once (slot popped and, for its last container, bind-phase success) and
    the node once (the lock released by compare-and-swap on the node it read); it made seven calls before the real
    control plane's benchmark counted them."""
    from hami_core.node.allocate import Allocator

    calls: list[str] = []

    class Counting(MemoryCluster):
        def get_node(self, name):
            calls.append("get node")
            return super().get_node(name)

        def get_pod(self, namespace, name):
            calls.append("get pod")
            return super().get_pod(namespace, name)

        def patch_pod(self, namespace, name, patch):
            calls.append("patch pod")
            return super().patch_pod(namespace, name, patch)

        def patch_node(self, name, patch):
            calls.append("patch node")
            return super().patch_node(name, patch)

        def list_pods(self):
            calls.append("list pods")
            return super().list_pods()

        def pods_on_node(self, node):
            calls.append("list pods on node")
            return super().pods_on_node(node)

    counting = Counting(nodes=[cluster.get_node(NODE)], pods=[cluster.get_pod("default", "p1")])
    vendor = AcmeVendor()
    allocator = Allocator(counting, NODE, BACKEND,
                          lambda pod, i, devices: vendor.hami_allocate(BACKEND, pod, i, devices))
    [result] = allocator.allocate([[f"{GPU_A}-0"]])
    assert result.env["ACME_VISIBLE"] == GPU_A
    assert calls == ["get node", "list pods on node", "patch pod", "patch node"]
    stored = counting.get_pod("default", "p1")["metadata"]["annotations"]
    assert stored[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert keys.NODE_LOCK not in counting.get_node(NODE)["metadata"]["annotations"]


def test_pending_pod_fallback_lists_this_nodes_pods_only(cluster) -> None:
    from hami_core.node.allocate import find_pending_pod

    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    listed: list[str] = []
    cluster.list_pods = lambda: listed.append("all") or []  # type: ignore[method-assign]
    original = cluster.pods_on_node
    cluster.pods_on_node = lambda node: listed.append(node) or original(node)  # type: ignore[method-assign]
    assert find_pending_pod(cluster, NODE)["metadata"]["name"] == "p1"
    assert listed == [NODE]
