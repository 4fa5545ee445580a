"""How many device IDs one plugin may advertise: ListAndWatch is one gRPC message and kubelet drops a message
over 4 MiB, so a plugin whose replicas would not fit refuses to start (naming the resource and the count) instead
of registering and leaving kubelet with no devices at all. Counts reported by hardware (not only configured split
counts, which the vendor configs bound) meet the same limit."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.allocate import Allocator
from hami_core.node.server import MAX_ADVERTISED_IDS, DevicePluginServer
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import DeviceBackend, DeviceInfo, ResourceNames
from hami_core.testing.fake_kubelet import PluginClient
from hami_core.wire import keys

RESOURCE = "acme.com/gpu"
BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames(RESOURCE),
                        to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE, lock_annotation=keys.NODE_LOCK)
#: kubelet's gRPC client default (grpc.max_receive_message_length)
KUBELET_MAX_MESSAGE = 4 * 1024 * 1024


def _devices(n: int, count: int) -> list[DeviceInfo]:
    # 36-character UUIDs, the longest IDs the vendors use
    return [DeviceInfo(id=f"GPU-{i:08x}-0000-1111-2222-333344445555", index=i, count=count, devmem=16000,
                       devcore=100, type="ACME-X", health=True) for i in range(n)]


@pytest.fixture()
def sock_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hadv", dir="/tmp"))  # unix socket paths must stay short
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _server(sock_dir: Path, devices: list[DeviceInfo]) -> DevicePluginServer:
    allocator = Allocator(MemoryCluster(), "n", BACKEND, lambda *a: None)
    return DevicePluginServer(resource_name=RESOURCE, socket_path=sock_dir / "acme.sock", devices=devices,
                              allocator=allocator)


def test_a_hardware_count_past_the_bound_is_refused_with_the_resource_named(sock_dir: Path) -> None:
    with pytest.raises(HamiError) as err:
        _server(sock_dir, _devices(1, 3_000_000))
    message = str(err.value)
    assert RESOURCE in message and "3000000 device IDs" in message and str(MAX_ADVERTISED_IDS) in message
    assert not (sock_dir / "acme.sock").exists()   # refused before serving anything


def test_the_largest_allowed_list_reaches_a_kubelet_over_grpc(sock_dir: Path) -> None:
    devices = _devices(16, MAX_ADVERTISED_IDS // 16)
    server = _server(sock_dir, devices)
    server.start(register=False)
    try:
        with PluginClient(server.socket_path) as client:
            stream = client.list_and_watch()
            first = next(stream)
            stream.cancel()
        assert len(first.devices) == MAX_ADVERTISED_IDS
        assert first.ByteSize() < KUBELET_MAX_MESSAGE / 2
    finally:
        server.stop()
