"""hami-nvidia node side end to end: --devices-file GPUs, a fake kubelet, Allocate env and mounts exact."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.node.fake_kubelet import FakeKubelet
from hami_core.plugins.manager import get_plugin_manager
from hami_core.wire import keys
from hami_nvidia.version import __version__

NODE = "gpu-node"
UUID0 = "GPU-0f0e0d0c-0000-1111-2222-333344445555"
UUID1 = "GPU-1a1b1c1d-0000-1111-2222-333344445555"
CACHE = re.compile(r"^(.*)/vgpu/[0-9a-f-]{36}\.cache$")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hnv", dir="/tmp"))  # unix socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _pod(to_allocate: str, containers: list[dict]) -> dict:
    return {"metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "annotations": {
        keys.VGPU_DEVICES_TO_ALLOCATE: to_allocate, keys.BIND_PHASE: "allocating", keys.BIND_TIME: "1",
        keys.VGPU_NODE: NODE}}, "spec": {"nodeName": NODE, "containers": containers}, "status": {"phase": "Pending"}}


@pytest.fixture
def setup(short_dir: Path, monkeypatch: pytest.MonkeyPatch):
    devices = short_dir / "devices.yaml"
    devices.write_text(f"devices:\n  - {{uuid: {UUID0}, model: NVIDIA A100, memory: 40960, numa: 0}}\n"
                       f"  - {{uuid: {UUID1}, model: NVIDIA A100, memory: 40960, numa: 1}}\n")
    monkeypatch.setenv("HAMI_OVERRIDE_NVIDIA_DEVICES_FILE", str(devices))
    hook = short_dir / "hook"
    monkeypatch.setenv("HOOK_PATH", str(hook))
    cluster = MemoryCluster(nodes=[{"metadata": {"name": NODE, "annotations": {
        keys.NODE_LOCK: "2025-01-01T00:00:00Z,ml,train"}}}])
    kubelet = FakeKubelet(short_dir / "dp").start()
    pm = get_plugin_manager()
    backend = next(b for b in pm.backends({"nvidia": {"deviceSplitCount": 3, "deviceMemoryScaling": 2,
                                                      "libCudaLogLevel": 1}}) if b.vendor == "nvidia")
    app = DevicePluginApp(pm, backend, cluster, NODE, plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05)
    app.start()
    yield cluster, kubelet, app, str(hook)
    app.stop()
    kubelet.stop()


def test_registers_advertises_and_annotates(setup) -> None:
    _cluster, kubelet, app, _ = setup
    reg = kubelet.next_registration()
    assert (reg.endpoint, reg.resource_name) == ("nvidia-gpu.sock", "nvidia.com/gpu")
    with kubelet.connect(reg.endpoint) as client:
        stream = client.list_and_watch()
        assert [d.ID for d in next(stream).devices] == [f"{UUID0}-{i}" for i in range(3)] + [
            f"{UUID1}-{i}" for i in range(3)]
        stream.cancel()
    assert app.writer.encode(app.server.devices()) == (
        f'[{{"id":"{UUID0}","count":3,"devmem":81920,"devcore":100,"type":"NVIDIA A100","mode":"hami-core",'
        f'"health":true}},{{"id":"{UUID1}","index":1,"count":3,"devmem":81920,"devcore":100,"type":"NVIDIA A100",'
        f'"numa":1,"mode":"hami-core","health":true}}]')


def test_allocate_env_and_mounts_exact(setup) -> None:
    cluster, kubelet, _, hook = setup
    cluster.add_pod(_pod(f"{UUID0},NVIDIA,3000,30:{UUID1},NVIDIA,4000,30:;",
                         [{"name": "main", "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "false"}]}]))
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        (ctr,) = client.allocate([f"{UUID0}-2", f"{UUID1}-0"]).container_responses
    envs = dict(ctr.envs)
    cache = envs.pop("CUDA_DEVICE_MEMORY_SHARED_CACHE")
    assert CACHE.match(cache).group(1) == hook
    assert envs == {"NVIDIA_VISIBLE_DEVICES": f"{UUID0},{UUID1}", "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
                    "CUDA_DEVICE_MEMORY_LIMIT_1": "4000m", "CUDA_DEVICE_SM_LIMIT": "30",
                    "CUDA_OVERSUBSCRIBE": "true", "LIBCUDA_LOG_LEVEL": "1"}
    assert [(m.container_path, m.host_path, m.read_only) for m in ctr.mounts] == [
        (f"{hook}/vgpu/libvgpu.so", f"{hook}/vgpu/libvgpu.so", True),
        (f"{hook}/vgpu", f"{hook}/vgpu/containers/u-1_main", False),
        ("/tmp/vgpulock", "/tmp/vgpulock", False),
        ("/etc/ld.so.preload", f"{hook}/vgpu/ld.so.preload", True)]
    assert Path(hook, "vgpu/containers/u-1_main").is_dir()
    annos = cluster.get_pod("ml", "train")["metadata"]["annotations"]
    assert annos[keys.BIND_PHASE] == "success"
    assert keys.NODE_LOCK not in cluster.get_node(NODE)["metadata"]["annotations"]


def test_two_containers_and_disable_control(setup) -> None:
    cluster, kubelet, _, hook = setup
    Path(hook, "vgpu").mkdir(parents=True)
    Path(hook, f"vgpu/libvgpu.so.{__version__}").write_text("")
    cluster.add_pod(_pod(f"{UUID0},NVIDIA,1000,0:;{UUID1},NVIDIA,2000,50:;",
                         [{"name": "a"}, {"name": "b", "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]}]))
    reg = kubelet.next_registration()
    with kubelet.connect(reg.endpoint) as client:
        a = client.allocate([f"{UUID0}-0"]).container_responses[0]
        assert cluster.get_pod("ml", "train")["metadata"]["annotations"][keys.BIND_PHASE] == "allocating"
        b = client.allocate([f"{UUID1}-1"]).container_responses[0]
    assert dict(a.envs)["NVIDIA_VISIBLE_DEVICES"] == UUID0 and dict(a.envs)["CUDA_DEVICE_SM_LIMIT"] == "0"
    assert dict(b.envs)["NVIDIA_VISIBLE_DEVICES"] == UUID1 and dict(b.envs)["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert a.mounts[0].host_path == f"{hook}/vgpu/libvgpu.so.{__version__}"
    assert [m.container_path for m in a.mounts][-1] == "/etc/ld.so.preload"
    assert "/etc/ld.so.preload" not in [m.container_path for m in b.mounts]
    assert b.mounts[1].host_path == f"{hook}/vgpu/containers/u-1_b"
    assert cluster.get_pod("ml", "train")["metadata"]["annotations"][keys.BIND_PHASE] == "success"
