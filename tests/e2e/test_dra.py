"""DRA mode (issue 30) on the real control plane, with no extender in the pods' path.

A control plane of its own, with kube-controller-manager's resourceclaim controller (it turns a pod's
ResourceClaimTemplate into a claim and deallocates it when the pod goes), its garbage collector (it deletes the
claim of a pod that is gone) and a stock kube-scheduler (profile
``default-scheduler``, no extender: its own DRA allocator places the claims). The chart is rendered with
``dra.enabled`` and applied whole: the DeviceClasses, the RBAC of every component. hami's webhook runs as the
hami-scheduler ServiceAccount and translates the pods of a namespace labelled ``hami.io/device-mode: dra``;
``hami dra-driver`` runs as the hami-dra-driver ServiceAccount for a Node labelled the same, publishing one fake
80 GiB GPU (10 shares); the harness plays the kubelet's DRA side over the plugin's real sockets
(:class:`realkube.dra.DraKubeletSim`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chart_helpers import NO_HELM, find_helm, template_text
from realkube.controlplane import ControlPlane, KubeControllerManager, KubeScheduler, kubectl
from realkube.dra import DRIVER, DraKubeletSim, HamiDraDriver
from realkube.hami import Install
from realkube.objects import create_node, gpu_devices, gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

pytestmark = pytest.mark.e2e

NAMESPACE = "hami-system"
MODE_LABEL = "hami.io/device-mode"
NODE = "dra-gpu-0"
GPU_MIB = 81920
CLASS = "hami-core-gpu.project-hami.io"


@pytest.fixture(scope="module")
def dra_plane(bindir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """Its own control plane: the session's has deploy/'s install (same ClusterRole and webhook names) and no
    kube-controller-manager."""
    with ControlPlane(bindir, tmp_path_factory.mktemp("dra")) as plane:
        kcm = KubeControllerManager(bindir, plane.workdir, plane.apiserver.admin_kubeconfig).start()
        try:
            yield plane
        finally:
            kcm.stop()


@pytest.fixture(scope="module")
def own_stack(dra_plane: ControlPlane, bindir: Path) -> Iterator[Stack]:
    helm = find_helm()
    if helm is None:
        pytest.skip(NO_HELM)
    version = json.loads(dra_plane.apiserver.get_text("/version"))["gitVersion"]
    path = dra_plane.workdir / "hami-py.dra.yaml"
    path.write_text(template_text(helm, namespace=NAMESPACE, kube_version=version,
                                  set_values={"dra.enabled": "true"}))
    dra_plane.ensure_namespace(NAMESPACE)
    out = kubectl(bindir, dra_plane.apiserver.admin_kubeconfig, "apply", "--server-side",
                  "--field-manager=hami-e2e", "-f", str(path), check=False)
    assert out.returncode == 0, out.stderr
    stack = Stack(dra_plane, bindir, Install.of_render(path, NAMESPACE))
    stack.install()
    stack.start()
    default = KubeScheduler(bindir, dra_plane.workdir, "kube-scheduler-default",
                            {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                             "leaderElection": {"leaderElect": False}}, dra_plane.apiserver.admin_kubeconfig)
    default.start()
    try:
        yield stack
    finally:
        default.stop()
        stack.stop()


@pytest.fixture(scope="module")
def driver(own_stack: Stack) -> Iterator[HamiDraDriver]:
    plane = own_stack.plane
    create_node(plane.core(), NODE, gpus=0, register=False, labels={MODE_LABEL: "dra"})
    kubeconfig = plane.kubeconfig_for(NAMESPACE, "hami-dra-driver")
    gpus = gpu_devices(NODE, 1, GPU_MIB)
    d = HamiDraDriver(plane.workdir, kubeconfig, NODE, gpus, device_config=own_stack.install_from.device_config)
    d.start()
    try:
        yield d
    finally:
        d.cleanup()


@pytest.fixture(scope="module")
def kubelet(own_stack: Stack, driver: HamiDraDriver) -> Iterator[DraKubeletSim]:
    sim = DraKubeletSim(own_stack.plane.admin, NODE, driver.registration_socket)
    sim.register()
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def dra_ns(own_stack: Stack) -> Iterator[str]:
    name = f"dra-{int(time.time() * 1000) % 10**8}"
    own_stack.plane.ensure_namespace(name)
    own_stack.plane.core().patch_namespace(name, {"metadata": {"labels": {MODE_LABEL: "dra"}}},
                                           _preload_content=False)
    yield name
    own_stack.delete_pods(name)


# ------------------------------------------------------------------------------------------------ helpers
def slices(stack: Stack) -> list[dict[str, Any]]:
    from kubernetes import client

    resp = client.ResourceV1Api(stack.plane.admin).list_resource_slice(
        field_selector=f"spec.nodeName={NODE}", _preload_content=False)
    return list(json.loads(resp.data)["items"])


def published(stack: Stack) -> tuple[int, list[str]]:
    """(pool generation, device names) of the node's GPU pool."""
    (item,) = [s for s in slices(stack) if s["spec"]["driver"] == DRIVER]
    return item["spec"]["pool"]["generation"], [d["name"] for d in item["spec"].get("devices") or []]


def claims(stack: Stack, namespace: str) -> list[dict[str, Any]]:
    from kubernetes import client

    resp = client.ResourceV1Api(stack.plane.admin).list_namespaced_resource_claim(namespace, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def shares(stack: Stack, namespace: str) -> dict[str, tuple[str, str, str]]:
    """pod name -> (device, memory, cores) its claim was allocated (kube-scheduler's consumed capacity)."""
    out = {}
    for claim in claims(stack, namespace):
        owner = next(o["name"] for o in claim["metadata"].get("ownerReferences") or [] if o["kind"] == "Pod")
        (result,) = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or [{}]
        consumed = result.get("consumedCapacity") or {}
        out[owner] = (result.get("device", ""), consumed.get("memory", ""), consumed.get("cores", ""))
    return out


def pod_phase(stack: Stack, namespace: str, name: str) -> tuple[str | None, str | None]:
    pod = stack.pod(namespace, name)
    scheduled = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"),
                     {})
    return pod["spec"].get("nodeName"), scheduled.get("reason")


def wait_running(stack: Stack, namespace: str, names: list[str], timeout_s: float = 60.0) -> None:
    def running() -> bool:
        return all((stack.pod(namespace, n).get("status") or {}).get("phase") == "Running" for n in names)

    wait_until(f"{names} running", running, timeout_s, 0.25)


def wait_unschedulable(stack: Stack, namespace: str, name: str, timeout_s: float = 60.0) -> None:
    """Until kube-scheduler has tried the pod with its claim in place and found no device for it: the claim
    exists, unallocated, and the pod is Unschedulable (and still so two seconds later)."""
    def refused() -> bool:
        owned = [c for c in claims(stack, namespace)
                 if any(o["name"] == name for o in c["metadata"].get("ownerReferences") or [])]
        return (len(owned) == 1 and not (owned[0].get("status") or {}).get("allocation")
                and pod_phase(stack, namespace, name) == (None, "Unschedulable"))

    wait_until(f"{name} unschedulable", refused, timeout_s, 0.25)
    time.sleep(2)
    assert refused(), f"{name} was placed after all"


def make(stack: Stack, namespace: str, name: str, *, mem: int | None, cores: int | None) -> None:
    stack.create_pods(namespace, [gpu_pod(name, namespace=namespace, mem=mem, cores=cores)])


# ------------------------------------------------------------------------------------------------ tests
def test_driver_publishes_the_node_and_the_classes_are_installed(own_stack: Stack, driver: HamiDraDriver) -> None:
    wait_until("the GPU pool published", lambda: any(s["spec"]["driver"] == DRIVER for s in slices(own_stack)),
               30, 0.25, proc=driver.proc)
    (item,) = slices(own_stack)
    assert item["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert item["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    (device,) = item["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    from kubernetes.utils import parse_quantity

    # the API server stores quantities canonically (81920Mi reads back as 80Gi)
    assert parse_quantity(device["capacity"]["memory"]["value"]) == GPU_MIB * 2**20
    assert parse_quantity(device["capacity"]["cores"]["value"]) == 100
    assert device["attributes"][f"{DRIVER}/uuid"]["string"] == gpu_devices(NODE, 1, GPU_MIB)[0]["uuid"]
    from kubernetes import client

    names = {c.metadata.name for c in client.ResourceV1Api(own_stack.plane.admin).list_device_class().items}
    assert CLASS in names


def test_pods_share_one_gpu_up_to_its_memory_and_no_further(own_stack: Stack, driver: HamiDraDriver,
                                                            kubelet: DraKubeletSim, dra_ns: str) -> None:
    for i in range(2):
        make(own_stack, dra_ns, f"mem-{i}", mem=30000, cores=10)
    wait_running(own_stack, dra_ns, ["mem-0", "mem-1"])
    pod = own_stack.pod(dra_ns, "mem-0")
    # translated: no nvidia.com resources left, one claim from the webhook's template; default-scheduler placed it
    limits = pod["spec"]["containers"][0]["resources"].get("limits") or {}
    assert not [r for r in limits if r.startswith("nvidia.com/")]
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith("mem-0-hami-")
    assert pod["spec"]["schedulerName"] == "default-scheduler" and pod["spec"]["nodeName"] == NODE
    got = shares(own_stack, dra_ns)
    assert {k: v[1:] for k, v in got.items()} == {"mem-0": ("30000Mi", "10"), "mem-1": ("30000Mi", "10")}, got
    assert got["mem-0"][0] == got["mem-1"][0] == "gpu-0"
    # 60000 of 81920 MiB taken: a third 30000 MiB pod does not fit, a 20000 MiB one does
    make(own_stack, dra_ns, "mem-2", mem=30000, cores=10)
    wait_unschedulable(own_stack, dra_ns, "mem-2")
    make(own_stack, dra_ns, "mem-3", mem=20000, cores=10)
    wait_running(own_stack, dra_ns, ["mem-3"])
    assert pod_phase(own_stack, dra_ns, "mem-2")[0] is None
    # the CDI spec of each prepared claim holds HAMi-core's limits for the share
    specs = driver.cdi_specs()
    by_pod = {own_stack.pod(dra_ns, n)["metadata"]["uid"]: n for n in ("mem-0", "mem-1", "mem-3")}
    limits_seen = {}
    for record in kubelet.state.prepared.values():
        if record.pod in by_pod:
            spec = specs[record.uid]
            assert spec["kind"] == f"{DRIVER}/claim" and record.cdi_device_ids
            assert all(i.startswith(f"{DRIVER}/claim=") for i in record.cdi_device_ids)
            env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
            limits_seen[by_pod[record.pod]] = (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_SM_LIMIT"],
                                               env["NVIDIA_VISIBLE_DEVICES"])
    uuid = gpu_devices(NODE, 1, GPU_MIB)[0]["uuid"]
    assert limits_seen == {"mem-0": ("30000m", "10", uuid), "mem-1": ("30000m", "10", uuid),
                           "mem-3": ("20000m", "10", uuid)}
    assert not kubelet.state.errors


def test_cores_bound_the_shares_and_deletion_frees_them(own_stack: Stack, driver: HamiDraDriver,
                                                        kubelet: DraKubeletSim, dra_ns: str) -> None:
    for i in range(2):
        make(own_stack, dra_ns, f"core-{i}", mem=1000, cores=45)
    wait_running(own_stack, dra_ns, ["core-0", "core-1"])
    make(own_stack, dra_ns, "core-2", mem=1000, cores=45)  # 135 % of the GPU's cores: no
    wait_unschedulable(own_stack, dra_ns, "core-2")
    uid0 = own_stack.pod(dra_ns, "core-0")["metadata"]["uid"]
    (record,) = kubelet.prepared_for(uid0)
    assert record.uid in driver.cdi_specs()
    # a graceful deletion: kubelet unprepares, confirms; the controller deallocates the claim, the collector deletes it
    own_stack.plane.core().delete_namespaced_pod("core-0", dra_ns, _preload_content=False)
    wait_until("core-0 gone", lambda: "core-0" not in {p["metadata"]["name"] for p in own_stack.pods(dra_ns)},
               30, 0.25)
    assert record.unprepared and record.uid not in driver.cdi_specs()
    wait_until("core-0's claim freed", lambda: record.name not in {c["metadata"]["name"]
                                                                   for c in claims(own_stack, dra_ns)}, 60, 0.25)
    wait_running(own_stack, dra_ns, ["core-2"])  # its 45 % fit once core-0's were given back
    assert not kubelet.state.errors


def test_an_unhealthy_gpu_stops_being_allocated(own_stack: Stack, driver: HamiDraDriver, kubelet: DraKubeletSim,
                                                dra_ns: str) -> None:
    generation, devices = published(own_stack)
    assert devices == ["gpu-0"]
    uuid = gpu_devices(NODE, 1, GPU_MIB)[0]["uuid"]
    driver.set_health(uuid, False)
    try:
        wait_until("the GPU withdrawn", lambda: published(own_stack) == (generation + 1, []), 30, 0.25,
                   proc=driver.proc)
        make(own_stack, dra_ns, "sick", mem=1000, cores=1)
        wait_unschedulable(own_stack, dra_ns, "sick")
    finally:
        driver.set_health(uuid, True)
    wait_until("the GPU back", lambda: published(own_stack) == (generation + 2, ["gpu-0"]), 30, 0.25,
               proc=driver.proc)
    wait_running(own_stack, dra_ns, ["sick"])


def test_a_driver_restart_republishes_and_keeps_prepared_claims(own_stack: Stack, driver: HamiDraDriver,
                                                                kubelet: DraKubeletSim, dra_ns: str) -> None:
    make(own_stack, dra_ns, "keep", mem=8000, cores=5)
    wait_running(own_stack, dra_ns, ["keep"])
    uid = own_stack.pod(dra_ns, "keep")["metadata"]["uid"]
    (record,) = kubelet.prepared_for(uid)
    before_slices = published(own_stack)
    before_spec = driver.cdi_specs()[record.uid]
    assert driver.stop() == 0
    assert published(own_stack) == before_slices  # the slices stay while the driver is down
    driver.start()
    kubelet.register()  # kubelet's plugin watcher sees the new registration socket
    time.sleep(3)  # more than a resync: an unchanged pool is not republished
    assert published(own_stack) == before_slices
    # kubelet retries prepare after a restart: the checkpoint answers with the same devices, the spec unchanged
    from hami_core.testing.fake_kubelet import DraKubelet

    with DraKubelet(driver.registration_socket) as again:
        again.register(DRIVER)
        answer = again.prepare((record.namespace, record.name, record.uid)).claims[record.uid]
    assert answer.error == "" and [i for d in answer.devices for i in d.cdi_device_ids] == record.cdi_device_ids
    assert driver.cdi_specs()[record.uid] == before_spec
    own_stack.plane.core().delete_namespaced_pod("keep", dra_ns, _preload_content=False)
    wait_until("keep gone", lambda: not own_stack.pods(dra_ns), 30, 0.25)
    assert record.unprepared and record.uid not in driver.cdi_specs()
    assert not kubelet.state.errors
