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


# --------------------------------------------------------------------------------------------- DRA (issue 30)
# The DRA side of kubelet: its plugin watcher dials a driver's registration socket, asks GetInfo, checks the type
# and version, connects to the endpoint, reports NotifyRegistrationStatus, and then calls NodePrepareResources /
# NodeUnprepareResources there, all over the real protocol.

#: What kubelet (1.34+) accepts from a DRA driver's GetInfo.
DRA_PLUGIN_TYPE = "DRAPlugin"
DRA_SERVICE = "v1.DRAPlugin"


class DraRegistrationError(Exception):
    """What kubelet would refuse the plugin for (also reported to it by NotifyRegistrationStatus)."""


class DraKubelet:
    """Kubelet's view of one DRA driver: :meth:`register` through its ``-reg.sock``, then prepare/unprepare."""

    def __init__(self, registration_socket: str | Path) -> None:
        from hami_core.dra.kubelet.registration import api_pb2_grpc as reg_grpc

        self.registration_socket = Path(registration_socket)
        self._reg_channel = grpc.insecure_channel(f"unix://{self.registration_socket}")
        self._reg = reg_grpc.RegistrationStub(self._reg_channel)
        self.info: Any = None
        self._channel: grpc.Channel | None = None
        self._stub: Any = None

    def __enter__(self) -> DraKubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._reg_channel.close()
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def register(self, driver: str | None = None) -> Any:
        """GetInfo, check it as kubelet does, connect to the endpoint, and NotifyRegistrationStatus: True, or False
        with the reason (then :class:`DraRegistrationError`). Returns the PluginInfo."""
        from hami_core.dra.kubelet.registration import api_pb2 as reg_pb
        from hami_core.dra.kubelet.v1 import api_pb2_grpc as dra_grpc

        info = self._reg.GetInfo(reg_pb.InfoRequest(), timeout=5)
        problem = ""
        if info.type != DRA_PLUGIN_TYPE:
            problem = f"plugin type {info.type!r}, expected {DRA_PLUGIN_TYPE!r}"
        elif driver is not None and info.name != driver:
            problem = f"plugin name {info.name!r}, expected {driver!r}"
        elif DRA_SERVICE not in info.supported_versions:
            problem = f"supported versions {list(info.supported_versions)} lack {DRA_SERVICE}"
        elif not Path(info.endpoint).is_absolute():
            problem = f"endpoint {info.endpoint!r} is not an absolute path"
        if problem:
            self._reg.NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=False, error=problem),
                                               timeout=5)
            raise DraRegistrationError(problem)
        self.info = info
        self._channel = grpc.insecure_channel(f"unix://{info.endpoint}")
        grpc.channel_ready_future(self._channel).result(timeout=5)
        self._stub = dra_grpc.DRAPluginStub(self._channel)
        self._reg.NotifyRegistrationStatus(reg_pb.RegistrationStatus(plugin_registered=True), timeout=5)
        return info

    @staticmethod
    def _claims(claims: list[tuple[str, str, str]]) -> list[Any]:
        from hami_core.dra.kubelet.v1 import api_pb2 as dra_pb

        return [dra_pb.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in claims]

    def prepare(self, *claims: tuple[str, str, str]) -> Any:
        """NodePrepareResources for ``(namespace, name, uid)`` claims; the response (``.claims[uid]``)."""
        from hami_core.dra.kubelet.v1 import api_pb2 as dra_pb

        if self._stub is None:
            raise DraRegistrationError("not registered")
        return self._stub.NodePrepareResources(dra_pb.NodePrepareResourcesRequest(claims=self._claims(list(claims))),
                                               timeout=10)

    def unprepare(self, *claims: tuple[str, str, str]) -> Any:
        """NodeUnprepareResources for ``(namespace, name, uid)`` claims; the response."""
        from hami_core.dra.kubelet.v1 import api_pb2 as dra_pb

        if self._stub is None:
            raise DraRegistrationError("not registered")
        return self._stub.NodeUnprepareResources(
            dra_pb.NodeUnprepareResourcesRequest(claims=self._claims(list(claims))), timeout=10)
