"""deviceSplitCount at its bound over real gRPC: a node of 16 GPUs advertises 16 x 1024 replicas and the kubelet
(here its stand-in, with gRPC's default 4 MiB receive limit) gets every one of them in one ListAndWatch message.
Without the bound, 3,000,000 replicas made a message the kubelet refused, so it saw no device at all; with it,
such a config fails start-up naming the field (test_config.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.node.fake_kubelet import FakeKubelet
from hami_core.plugins.manager import get_plugin_manager
from hami_nvidia.config import MAX_DEVICE_SPLIT_COUNT

NODE = "gpu-node"
GPUS = 16
GRPC_DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hns", dir="/tmp"))  # unix socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_list_and_watch_at_the_split_bound_fits_grpcs_default_limit(short_dir: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    devices = short_dir / "devices.yaml"
    devices.write_text("devices:\n" + "".join(
        f"  - {{uuid: GPU-{i:08x}-0000-1111-2222-333344445555, model: NVIDIA H100, memory: 81559, numa: 1}}\n"
        for i in range(GPUS)))
    monkeypatch.setenv("HAMI_OVERRIDE_NVIDIA_DEVICES_FILE", str(devices))
    monkeypatch.setenv("HOOK_PATH", str(short_dir / "hook"))
    cluster = MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE, "annotations": {}}}])
    kubelet = FakeKubelet(short_dir / "dp").start()
    pm = get_plugin_manager()
    backend = next(b for b in pm.backends({"nvidia": {"deviceSplitCount": MAX_DEVICE_SPLIT_COUNT,
                                                      "enableNumaTopology": True}}) if b.vendor == "nvidia")
    app = DevicePluginApp(pm, backend, cluster, NODE, plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05)
    app.start()
    try:
        reg = kubelet.next_registration()
        with kubelet.connect(reg.endpoint) as client:
            stream = client.list_and_watch()
            first = next(stream)
            stream.cancel()
    finally:
        app.stop()
        kubelet.stop()
    assert len(first.devices) == GPUS * MAX_DEVICE_SPLIT_COUNT
    assert len({d.ID for d in first.devices}) == GPUS * MAX_DEVICE_SPLIT_COUNT
    # well inside the limit: a node could hold four times as many GPUs at this split count
    assert first.ByteSize() < GRPC_DEFAULT_MAX_MESSAGE / 3, first.ByteSize()
