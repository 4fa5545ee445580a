"""HAMi dynamic MIG on the node (spec node.md §2.12 b), end to end against a fake driver.

The device plugin app runs with the installed hami-nvidia hooks in ``operatingmode: mig`` (per-node
config.json). GPUs and their MIG profiles are discovered by the real NVML probe child through
``fakedriver/pynvml.py`` (the in-test stand-in for the driver, modelling A100-SXM4-40GB's real profile
table); the MIG manager runs in this process on the same fake; a fake kubelet calls ListAndWatch and
Allocate over real gRPC with the kubelet v1beta1 protobuf; the cluster is the in-memory one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
from nvml_testlib import NODE, device_plugins, load_fake_pynvml

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.node.fake_kubelet import FakeKubelet
from hami_core.plugins.types import Placement
from hami_core.wire import keys
from hami_core.wire.mig import MigAllocation, decode_mig_allocations, encode_mig_allocations
from hami_core.wire.nodes import decode_node_devices_json
from hami_nvidia import detect

UUID0 = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
UUID1 = "GPU-1a1b1c1d-0000-1111-2222-333344445555"
UUID2 = "GPU-2b2c2d2e-0000-1111-2222-333344445555"
A100 = "NVIDIA A100-SXM4-40GB"
ALLOWLIST = [{"models": ["A100-SXM4-40GB", "H200"], "profiles": ["1g.5gb", "2g.10gb", "3g.20gb", "7g.40gb"]}]
RECONCILE_THREAD = "hami-nvidia-mig-reconcile"
CREATE_GI = "nvmlDeviceCreateGpuInstanceWithPlacement"


def install_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpus: list[tuple[str, str]],
                   mode: str = "mig") -> ModuleType:
    """The fake driver with ``gpus`` ``(uuid, name)``, importable as ``pynvml`` here and in the probe child,
    and a per-node config.json putting this node in ``mode``."""
    monkeypatch.setenv("DP_DISABLE_HEALTHCHECKS", "all")
    monkeypatch.delenv(detect.OVERRIDE_ENV, raising=False)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"nodeconfig": [{"name": "other", "operatingmode": "hami-core"},
                                                 {"name": NODE, "operatingmode": mode}]}))
    monkeypatch.setenv("HAMI_NVIDIA_NODE_CONFIG", str(config))
    return load_fake_pynvml(monkeypatch, [{"uuid": u, "name": name, "memory_mib": 40960} for u, name in gpus])


@pytest.fixture
def start_plugin(kubelet: FakeKubelet, cluster: MemoryCluster) -> Iterator[Callable[[], DevicePluginApp]]:
    with device_plugins(kubelet, cluster, NODE, {"migProfileAllowlist": ALLOWLIST}) as start:
        yield start


@pytest.fixture
def a100s(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    return install_driver(monkeypatch, tmp_path, [(UUID0, A100), (UUID1, A100)])


def entry(ci: int, di: int, gpu: str, profile: str, start: int, size: int) -> MigAllocation:
    return MigAllocation(ci, di, gpu, profile, Placement(start, size))


def mig_pod(name: str, to_allocate: str, entries: list[MigAllocation] | None, containers: int = 1) -> dict[str, Any]:
    annos = {keys.VGPU_DEVICES_TO_ALLOCATE: to_allocate, keys.BIND_PHASE: "allocating", keys.BIND_TIME: "1",
             keys.VGPU_NODE: NODE}
    if entries is not None:
        annos[keys.VGPU_MIG_ALLOCATIONS] = encode_mig_allocations(entries)
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": annos},
            "spec": {"nodeName": NODE, "containers": [{"name": f"c{i}"} for i in range(containers)]},
            "status": {"phase": "Pending"}}


def bind(cluster: MemoryCluster, pod: dict[str, Any]) -> None:
    """Add the pod and take the node lock for it, as the scheduler's bind does."""
    cluster.add_pod(pod)
    cluster.patch_node(NODE, {"metadata": {"annotations": {
        keys.NODE_LOCK: f"2025-01-01T00:00:00Z,ml,{pod['metadata']['name']}"}}})


def annotation(cluster: MemoryCluster, name: str, key: str) -> str:
    return cluster.get_pod("ml", name)["metadata"]["annotations"].get(key, "")


def allocate(kubelet: FakeKubelet, *containers: list[str]) -> Any:
    with kubelet.connect("nvidia-gpu.sock") as client:
        return client.allocate(*containers)


def allocate_error(kubelet: FakeKubelet, *containers: list[str]) -> str:
    with pytest.raises(grpc.RpcError) as err:
        allocate(kubelet, *containers)
    return str(err.value.details())


def manager(app: DevicePluginApp) -> Any:
    mgr = app.context.state["nvidia.mig"]
    mgr.start()  # the startup pass has run once this returns (it holds the manager's lock)
    return mgr


# ------------------------------------------------------------------------------------------ registration
def test_registration_lists_the_allowlisted_profiles_of_each_a100_and_leaves_out_a_gpu_without_profiles(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, start_plugin, kubelet: FakeKubelet) -> None:
    install_driver(monkeypatch, tmp_path, [(UUID0, A100), (UUID1, "NVIDIA H200"), (UUID2, A100)])
    app = start_plugin()
    value = app.writer.encode(app.server.devices())
    one = ('"count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"mig","migProfiles":['
           '{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":['
           + ",".join(f'{{"start":{s},"size":1}}' for s in range(7)) + ']},'
           '{"name":"2g.10gb","memoryMB":9856,"core":29,"sliceCount":2,"placements":['
           '{"start":0,"size":2},{"start":2,"size":2},{"start":4,"size":2}]},'
           '{"name":"3g.20gb","memoryMB":20096,"core":43,"sliceCount":3,"placements":['
           '{"start":0,"size":4},{"start":4,"size":4}]},'
           '{"name":"7g.40gb","memoryMB":40448,"core":100,"sliceCount":7,"placements":[{"start":0,"size":8}]}],'
           '"health":true}')
    # The H200 (index 1) answers NOT_SUPPORTED to every MIG profile query: not registered.
    assert value == f'[{{"id":"{UUID0}",{one},{{"id":"{UUID2}","index":2,{one}]'
    devices = decode_node_devices_json(value)
    assert [d.id for d in devices] == [UUID0, UUID2]
    assert [(p.name, p.core, p.placements[-1]) for p in devices[0].mig_profiles] == [
        ("1g.5gb", 15, Placement(6, 1)), ("2g.10gb", 29, Placement(4, 2)), ("3g.20gb", 43, Placement(4, 4)),
        ("7g.40gb", 100, Placement(0, 8))]
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        stream = client.list_and_watch()
        assert [d.ID for d in next(stream).devices] == [f"{u}-{i}" for u in (UUID0, UUID2) for i in range(7)]
        stream.cancel()


def test_hami_core_node_keeps_the_split_count_registration(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, start_plugin) -> None:
    nvml = install_driver(monkeypatch, tmp_path, [(UUID0, A100)], mode="hami-core")
    app = start_plugin()
    assert [(d.count, d.mode, d.mig_profiles) for d in app.devices] == [(10, "hami-core", ())]
    assert "nvidia.mig" not in app.context.state and not nvml.driver().calls[CREATE_GI]


# ------------------------------------------------------------------------------------------ allocate
def test_allocate_creates_exactly_the_annotated_instances_and_records_them_on_the_pod(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    start_plugin()
    bind(cluster, mig_pod("train", f"{UUID0},NVIDIA,9856,29:{UUID1},NVIDIA,20096,43:;",
                          [entry(0, 1, UUID1, "3g.20gb", 4, 4), entry(0, 0, UUID0, "2g.10gb", 2, 2)]))
    (ctr,) = allocate(kubelet, [f"{UUID0}-0", f"{UUID1}-3"]).container_responses
    ((gi0, start0, size0, ci0, mig0),) = a100s.live_instances(UUID0)
    ((gi1, start1, size1, ci1, mig1),) = a100s.live_instances(UUID1)
    assert (start0, size0, start1, size1) == (2, 2, 4, 4)
    # MIG UUIDs in deviceIndex order, and nothing of HAMi-core: no limits, no mounts.
    assert dict(ctr.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{mig0},{mig1}"}
    assert list(ctr.mounts) == [] and list(ctr.devices) == []
    recorded = decode_mig_allocations(annotation(cluster, "train", keys.VGPU_MIG_ALLOCATIONS))
    assert all(a.realized for a in recorded)
    assert {(a.device_index, a.gpu_uuid, a.profile, a.mig_uuid, a.gpu_instance_id, a.compute_instance_id)
            for a in recorded} == {(0, UUID0, "2g.10gb", mig0, gi0, ci0), (1, UUID1, "3g.20gb", mig1, gi1, ci1)}
    assert annotation(cluster, "train", keys.BIND_PHASE) == "success"
    assert a100s.driver().calls[CREATE_GI] == 2


def test_a_second_allocate_of_the_same_pod_reuses_its_instances(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    start_plugin()
    slots = f"{UUID0},NVIDIA,4864,15:;"
    bind(cluster, mig_pod("train", slots, [entry(0, 0, UUID0, "1g.5gb", 3, 1)]))
    first = dict(allocate(kubelet, [f"{UUID0}-0"]).container_responses[0].envs)
    # kubelet allocates again (e.g. after its restart): the scheduler's slots are back, the instance is tracked.
    cluster.patch_pod("ml", "train", {"metadata": {"annotations": {keys.VGPU_DEVICES_TO_ALLOCATE: slots,
                                                                   keys.BIND_PHASE: "allocating"}}})
    cluster.patch_node(NODE, {"metadata": {"annotations": {keys.NODE_LOCK: "2025-01-01T00:00:00Z,ml,train"}}})
    second = dict(allocate(kubelet, [f"{UUID0}-1"]).container_responses[0].envs)
    assert first == second and first["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    assert a100s.driver().calls[CREATE_GI] == 1
    assert len(a100s.live_instances(UUID0)) == 1


def test_init_container_entries_count_first(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    start_plugin()
    pod = mig_pod("train", f"{UUID0},NVIDIA,4864,15:;{UUID1},NVIDIA,40448,100:;",
                  [entry(0, 0, UUID0, "1g.5gb", 0, 1), entry(1, 0, UUID1, "7g.40gb", 0, 8)])
    pod["spec"]["initContainers"] = [pod["spec"]["containers"].pop()]
    pod["spec"]["containers"] = [{"name": "main"}]
    bind(cluster, pod)
    init = dict(allocate(kubelet, [f"{UUID0}-0"]).container_responses[0].envs)
    main = dict(allocate(kubelet, [f"{UUID1}-0"]).container_responses[0].envs)
    assert init["NVIDIA_VISIBLE_DEVICES"] == a100s.live_instances(UUID0)[0][4]
    assert main["NVIDIA_VISIBLE_DEVICES"] == a100s.live_instances(UUID1)[0][4]
    assert all(a.realized for a in decode_mig_allocations(annotation(cluster, "train", keys.VGPU_MIG_ALLOCATIONS)))
    assert annotation(cluster, "train", keys.BIND_PHASE) == "success"


def test_a_failure_mid_way_rolls_back_only_this_calls_instances(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    start_plugin()
    bind(cluster, mig_pod("a", f"{UUID0},NVIDIA,4864,15:;", [entry(0, 0, UUID0, "1g.5gb", 0, 1)]))
    allocate(kubelet, [f"{UUID0}-0"])
    kept = a100s.live_instances(UUID0)
    entries = [entry(0, 0, UUID0, "1g.5gb", 1, 1), entry(0, 1, UUID1, "3g.20gb", 0, 4)]
    bind(cluster, mig_pod("b", f"{UUID0},NVIDIA,4864,15:{UUID1},NVIDIA,20096,43:;", entries))
    # b's first instance is made; the compute instance of its second fails.
    a100s.fail_next("nvmlGpuInstanceCreateComputeInstance", a100s.NVMLError_InsufficientResources(), after=1)
    details = allocate_error(kubelet, [f"{UUID0}-1", f"{UUID1}-1"])
    assert "ml/b" in details and keys.VGPU_MIG_ALLOCATIONS in details and "Insufficient Resources" in details
    assert a100s.live_instances(UUID0) == kept and a100s.live_instances(UUID1) == []
    assert a100s.driver().calls[CREATE_GI] == 3  # a, b's first, b's second (whose GI went with its CI)
    assert decode_mig_allocations(annotation(cluster, "b", keys.VGPU_MIG_ALLOCATIONS)) == tuple(entries)
    assert annotation(cluster, "b", keys.BIND_PHASE) == "failed"


def test_two_containers_in_one_call_see_each_other_and_a_later_failure_rolls_back_the_earlier_one(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    start_plugin()
    slots = f"{UUID0},NVIDIA,4864,15:;{UUID1},NVIDIA,4864,15:;"
    good = [entry(0, 0, UUID0, "1g.5gb", 5, 1), entry(1, 0, UUID1, "1g.5gb", 6, 1)]
    bind(cluster, mig_pod("ok", slots, good, containers=2))
    a, b = allocate(kubelet, [f"{UUID0}-0"], [f"{UUID1}-0"]).container_responses
    recorded = decode_mig_allocations(annotation(cluster, "ok", keys.VGPU_MIG_ALLOCATIONS))
    # The second container's hook saw the first one's realised entry: both survive the single patch.
    assert [a.mig_uuid for a in recorded] == [dict(a.envs)["NVIDIA_VISIBLE_DEVICES"],
                                              dict(b.envs)["NVIDIA_VISIBLE_DEVICES"]]
    cluster.delete_pod("ml", "ok")
    bad = [entry(0, 0, UUID0, "1g.5gb", 4, 1), entry(1, 0, UUID0, "1g.5gb", 3, 1)]  # container 1's GPU is wrong
    bind(cluster, mig_pod("bad", slots, bad, containers=2))
    details = allocate_error(kubelet, [f"{UUID0}-0"], [f"{UUID1}-0"])
    assert "containerIndex 1" in details and "gpuUUID" in details
    # Container 0's new instance (start 4) was rolled back; only the old pod's instances, if not yet reconciled.
    assert a100s.driver().calls[CREATE_GI] == 3  # it had been made: ok's two, then bad's first
    assert 4 not in [s for _, s, *_ in a100s.live_instances(UUID0)]
    assert annotation(cluster, "bad", keys.BIND_PHASE) == "failed"


def test_a_pod_changed_before_the_patch_rolls_the_call_back(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster,
        monkeypatch: pytest.MonkeyPatch) -> None:
    start_plugin()
    entries = [entry(0, 0, UUID1, "2g.10gb", 4, 2)]
    bind(cluster, mig_pod("b", f"{UUID1},NVIDIA,9856,29:;", entries))
    pods_on_node = cluster.pods_on_node

    def another_writer(node: str) -> list[dict[str, Any]]:
        # Someone else writes the pod after Allocate read it: the resourceVersion precondition must catch it.
        cluster.patch_pod("ml", "b", {"metadata": {"annotations": {"example.com/touched": "yes"}}})
        return pods_on_node(node)

    monkeypatch.setattr(cluster, "pods_on_node", another_writer)
    details = allocate_error(kubelet, [f"{UUID1}-0"])
    assert "ml/b" in details
    assert a100s.driver().calls[CREATE_GI] == 1 and a100s.live_instances(UUID1) == []
    assert decode_mig_allocations(annotation(cluster, "b", keys.VGPU_MIG_ALLOCATIONS)) == tuple(entries)
    assert annotation(cluster, "b", keys.BIND_PHASE) == "failed"


@pytest.mark.parametrize(("slots", "entries", "ids", "words"), [
    (f"{UUID0},NVIDIA,4864,15:;", [entry(0, 0, UUID1, "1g.5gb", 0, 1)], [[f"{UUID0}-0"]],
     ["gpuUUID", UUID1, UUID0]),
    (f"{UUID0},NVIDIA,4864,15:{UUID1},NVIDIA,4864,15:;", [entry(0, 0, UUID0, "1g.5gb", 0, 1)],
     [[f"{UUID0}-0", f"{UUID1}-0"]], ["containerIndex 0", "1 MIG entries for 2"]),
    (f"{UUID0},NVIDIA,4864,15:;", None, [[f"{UUID0}-0"]], ["is missing"]),
    (f"{UUID0},NVIDIA,4864,15:;", [entry(0, 0, UUID0, "3g.20gb", 2, 4)], [[f"{UUID0}-0"]],
     ["placement not among", "0+4, 4+4"]),
    (f"{UUID0},NVIDIA,4864,15:;", [entry(0, 0, UUID0, "5g.25gb", 0, 5)], [[f"{UUID0}-0"]], ["profile", "5g.25gb"]),
], ids=["wrong-gpu", "count", "missing", "bad-placement", "bad-profile"])
def test_a_mismatched_or_missing_annotation_is_a_named_error_and_creates_nothing(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster, slots: str,
        entries: list[MigAllocation] | None, ids: list[list[str]], words: list[str]) -> None:
    start_plugin()
    bind(cluster, mig_pod("train", slots, entries))
    details = allocate_error(kubelet, *ids)
    assert "ml/train" in details and keys.VGPU_MIG_ALLOCATIONS in details
    for word in words:
        assert word in details
    assert a100s.driver().calls[CREATE_GI] == 0
    assert a100s.live_instances(UUID0) == a100s.live_instances(UUID1) == []
    assert annotation(cluster, "train", keys.BIND_PHASE) == "failed"


def test_an_instance_another_live_pod_holds_is_never_handed_out_again(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    start_plugin()
    bind(cluster, mig_pod("a", f"{UUID1},NVIDIA,9856,29:;", [entry(0, 0, UUID1, "2g.10gb", 0, 2)]))
    held = dict(allocate(kubelet, [f"{UUID1}-0"]).container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"]
    # A scheduler mistake books the same instance for b while a still runs.
    bind(cluster, mig_pod("b", f"{UUID1},NVIDIA,9856,29:;", [entry(0, 0, UUID1, "2g.10gb", 0, 2)]))
    details = allocate_error(kubelet, [f"{UUID1}-1"])
    assert "ml/b" in details and "already in use by pod ml/a" in details
    assert [m for *_, m in a100s.live_instances(UUID1)] == [held]
    assert annotation(cluster, "b", keys.BIND_PHASE) == "failed"


def test_an_undecodable_annotation_names_the_pod_and_field(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    start_plugin()
    pod = mig_pod("train", f"{UUID0},NVIDIA,4864,15:;", None)
    pod["metadata"]["annotations"][keys.VGPU_MIG_ALLOCATIONS] = '[{"containerIndex":0,"deviceIndex":0}]'
    bind(cluster, pod)
    details = allocate_error(kubelet, [f"{UUID0}-0"])
    assert f"pod ml/train annotation {keys.VGPU_MIG_ALLOCATIONS}" in details and "gpuUUID" in details
    assert a100s.driver().calls[CREATE_GI] == 0


# ------------------------------------------------------------------------------------------ reconcile
def test_reconcile_destroys_the_instances_of_a_deleted_or_finished_pod_only(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster) -> None:
    app = start_plugin()
    for name, start in (("a", 0), ("b", 1), ("c", 2)):
        bind(cluster, mig_pod(name, f"{UUID0},NVIDIA,4864,15:;", [entry(0, 0, UUID0, "1g.5gb", start, 1)]))
        allocate(kubelet, [f"{UUID0}-0"])
    assert [s for _, s, _, _, _ in a100s.live_instances(UUID0)] == [0, 1, 2]
    cluster.delete_pod("ml", "a")
    cluster.patch_pod("ml", "c", {"status": {"phase": "Succeeded"}})
    manager(app).reconcile()
    assert [s for _, s, _, _, _ in a100s.live_instances(UUID0)] == [1]
    assert [k.start for k in manager(app).instances] == [1]


def test_reconcile_destroys_nothing_when_the_pod_list_fails_or_a_pod_cannot_be_read(
        a100s: ModuleType, start_plugin, kubelet: FakeKubelet, cluster: MemoryCluster,
        monkeypatch: pytest.MonkeyPatch) -> None:
    app = start_plugin()
    bind(cluster, mig_pod("a", f"{UUID0},NVIDIA,4864,15:;", [entry(0, 0, UUID0, "1g.5gb", 0, 1)]))
    allocate(kubelet, [f"{UUID0}-0"])
    cluster.delete_pod("ml", "a")
    live = a100s.live_instances(UUID0)
    pods_on_node = cluster.pods_on_node

    def broken(node: str) -> list[dict[str, Any]]:
        raise ConnectionError("apiserver unreachable")

    monkeypatch.setattr(cluster, "pods_on_node", broken)
    assert manager(app).reconcile() == [] and a100s.live_instances(UUID0) == live
    monkeypatch.setattr(cluster, "pods_on_node", pods_on_node)
    bad = mig_pod("garbled", "", None)
    bad["metadata"]["annotations"][keys.VGPU_MIG_ALLOCATIONS] = "{not json"
    cluster.add_pod(bad)
    assert manager(app).reconcile() == [] and a100s.live_instances(UUID0) == live
    cluster.delete_pod("ml", "garbled")
    manager(app).reconcile()  # (the 5 s background pass may get there first: the state is what counts)
    assert a100s.live_instances(UUID0) == [] and manager(app).instances == {}


# ------------------------------------------------------------------------------------------ startup
def make_instance(nvml: ModuleType, uuid: str, profile: int, start: int) -> str:
    """Make a GI and CI out of band (as ``nvidia-smi mig -cgi ... -C`` would); returns the MIG UUID."""
    import ctypes

    handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
    nvml.nvmlDeviceSetMigMode(handle, nvml.NVML_DEVICE_MIG_ENABLE)
    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
    placement = nvml.c_nvmlGpuInstancePlacement_t(start, nvml.A100_40GB_PROFILES[profile][7])
    gi = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, info.id, ctypes.byref(placement))
    nvml.nvmlGpuInstanceCreateComputeInstance(gi, profile)
    return next(m for g, s, _, _, m in nvml.live_instances(uuid) if s == start)


def test_startup_leaves_busy_and_referenced_gpus_alone_and_cleans_idle_ones(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, start_plugin, cluster: MemoryCluster) -> None:
    nvml = install_driver(monkeypatch, tmp_path, [(UUID0, A100), (UUID1, A100), (UUID2, A100)])
    busy = make_instance(nvml, UUID0, 0, 3)
    nvml.driver().processes[busy] = [4242]  # a CUDA process on GPU 0's MIG device
    ours = make_instance(nvml, UUID1, 1, 2)  # referenced by a live pod: adopted, kept
    make_instance(nvml, UUID2, 2, 0)  # stale: nobody uses it
    make_instance(nvml, UUID2, 0, 6)
    ((gi, _, _, ci, _),) = nvml.live_instances(UUID1)
    realised = MigAllocation(0, 0, UUID1, "2g.10gb", Placement(2, 2), ours, gi, ci)
    pod = mig_pod("running", "", None)
    pod["metadata"]["annotations"][keys.VGPU_MIG_ALLOCATIONS] = encode_mig_allocations([realised])
    pod["status"]["phase"] = "Running"
    cluster.add_pod(pod)
    before = {u: nvml.live_instances(u) for u in (UUID0, UUID1)}
    app = start_plugin()
    mgr = manager(app)
    assert {u: nvml.live_instances(u) for u in (UUID0, UUID1)} == before
    assert nvml.live_instances(UUID2) == []
    assert nvml.driver().mig_mode == {0: [1, 1], 1: [1, 1], 2: [1, 1]}
    assert [(i.key.gpu_uuid, i.mig_uuid) for i in mgr.instances.values()] == [(UUID1, ours)]
    # Once the pod is gone the adopted instance is reconciled away like any other.
    cluster.delete_pod("ml", "running")
    mgr.reconcile()
    assert nvml.live_instances(UUID1) == [] and nvml.live_instances(UUID0) == before[UUID0]


def test_startup_enables_mig_mode_and_a_pending_enable_is_an_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, start_plugin, kubelet: FakeKubelet,
        cluster: MemoryCluster, caplog: pytest.LogCaptureFixture) -> None:
    nvml = install_driver(monkeypatch, tmp_path, [(UUID0, A100), (UUID1, A100)])
    nvml.driver().reset_required.add(1)
    app = start_plugin()
    manager(app)
    assert nvml.driver().mig_mode == {0: [1, 1], 1: [0, 1]}
    assert any("pending-enable" in r.getMessage() and UUID1 in r.getMessage() for r in caplog.records)
    bind(cluster, mig_pod("train", f"{UUID1},NVIDIA,4864,15:;", [entry(0, 0, UUID1, "1g.5gb", 0, 1)]))
    assert "cannot create the GPU instance" in allocate_error(kubelet, [f"{UUID1}-0"])


def test_startup_is_skipped_when_a_gpu_model_is_not_allowlisted(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, start_plugin) -> None:
    nvml = install_driver(monkeypatch, tmp_path, [(UUID0, A100), (UUID1, "NVIDIA A30")])
    stale = make_instance(nvml, UUID0, 0, 0)
    app = start_plugin()
    manager(app)
    assert [m for *_, m in nvml.live_instances(UUID0)] == [stale]
    assert [d.id for d in app.devices] == [UUID0]


def test_the_reconcile_thread_stops_with_the_plugin(a100s: ModuleType, start_plugin) -> None:
    app = start_plugin()
    assert any(t.name == RECONCILE_THREAD for t in threading.enumerate())
    app.stop()
    assert not any(t.name == RECONCILE_THREAD and t.is_alive() for t in threading.enumerate())
    assert a100s.driver().inits == a100s.driver().shutdowns == 1


# ------------------------------------------------------------------------------------------ node config
@pytest.mark.parametrize(("text", "mode"), [
    (None, "hami-core"),
    ('{"nodeconfig":[{"name":"other","operatingmode":"mig"}]}', "hami-core"),
    ('{"nodeconfig":[{"name":"gpu-node"}]}', "hami-core"),
    ('{"nodeconfig":[{"name":"gpu-node","operatingmode":"mps"}]}', "mps"),
    ('{"nodeconfig":[{"name":"gpu-node","operatingmode":"mig","devicesplitcount":4}]}', "mig"),
])
def test_operating_mode_comes_from_this_nodes_entry(tmp_path: Path, text: str | None, mode: str) -> None:
    from hami_nvidia.config import operating_mode

    path = tmp_path / "config.json"
    if text is not None:
        path.write_text(text)
    assert operating_mode(NODE, str(path)) == mode


@pytest.mark.parametrize(("text", "words"), [
    ('{"nodeconfig":[{"name":"gpu-node","operatingmode":"MIG"}]}', ["nodeconfig[0].operatingmode", "'MIG'"]),
    ('{"nodeconfig":{"name":"gpu-node"}}', ["nodeconfig: must be a list"]),
    ('{"nodeconfig":[7]}', ["nodeconfig[0]: must be an object"]),
    ("{nope", ["not JSON"]),
])
def test_a_bad_node_config_is_an_error_naming_the_file_and_field(tmp_path: Path, text: str,
                                                                  words: list[str]) -> None:
    from hami_core.plugins.errors import ConfigError
    from hami_nvidia.config import operating_mode

    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        operating_mode(NODE, str(path))
    assert str(path) in str(err.value)
    for word in words:
        assert word in str(err.value)
