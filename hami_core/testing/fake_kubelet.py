"""A fake kubelet for tests and demos: the real ``v1beta1.Registration`` service on a unix socket, and a
client of a plugin's socket (what kubelet does after a plugin registers).

Part of the test kit, not of the device plugin: it needs the ``node`` extra (grpcio, protobuf), so nothing in
:mod:`hami_core.testing` imports it; a test that drives a device plugin imports it itself.
"""

from __future__ import annotations

import queue
import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from hami_core.node.deviceplugin.v1beta1 import api_pb2 as pb
from hami_core.node.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc


@contextmanager
def running_kubelet(prefix: str = "hk") -> Iterator[FakeKubelet]:
    """A started :class:`FakeKubelet` in a fresh directory under ``/tmp`` (a unix socket path must stay under
    ~107 bytes, longer than pytest's ``tmp_path`` allows), stopped and removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    kubelet = FakeKubelet(path).start()
    try:
        yield kubelet
    finally:
        kubelet.stop()
        shutil.rmtree(path, ignore_errors=True)


class FakeKubelet(pb_grpc.RegistrationServicer):
    """Serves ``Register`` on ``<plugin_dir>/kubelet.sock``; registrations land in :attr:`registrations`."""

    def __init__(self, plugin_dir: str | Path) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.socket = self.plugin_dir / "kubelet.sock"
        self.registrations: queue.Queue[Any] = queue.Queue()
        self._server: grpc.Server | None = None

    def Register(self, request: Any, context: Any) -> Any:  # gRPC method name
        self.registrations.put(request)
        return pb.Empty()

    def start(self) -> FakeKubelet:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(2.0)
            self._server = None
        self.socket.unlink(missing_ok=True)

    def restart(self) -> None:
        """What kubelet does on start: wipe the directory's sockets and create a new ``kubelet.sock``."""
        self.stop()
        for sock in self.plugin_dir.glob("*.sock"):
            sock.unlink(missing_ok=True)
        self.start()

    def next_registration(self, timeout: float = 5.0) -> Any:
        return self.registrations.get(timeout=timeout)

    def connect(self, endpoint: str) -> PluginClient:
        """A client of the plugin that registered with ``endpoint`` (a socket file name in the plugin dir)."""
        return PluginClient(self.plugin_dir / endpoint)


class PluginClient:
    """A ``v1beta1.DevicePlugin`` client over a unix socket; use as a context manager."""

    def __init__(self, socket: str | Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.stub = pb_grpc.DevicePluginStub(self.channel)

    def __enter__(self) -> PluginClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def options(self) -> Any:
        return self.stub.GetDevicePluginOptions(pb.Empty(), timeout=5)

    def list_and_watch(self) -> Any:
        """The server stream; call ``.cancel()`` on it when done."""
        return self.stub.ListAndWatch(pb.Empty())

    def allocate(self, *containers: list[str]) -> Any:
        return self.stub.Allocate(pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=ids) for ids in containers]), timeout=10)

    def preferred(self, available: list[str], must_include: list[str], size: int) -> Any:
        return self.stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
            pb.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=must_include,
                                                   allocation_size=size)]), timeout=5)

    def pre_start(self, ids: list[str]) -> Any:
        return self.stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=ids), timeout=5)
