"""Dynamic MIG end to end: the real scheduler service over HTTP (filter → annotations → bind), fed by KubeCluster
through the official kubernetes client, against the in-test API stand-in (tests/kubeapi/fake_apiserver.py: a faithful
stand-in of the API subset used, not a Kubernetes API server). The device plugin's side (realizing the instance) is
played by patching the pod annotation as it does (node.md §2.12b step 6)."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubeapi.fake_apiserver import FakeApiServer
from migsched_testlib import MIG_ALLOCATIONS, allocation, mig_reg
from nvidia_testlib import REGISTER, plugin_manager

from hami_core.cluster.kube import KubeCluster
from hami_core.engine.facade import Engine
from hami_core.scheduler.app import Options, Scheduler
from hami_core.wire import keys


def mig_node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {REGISTER: json.dumps([mig_reg(f"GPU-{name}")])}},
            "status": {"allocatable": {"nvidia.com/gpu": "7"}, "capacity": {"nvidia.com/gpu": "7"}}}


def mig_pod(name: str, *, gpus: int = 1, mem: int = 5000) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": str(mem)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "annotations": {"nvidia.com/vgpu-mode": "mig"}},
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "c", "image": "busybox", "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


def _post(url: str, body: Any) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _wait(check: Callable[[], bool], what: str) -> None:
    """Poll until the watch delivered what ``check`` looks for (a deadline, not a timed assertion)."""
    deadline = time.monotonic() + 10
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.05)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as srv:
        yield srv


@pytest.fixture
def api_client(server: FakeApiServer) -> Iterator[Any]:
    from kubernetes import client

    api = client.ApiClient(client.Configuration(host=server.url))
    yield api
    api.close()


def start(api_client: Any) -> Scheduler:
    engine = Engine({"nvidia": {}}, plugins=plugin_manager())
    svc = Scheduler(engine, KubeCluster(api_client=api_client, qps=0),
                    Options(port=0, metrics_host="127.0.0.1", metrics_port=0, sync_wait_s=5.0,
                            metrics_device_detail=True))
    svc.start()
    return svc


def in_use(svc: Scheduler, gpu: str) -> list[tuple[str, int, str | None]]:
    with svc.lock:
        dev = svc.engine.nodes["gpu-1"].by_uuid[gpu]
        return sorted((i.profile, i.placement.start, i.mig_uuid) for i in dev.mig_in_use)


def filter_and_bind(server: FakeApiServer, svc: Scheduler, name: str) -> dict[str, str]:
    pod = server.get("pods", "default", name)
    result = _post(f"{svc.server.url}/filter", {"Pod": pod, "NodeNames": ["gpu-1"]})
    assert result["NodeNames"] == ["gpu-1"], result
    annotations = server.get("pods", "default", name)["metadata"]["annotations"]
    bound = _post(f"{svc.server.url}/bind", {"PodName": name, "PodNamespace": "default",
                                              "PodUID": pod["metadata"]["uid"], "Node": "gpu-1"})
    assert bound == {"Error": ""}
    assert server.get("pods", "default", name)["spec"]["nodeName"] == "gpu-1"
    # the device plugin's Allocate marks the bind a success and releases the node lock
    server.patch("pods", "default", name, {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}})
    server.patch("nodes", "", "gpu-1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    return annotations


def test_filter_bind_realize_and_restart(server: FakeApiServer, api_client: Any) -> None:
    gpu = "GPU-gpu-1"
    server.create("nodes", "", mig_node("gpu-1"))
    server.create("pods", "default", mig_pod("first", gpus=2))
    server.create("pods", "default", mig_pod("second", mem=12000))
    svc = start(api_client)
    try:
        first = filter_and_bind(server, svc, "first")
        assert first[keys.VGPU_DEVICES_ALLOCATED] == f"{gpu},NVIDIA,5120,14:{gpu},NVIDIA,5120,14:;"
        assert json.loads(first[MIG_ALLOCATIONS]) == [allocation(0, 0, gpu, "1g.5gb", 6),
                                                      allocation(0, 1, gpu, "1g.5gb", 5)]
        # the second pod sees the first one's instances
        second = filter_and_bind(server, svc, "second")
        assert json.loads(second[MIG_ALLOCATIONS]) == [allocation(0, 0, gpu, "3g.20gb", 0)]
        assert in_use(svc, gpu) == [("1g.5gb", 5, None), ("1g.5gb", 6, None), ("3g.20gb", 0, None)]

        # the device plugin creates the instances and writes their runtime identity on the pod
        realized = json.loads(first[MIG_ALLOCATIONS])
        for i, entry in enumerate(realized):
            entry.update(migUUID=f"MIG-{i}", gpuInstanceID=13 - i, computeInstanceID=0)
        server.patch("pods", "default", "first", {"metadata": {"annotations": {
            MIG_ALLOCATIONS: json.dumps(realized)}}})
        _wait(lambda: ("1g.5gb", 6, "MIG-0") in in_use(svc, gpu), "the realized instances reach the scheduler")
        assert svc.metrics_url is not None
        text = _get(svc.metrics_url)
        lines = sorted(line for line in text.splitlines() if line.startswith("hami_node_gpu_mig_instance_info{"))
        assert lines == sorted([
            f'hami_node_gpu_mig_instance_info{{compute_instance_id="0",device_index="0",device_uuid="{gpu}",'
            f'gpu_instance_id="{13 - i}",mig_uuid="MIG-{i}",node="gpu-1",placement_size="1",'
            f'placement_start="{6 - i}",profile="1g.5gb",zone="vGPU"}} 1.0' for i in (0, 1)])
        before = in_use(svc, gpu)

        # a deleted pod frees its instances
        server.delete("pods", "default", "second")
        _wait(lambda: ("3g.20gb", 0, None) not in in_use(svc, gpu), "the deletion reaches the scheduler")
    finally:
        svc.stop()
    # a restarted scheduler rebuilds the same instances from the annotations on the API server
    again = start(api_client)
    try:
        expected = [i for i in before if i[0] != "3g.20gb"]
        _wait(lambda: in_use(again, gpu) == expected, "a restarted scheduler rebuilds the instances")
        server.create("pods", "default", mig_pod("third"))
        third = filter_and_bind(server, again, "third")
        assert json.loads(third[MIG_ALLOCATIONS]) == [allocation(0, 0, gpu, "1g.5gb", 4)]
    finally:
        again.stop()
