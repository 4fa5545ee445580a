"""Device-plugin faults, end to end: the real gRPC plugin behind a fake kubelet, talking through the official
``kubernetes`` client (KubeCluster) to the in-test API stand-in (tests/kubeapi/fake_apiserver.py).

* API errors on the plugin's own writes (409, 500, a lost response) are retried; persistent ones fail the pod
  with a clear error and still release the node lock, or leave it to expire.
* The plugin dies mid-Allocate (before, between and after its writes) and a new one takes over: the pod's
  devices are handed out at most once, the retried Allocate gets them or a clear error, the lock is released
  (or broken/expired when nothing retries).
* kubelet restarts, or is not up when the plugin starts: the plugin (re-)registers and serves Allocate.

Each test ends with the pod either allocated exactly its devices or failed with a clear error, and the node
lock released.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from kubeapi.fake_apiserver import FakeApiServer

from hami_core import hookimpl
from hami_core.cluster.base import ConflictError
from hami_core.cluster.kube import KubeCluster
from hami_core.node.app import DevicePluginApp
from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import ContainerAllocation, DeviceBackend, DeviceInfo, LockSpec, ResourceNames
from hami_core.scheduler.nodelock import NodeLocker
from hami_core.testing.fake_kubelet import FakeKubelet, running_kubelet
from hami_core.wire import keys

NODE = "node1"
GPU_A = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
GPU_B = "GPU-1a1b1c1d-0000-1111-2222-333344445555"
LOCK = "2025-01-01T00:00:00Z,default,p1"
TO_ALLOCATE = f"{GPU_A},ACME,3000,30:;"
BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"),
                        register_annotation="hami.io/node-acme-register",
                        to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE, lock_annotation=keys.NODE_LOCK)


class AcmeVendor:
    """Node-side hooks of a test vendor; records every container it hands devices to."""

    def __init__(self) -> None:
        self.handed: list[tuple[str, tuple[str, ...]]] = []

    @hookimpl
    def hami_discover_devices(self, backend):
        return [DeviceInfo(id=GPU_A, index=0, count=2, devmem=8000, devcore=100, type="ACME-X", health=True),
                DeviceInfo(id=GPU_B, index=1, count=2, devmem=8000, devcore=100, type="ACME-X", health=True)]

    @hookimpl
    def hami_allocate(self, backend, pod, container_index, devices):
        self.handed.append((pod["metadata"]["name"], tuple(d.uuid for d in devices)))
        return ContainerAllocation(env={"ACME_VISIBLE": ",".join(d.uuid for d in devices)})


class ProcessDied(BaseException):
    """The plugin process is gone: nothing after this point runs (not an Exception, so no handler sees it)."""


class FaultyCluster:
    """In-test stand-in wrapping a real KubeCluster: the next calls of a method fail as queued.

    Kinds: ``409`` (ConflictError, as KubeCluster raises for HTTP 409), ``500`` (HamiError, as for any other
    API error), ``lost`` (the write takes effect, then the response is lost), ``die-before`` / ``die-after``
    (the process dies before / after the write reaches the API).
    """

    def __init__(self, inner: KubeCluster) -> None:
        self.inner = inner
        self.faults: list[tuple[str, str]] = []
        self.died = threading.Event()

    def fail(self, method: str, *kinds: str) -> FaultyCluster:
        self.faults.extend((method, k) for k in kinds)
        return self

    @staticmethod
    def _targeted(method: str, args: tuple[Any, ...]) -> bool:
        # Node patches of the registration loop are not the Allocate path under test: only lock writes fail.
        return method != "patch_node" or keys.NODE_LOCK in args[-1]["metadata"]["annotations"]

    def _call(self, method: str, *args: Any) -> Any:
        if self.died.is_set():  # what a dead process's other threads would see: nothing gets through
            raise HamiError(f"{method}: the plugin process is gone")
        kind = next((k for m, k in self.faults if m == method), None)
        if kind is None or not self._targeted(method, args):
            return getattr(self.inner, method)(*args)
        self.faults.remove((method, kind))
        if kind == "409":
            raise ConflictError(f"{method}: the object has been modified")
        if kind == "500":
            raise HamiError(f"{method}: 500 Internal Server Error")
        if kind == "die-before":
            self.died.set()
            raise ProcessDied(method)
        getattr(self.inner, method)(*args)
        if kind == "lost":
            raise HamiError(f"{method}: connection reset before the response")
        self.died.set()  # die-after
        raise ProcessDied(method)

    def patch_pod(self, namespace: str, name: str, patch: Any) -> Any:
        return self._call("patch_pod", namespace, name, patch)

    def patch_node(self, name: str, patch: Any) -> Any:
        return self._call("patch_node", name, patch)

    def get_pod(self, namespace: str, name: str) -> Any:
        return self._call("get_pod", namespace, name)

    def get_node(self, name: str) -> Any:
        return self._call("get_node", name)

    def list_pods(self) -> Any:
        return self._call("list_pods")

    def pods_on_node(self, node: str) -> Any:
        return self._call("pods_on_node", node)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _pod(name: str = "p1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "annotations": {
        keys.VGPU_DEVICES_TO_ALLOCATE: TO_ALLOCATE, keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        keys.BIND_TIME: "1700000000", keys.VGPU_NODE: NODE}},
        "spec": {"nodeName": NODE, "containers": [{"name": "c0"}]}, "status": {"phase": "Pending"}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        srv.create("nodes", "", {"metadata": {"name": NODE, "annotations": {keys.NODE_LOCK: LOCK}}})
        srv.create("pods", "default", _pod())
        yield srv


@pytest.fixture
def kube(api: FakeApiServer) -> Iterator[KubeCluster]:
    from kubernetes import client

    api_client = client.ApiClient(client.Configuration(host=api.url))
    yield KubeCluster(api_client=api_client, qps=0, request_timeout_s=5)
    api_client.close()


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    with running_kubelet("hdf") as k:
        yield k


@pytest.fixture
def start_plugin(kubelet: FakeKubelet) -> Iterator[Callable[[Any], tuple[DevicePluginApp, AcmeVendor]]]:
    apps: list[DevicePluginApp] = []

    def start(cluster: Any) -> tuple[DevicePluginApp, AcmeVendor]:
        vendor = AcmeVendor()
        app = DevicePluginApp(get_plugin_manager(load_entrypoints=False, plugins=[vendor]), BACKEND, cluster, NODE,
                              plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05, register_interval_s=3600)
        app.server.allocator.sleep = lambda s: None  # retries without waiting
        app.server.allocator.node_lock.sleep = lambda s: None
        app.start()
        apps.append(app)
        return app, vendor

    yield start
    for app in apps:
        app.stop()


def _annotations(kube: KubeCluster) -> dict[str, str]:
    return kube.get_pod("default", "p1")["metadata"].get("annotations") or {}


def _lock(kube: KubeCluster) -> str | None:
    return (kube.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def _allocate(kubelet: FakeKubelet, *, registered: bool = False) -> Any:
    """kubelet's Allocate for one container, after waiting for the plugin's (next) registration."""
    endpoint = "acme-gpu.sock" if registered else kubelet.next_registration().endpoint
    with kubelet.connect(endpoint) as client:
        return client.allocate([f"{GPU_A}-1"])


def _assert_allocated_once(kube: KubeCluster, vendor: AcmeVendor, response: Any) -> None:
    assert dict(response.container_responses[0].envs) == {"ACME_VISIBLE": GPU_A}
    assert vendor.handed == [("p1", (GPU_A,))]
    annos = _annotations(kube)
    assert annos[keys.VGPU_DEVICES_TO_ALLOCATE] == ";;" and annos[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert _lock(kube) is None


# ------------------------------------------------------------------------------------------- API errors
@pytest.mark.parametrize(("method", "kind"), [
    *((m, k) for m in ("get_node", "pods_on_node") for k in ("409", "500")),  # a read has no effect to lose
    *((m, k) for m in ("patch_pod", "patch_node") for k in ("409", "500", "lost"))])
def test_one_api_error_on_any_call_is_retried(kube, kubelet, start_plugin, method: str, kind: str) -> None:
    faulty = FaultyCluster(kube).fail(method, kind)
    _, vendor = start_plugin(faulty)
    _assert_allocated_once(kube, vendor, _allocate(kubelet))
    assert faulty.faults == []  # the fault struck (Allocate makes that call)


def test_lost_patch_response_over_real_http_is_retried(api, kube, kubelet, start_plugin) -> None:
    api.drop_next_response("PATCH", "/pods/p1")  # the annotation patch lands, the connection drops
    _, vendor = start_plugin(kube)
    _assert_allocated_once(kube, vendor, _allocate(kubelet))


def test_persistent_patch_failure_fails_the_pod_clearly_and_releases_the_lock(kube, kubelet, start_plugin) -> None:
    start_plugin(FaultyCluster(kube).fail("patch_pod", "500", "500", "500"))
    with pytest.raises(grpc.RpcError) as err:
        _allocate(kubelet)
    assert err.value.details().startswith("allocate for pod default/p1 failed: patch_pod: 500")
    annos = _annotations(kube)
    assert annos[keys.BIND_PHASE] == keys.BIND_PHASE_FAILED
    assert annos[keys.VGPU_DEVICES_TO_ALLOCATE] == TO_ALLOCATE  # nothing consumed: no container got them
    assert _lock(kube) is None


def test_unreleasable_lock_expires(kube, kubelet, start_plugin) -> None:
    # every release attempt fails: the pod still gets its devices, and the lock is left to its expiry
    _, vendor = start_plugin(FaultyCluster(kube).fail("patch_node", *["500"] * 10))
    response = _allocate(kubelet)
    assert dict(response.container_responses[0].envs) == {"ACME_VISIBLE": GPU_A}
    assert vendor.handed == [("p1", (GPU_A,))]
    assert _lock(kube) == LOCK
    other = _pod("p2")
    now = [1735689600.0 + 60]  # 2025-01-01T00:01:00Z: within the 300 s expiry of the 00:00:00Z lock
    locker = NodeLocker(kube, clock=lambda: now[0], sleep=lambda s: None)
    with pytest.raises(HamiError, match="node lock contention"):
        locker.acquire(NODE, other, LockSpec(keys.NODE_LOCK))
    now[0] = 1735689600.0 + 301
    locker.acquire(NODE, other, LockSpec(keys.NODE_LOCK))
    assert _lock(kube).endswith(",default,p2")


# ------------------------------------------------------------------------------- plugin dies mid-Allocate
def _die_mid_allocate(kube: KubeCluster, kubelet: FakeKubelet, start_plugin: Any, method: str, kind: str) -> None:
    """Start a plugin that dies at ``method``/``kind`` during kubelet's Allocate; kubelet sees the RPC fail."""
    faulty = FaultyCluster(kube).fail(method, kind)
    app, _ = start_plugin(faulty)
    reg = kubelet.next_registration()
    errors: list[BaseException] = []

    def call() -> None:
        with kubelet.connect(reg.endpoint) as client:
            try:
                client.allocate([f"{GPU_A}-1"])
            except grpc.RpcError as exc:
                errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    assert faulty.died.wait(10)
    app.stop()  # the process is gone: its socket closes and kubelet's call fails
    caller.join(10)
    assert len(errors) == 1 and not caller.is_alive()


@pytest.mark.parametrize(("method", "kind", "devices_left"), [
    ("patch_pod", "die-before", True),    # before the annotation was written
    ("patch_pod", "die-after", False),    # annotation consumed, kubelet never got the answer
    ("patch_node", "die-before", False),  # bind-phase=success written, lock not yet released
])
def test_plugin_restarted_mid_allocate(api, kube, kubelet, start_plugin, method: str, kind: str,
                                       devices_left: bool) -> None:
    _die_mid_allocate(kube, kubelet, start_plugin, method, kind)
    assert _lock(kube) == LOCK  # the dead plugin released nothing
    _, vendor = start_plugin(kube)  # the DaemonSet starts a new plugin; kubelet retries
    if devices_left:
        _assert_allocated_once(kube, vendor, _allocate(kubelet))
        # kubelet starts the container; a further Allocate must not hand the devices out again
        api.update("pods", "default", "p1", lambda pod: pod.__setitem__("status", {"phase": "Running"}), None)
        with pytest.raises(grpc.RpcError) as err:
            _allocate(kubelet, registered=True)
        assert err.value.details() == f"no binding pod found on node {NODE}"
        assert vendor.handed == [("p1", (GPU_A,))]
        assert _lock(kube) is None
    else:
        # the dead plugin wrote bind-phase=success with the consumed slot: p1 waits for no Allocate any more, so
        # the retry is refused and writes nothing; the devices reached no container and are not handed out again
        with pytest.raises(grpc.RpcError) as err:
            _allocate(kubelet)
        assert err.value.details() == f"no binding pod found on node {NODE}"
        assert vendor.handed == []
        assert _annotations(kube)[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
        assert _lock(kube) == LOCK
        # kubelet fails p1's admission: the next bind breaks the lock of a Failed owner
        api.update("pods", "default", "p1", lambda pod: pod.__setitem__("status", {"phase": "Failed"}), None)
        NodeLocker(kube, clock=lambda: 1735689600.0 + 10, sleep=lambda s: None).acquire(
            NODE, _pod("p2"), LockSpec(keys.NODE_LOCK))
        assert _lock(kube).endswith(",default,p2")


def test_dead_plugin_without_retry_leaves_a_lock_the_scheduler_breaks(api, kube, kubelet, start_plugin) -> None:
    _die_mid_allocate(kube, kubelet, start_plugin, "patch_pod", "die-before")
    assert _lock(kube) == LOCK
    # kubelet fails the pod's admission (UnexpectedAdmissionError): the pod is Failed, its lock is broken
    api.update("pods", "default", "p1", lambda pod: pod.__setitem__("status", {"phase": "Failed"}), None)
    locker = NodeLocker(kube, clock=lambda: 1735689600.0 + 10, sleep=lambda s: None)
    locker.acquire(NODE, _pod("p2"), LockSpec(keys.NODE_LOCK))
    assert _lock(kube).endswith(",default,p2")


# ----------------------------------------------------------------------------------------------- kubelet
def test_kubelet_restart_between_register_and_allocate(kube, kubelet, start_plugin) -> None:
    _, vendor = start_plugin(kube)
    kubelet.next_registration()
    kubelet.restart()  # wipes the plugin's socket and re-creates kubelet.sock
    _assert_allocated_once(kube, vendor, _allocate(kubelet))  # re-registered, served on the new socket


def test_plugin_started_before_kubelet_registers_when_it_comes_up(kube, kubelet, start_plugin) -> None:
    kubelet.stop()  # node boot: no kubelet.sock yet
    app, vendor = start_plugin(kube)
    assert app.server.socket_path.exists()
    kubelet.start()
    _assert_allocated_once(kube, vendor, _allocate(kubelet))


def test_lock_of_a_deleted_pod_does_not_block_allocate(kube, kubelet, start_plugin) -> None:
    # Regression: the plugin looked only at the lock's owner and failed with "pods ghost not found".
    kube.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: "2025-01-01T00:00:00Z,default,ghost"}}})
    _, vendor = start_plugin(kube)
    response = _allocate(kubelet)  # found as the allocating pod on this node instead
    assert dict(response.container_responses[0].envs) == {"ACME_VISIBLE": GPU_A}
    assert vendor.handed == [("p1", (GPU_A,))]
    assert _lock(kube).endswith(",ghost")  # not p1's to release; the scheduler breaks it (owner gone)
    NodeLocker(kube, clock=lambda: 1735689600.0 + 10, sleep=lambda s: None).acquire(
        NODE, _pod("p2"), LockSpec(keys.NODE_LOCK))
    assert _lock(kube).endswith(",default,p2")
