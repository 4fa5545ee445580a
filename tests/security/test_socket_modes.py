"""The device-plugin socket is 0600 (kubelet is root; nobody else may call Allocate), also after a kubelet
restart re-creates it, whatever the process umask."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_core.node.allocate import Allocator
from hami_core.node.server import SOCKET_MODE, DevicePluginServer
from hami_core.plugins.types import DeviceBackend, DeviceInfo, ResourceNames
from hami_core.testing.fake_kubelet import FakeKubelet

BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"))


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hsm", dir="/tmp"))  # unix socket paths are limited to ~107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _mode(path: Path) -> int:
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode)
    return stat.S_IMODE(st.st_mode)


def test_socket_is_owner_only_even_with_a_permissive_umask(plugin_dir: Path) -> None:
    kubelet = FakeKubelet(plugin_dir).start()
    server = DevicePluginServer(resource_name="acme.com/gpu", socket_path=plugin_dir / "acme-gpu.sock",
                                devices=[DeviceInfo(id="GPU-a", count=1, devmem=1, devcore=100, type="ACME")],
                                allocator=Allocator(None, "n", BACKEND, lambda *a: None),  # type: ignore[arg-type]
                                kubelet_socket=kubelet.socket)
    old = os.umask(0)  # the worst case: without the chmod the socket would be 0777
    try:
        server.start()
        assert SOCKET_MODE == 0o600 and _mode(server.socket_path) == 0o600
        assert kubelet.next_registration().endpoint == "acme-gpu.sock"
        kubelet.restart()  # wipes the plugin's socket, as kubelet does
        server.stop()
        server.start()
        assert _mode(server.socket_path) == 0o600
    finally:
        os.umask(old)
        server.stop()
        kubelet.stop()
    assert not server.socket_path.exists()
