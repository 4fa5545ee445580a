"""Which pod an Allocate serves, over real gRPC (the device plugin behind a fake kubelet, on MemoryCluster).

kubelet's AllocateRequest carries device IDs and nothing else. The plugin serves a pod only when it is the one
pod on the node that can be waiting for this Allocate, and only when kubelet's IDs are replicas of that pod's
booked devices; every refusal writes nothing, so the pod kubelet was not admitting keeps its booking.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from hami_core import hookimpl
from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import ContainerAllocation, DeviceBackend, DeviceInfo, ResourceNames
from hami_core.testing.fake_kubelet import FakeKubelet, PluginClient, running_kubelet
from hami_core.wire import keys

NODE = "node1"
GPU_A = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
GPU_B = "GPU-1a1b1c1d-0000-1111-2222-333344445555"
RESOURCE = "acme.com/gpu"
BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames(RESOURCE),
                        register_annotation="hami.io/node-acme-register",
                        to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE, lock_annotation=keys.NODE_LOCK)


def _lock(name: str) -> str:
    return f"2025-01-01T00:00:00Z,default,{name}"


class AcmeVendor:
    def __init__(self) -> None:
        self.handed: list[tuple[str, tuple[str, ...]]] = []

    @hookimpl
    def hami_discover_devices(self, backend):
        return [DeviceInfo(id=GPU_A, index=0, count=2, devmem=8000, devcore=100, type="ACME-X", health=True),
                DeviceInfo(id=GPU_B, index=1, count=2, devmem=8000, devcore=100, type="ACME-X", health=True)]

    @hookimpl
    def hami_allocate(self, backend, pod, container_index, devices):
        self.handed.append((pod["metadata"]["name"], tuple(f"{d.uuid}={d.usedmem}" for d in devices)))
        return ContainerAllocation(env={"ACME": ",".join(f"{d.uuid}={d.usedmem}" for d in devices)})


def pod(name: str, to_allocate: str, *, phase: str = keys.BIND_PHASE_ALLOCATING, status: str = "Pending",
        annotation: str = keys.VGPU_DEVICES_TO_ALLOCATE) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": {
        annotation: to_allocate, keys.BIND_PHASE: phase, keys.BIND_TIME: "1700000000", keys.VGPU_NODE: NODE}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c0", "resources": {"limits": {RESOURCE: "1"}}}]},
        "status": {"phase": status}}


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    with running_kubelet("hai") as k:
        yield k


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "annotations": {
        keys.NODE_LOCK: _lock("p1")}}}], pods=[pod("p1", f"{GPU_A},ACME,3000,30:;")])


@pytest.fixture
def vendor() -> AcmeVendor:
    return AcmeVendor()


@pytest.fixture
def client(kubelet: FakeKubelet, cluster: MemoryCluster, vendor: AcmeVendor) -> Iterator[PluginClient]:
    app = DevicePluginApp(get_plugin_manager(load_entrypoints=False, plugins=[vendor]), BACKEND, cluster, NODE,
                          plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05, register_interval_s=3600)
    app.start()
    try:
        with kubelet.connect(kubelet.next_registration().endpoint) as c:
            yield c
    finally:
        app.stop()


def _state(cluster: MemoryCluster) -> tuple[Any, ...]:
    """What an Allocate may write: every pod's annotations and the node lock."""
    return (tuple(sorted((k, tuple(sorted((p["metadata"].get("annotations") or {}).items())))
                         for k, p in cluster.pods.items())),
            (cluster.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK))


def _refused(client: PluginClient, ids: list[str], *more: list[str]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        client.allocate(ids, *more)
    return err.value


# --------------------------------------------------------------------------------- kubelet's device IDs
@pytest.mark.parametrize(("request_ids", "message"), [
    ([["GPU-ffffffff-0000-1111-2222-333344445555-0"]],
     "unknown device ID 'GPU-ffffffff-0000-1111-2222-333344445555-0' in container request 0: not one of the 4 "
     "IDs this plugin advertises for acme.com/gpu"),
    ([[f"{GPU_A}-0"], [f"{GPU_A}-7"]],  # a replica index past deviceSplitCount
     f"unknown device ID '{GPU_A}-7' in container request 1: not one of the 4 IDs this plugin advertises for "
     "acme.com/gpu"),
    ([[GPU_A]], f"unknown device ID '{GPU_A}' in container request 0: not one of the 4 IDs this plugin "
                "advertises for acme.com/gpu"),
    ([[f"{GPU_A}-0", f"{GPU_A}-0"]], f"device ID '{GPU_A}-0' is listed twice in container request 0"),
    ([[]], "container request 0 names no device ID"),
    ([], "Allocate without any container request"),
])
def test_ids_the_plugin_never_advertised_are_refused_before_anything_is_read(
        client: PluginClient, cluster: MemoryCluster, vendor: AcmeVendor, request_ids: list[list[str]],
        message: str) -> None:
    before = _state(cluster)
    err = _refused(client, *request_ids) if request_ids else _refused_empty(client)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == message
    assert _state(cluster) == before and vendor.handed == []


def _refused_empty(client: PluginClient) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        client.allocate()
    return err.value


def test_ids_of_other_devices_than_the_booking_are_refused_and_nothing_written(
        client: PluginClient, cluster: MemoryCluster, vendor: AcmeVendor) -> None:
    before = _state(cluster)
    err = _refused(client, [f"{GPU_B}-0"])
    assert err.details().startswith(f"pod default/p1: devices not matched: kubelet's IDs {GPU_B}-0 are devices "
                                    f"{GPU_B}, but the pod's next container is booked on {GPU_A}")
    assert _state(cluster) == before and vendor.handed == []
    assert dict(client.allocate([f"{GPU_A}-1"]).container_responses[0].envs) == {"ACME": f"{GPU_A}=3000"}


# ------------------------------------------------------------------------------------- which pod
def test_two_pods_waiting_on_one_node_are_both_refused_never_swapped(
        client: PluginClient, cluster: MemoryCluster, vendor: AcmeVendor) -> None:
    """The swap: p1 waited past its lock's expiry and an old scheduler bound p2 under a lock of its own. kubelet
    admits p1 first; the plugin used to serve the lock's pod (p2's card and memory to p1's container, then p1's to
    p2's). Now both wait and the request names neither: refused, nothing written; kubelet fails p1, and p2's own
    Allocate gets p2's booking."""
    cluster.add_pod(pod("p2", f"{GPU_B},ACME,5000,50:;"))
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: _lock("p2")}}})
    before = _state(cluster)
    for ids in ([f"{GPU_A}-0"], [f"{GPU_B}-0"]):  # whatever kubelet picked
        err = _refused(client, ids)
        assert err.details() == ("pod default/p1 on node node1 waits for acme.com/gpu beside default/p2; "
                                 "kubelet's request names no pod, so it is refused rather than served to the "
                                 "wrong one")
    assert _state(cluster) == before and vendor.handed == []
    cluster.add_pod({**cluster.get_pod("default", "p1"), "status": {"phase": "Failed"}})  # kubelet fails p1
    assert dict(client.allocate([f"{GPU_B}-1"]).container_responses[0].envs) == {"ACME": f"{GPU_B}=5000"}
    assert vendor.handed == [("p2", (f"{GPU_B}=5000",))]


def test_without_a_lock_two_waiting_pods_are_refused(client: PluginClient, cluster: MemoryCluster) -> None:
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    cluster.add_pod(pod("p2", f"{GPU_A},ACME,5000,50:;"))
    err = _refused(client, [f"{GPU_A}-0"])
    assert err.details().startswith("pods default/p1, default/p2 all wait for their Allocate on node node1; ")


def test_a_pod_already_allocated_is_never_taken_nor_flipped_to_failed(
        client: PluginClient, cluster: MemoryCluster, vendor: AcmeVendor) -> None:
    """HAMi's GetPendingPod takes ``allocating`` pods only; the fallback took a ``success`` pod (allocated, still
    Pending while its images are pulled), found no devices left, and marked it ``failed``."""
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    cluster.add_pod(pod("p1", ";;", phase=keys.BIND_PHASE_SUCCESS))
    before = _state(cluster)
    assert _refused(client, [f"{GPU_A}-0"]).details() == f"no binding pod found on node {NODE}"
    assert _state(cluster) == before
    assert cluster.get_pod("default", "p1")["metadata"]["annotations"][keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS


def test_the_lock_names_the_pod_served_and_others_already_allocated_do_not_count(
        client: PluginClient, cluster: MemoryCluster, vendor: AcmeVendor) -> None:
    cluster.add_pod(pod("p0", ";;", phase=keys.BIND_PHASE_SUCCESS))  # allocated before p1, images pulling
    cluster.add_pod({**pod("old", f"{GPU_B},ACME,1,0:;"), "status": {"phase": "Running"}})  # admitted long ago
    assert dict(client.allocate([f"{GPU_A}-0"]).container_responses[0].envs) == {"ACME": f"{GPU_A}=3000"}
    assert vendor.handed == [("p1", (f"{GPU_A}=3000",))]


def test_a_dangling_lock_of_a_failed_pod_does_not_hand_out_its_booking(
        client: PluginClient, cluster: MemoryCluster, vendor: AcmeVendor) -> None:
    """HAMi #3047 on the node side: the lock names a pod kubelet refused (Failed, its booking unconsumed); the
    plugin served the lock's pod as is, so the next pod kubelet admitted got the failed pod's devices."""
    cluster.add_pod({**pod("gone", f"{GPU_B},ACME,7000,70:;"), "status": {"phase": "Failed"}})
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: _lock("gone")}}})
    assert dict(client.allocate([f"{GPU_A}-0"]).container_responses[0].envs) == {"ACME": f"{GPU_A}=3000"}
    assert vendor.handed == [("p1", (f"{GPU_A}=3000",))]
    gone = cluster.get_pod("default", "gone")["metadata"]["annotations"]
    assert gone[keys.VGPU_DEVICES_TO_ALLOCATE] == f"{GPU_B},ACME,7000,70:;"  # untouched
    assert cluster.get_node(NODE)["metadata"]["annotations"][keys.NODE_LOCK] == _lock("gone")  # not p1's


def test_a_pod_bound_around_the_scheduler_blocks_allocate_instead_of_taking_a_booking(
        client: PluginClient, cluster: MemoryCluster, vendor: AcmeVendor) -> None:
    """A pod created with ``spec.nodeName`` (no scheduler, no webhook) asking for the resource is admitted by
    kubelet like any other; while it is Pending it could be the pod an Allocate is for, so none is served."""
    intruder = {"kind": "Pod", "metadata": {"name": "intruder", "namespace": "default"},
                "spec": {"nodeName": NODE, "containers": [{"name": "c", "resources": {"limits": {RESOURCE: "1"}}}]},
                "status": {"phase": "Pending"}}
    cluster.add_pod(intruder)
    before = _state(cluster)
    err = _refused(client, [f"{GPU_A}-0"])
    assert err.details() == ("pod default/intruder on node node1 waits for acme.com/gpu beside default/p1; "
                             "kubelet's request names no pod, so it is refused rather than served to the wrong one")
    assert _state(cluster) == before and vendor.handed == []
    cluster.add_pod({**intruder, "status": {"phase": "Failed"}})  # kubelet failed it: p1 is served
    assert dict(client.allocate([f"{GPU_A}-0"]).container_responses[0].envs) == {"ACME": f"{GPU_A}=3000"}
    # a pod asking for another resource, or not Pending, does not block
    cluster.add_pod(pod("p3", f"{GPU_A},ACME,1,0:;"))
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: _lock("p3")}}})
    other = {**intruder, "metadata": {"name": "cpu", "namespace": "default"}, "spec": {
        "nodeName": NODE, "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}
    cluster.add_pod(other)
    assert dict(client.allocate([f"{GPU_A}-1"]).container_responses[0].envs) == {"ACME": f"{GPU_A}=1"}


def test_another_backends_lock_holder_is_not_this_backends_pod(kubelet: FakeKubelet, vendor: AcmeVendor) -> None:
    """A backend with its own annotations serves only pods booked in them: the plugin took the pod the shared
    lock named, found no annotation of its own, and marked that (other vendor's) pod ``failed``."""
    other = DeviceBackend(name="OTHER", vendor="other", resource_names=ResourceNames("other.com/xpu"),
                          to_allocate_annotation="hami.io/other-devices-to-allocate")  # no node lock (Mthreads)
    cluster = MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "annotations": {
        keys.NODE_LOCK: _lock("p1")}}}], pods=[pod("p1", f"{GPU_A},ACME,3000,30:;")])
    app = DevicePluginApp(get_plugin_manager(load_entrypoints=False, plugins=[vendor]), other, cluster, NODE,
                          plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05, register_interval_s=3600)
    app.start()
    try:
        with kubelet.connect(kubelet.next_registration().endpoint) as c:
            before = _state(cluster)
            assert _refused(c, [f"{GPU_A}-0"]).details() == f"no binding pod found on node {NODE}"
            assert _state(cluster) == before
            cluster.add_pod(pod("x1", f"{GPU_B},OTHER,100,0:;", annotation="hami.io/other-devices-to-allocate"))
            assert dict(c.allocate([f"{GPU_B}-0"]).container_responses[0].envs) == {"ACME": f"{GPU_B}=100"}
    finally:
        app.stop()
    assert cluster.get_pod("default", "p1")["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"


def test_preferred_allocation_answers_only_for_the_one_waiting_pod(
        client: PluginClient, cluster: MemoryCluster) -> None:
    available = [f"{GPU_A}-0", f"{GPU_A}-1", f"{GPU_B}-0", f"{GPU_B}-1"]
    assert list(client.preferred(available, [], 1).container_responses[0].deviceIDs) == [f"{GPU_A}-0"]
    cluster.add_pod(pod("p2", f"{GPU_B},ACME,5000,50:;"))  # two wait: no answer, kubelet picks
    assert len(client.preferred(available, [], 1).container_responses) == 0


def test_prefer_kubelet_ids_orders_the_booked_devices_as_kubelet_does(cluster: MemoryCluster) -> None:
    """HAMi's ``enablegetpreferredallocation`` alignment replaced each booked UUID by kubelet's, which could give a
    container a device the ledger did not book; here the IDs must be the booking, and only the order follows
    kubelet (each device keeps its own memory)."""
    from hami_core.node.allocate import Allocator

    cluster.add_pod(pod("p1", f"{GPU_A},ACME,1000,0:{GPU_B},ACME,2000,0:;"))
    vendor = AcmeVendor()
    allocator = Allocator(cluster, NODE, BACKEND, lambda p, i, d: vendor.hami_allocate(BACKEND, p, i, d),
                          prefer_kubelet_ids=True)
    [result] = allocator.allocate([[f"{GPU_B}-1", f"{GPU_A}-0"]])
    assert result.env == {"ACME": f"{GPU_B}=2000,{GPU_A}=1000"}
