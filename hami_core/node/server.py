"""The kubelet device-plugin gRPC server for any vendor (spec node.md §1, §2.4).

Lifecycle (§1.4): remove a stale socket, serve ``v1beta1.DevicePlugin`` on ``<plugin dir>/<name>.sock``,
check it answers, then call ``v1beta1.Registration/Register`` on ``kubelet.sock``. Kubelet wipes the
plugin directory when it restarts and re-creates ``kubelet.sock``; :class:`KubeletWatcher` notices the new
socket (a different inode) and the plugin restarts and registers again.

Each physical device is advertised as ``DeviceInfo.count`` replicas ``<id>-<i>``; a health change of
the device re-sends the full list on every open ListAndWatch stream. Allocate accepts only advertised IDs (any
other is ``INVALID_ARGUMENT`` naming it, before the cluster is read) and hands the allocator the device each ID
is a replica of, which must be the booking of the pod it serves (:mod:`hami_core.node.allocate`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from hami_core.node.allocate import AllocateError, Allocator, PreferredRequest
from hami_core.node.deviceplugin.v1beta1 import api_pb2 as pb
from hami_core.node.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import ContainerAllocation, DeviceInfo

log = logging.getLogger("hami.node.server")

API_VERSION = "v1beta1"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
DIAL_TIMEOUT_S = 5.0
#: Only kubelet (root) talks to the plugin: nobody else on the node may connect to the socket.
SOCKET_MODE = 0o600
#: The most device IDs one plugin advertises. Each is ~63 bytes of ListAndWatch: 32,768 is 2 MiB, half of the
#: 4 MiB message limit kubelet's gRPC client applies; past it kubelet would receive nothing at all. Configured
#: split counts are bounded per device (nvidia ``deviceSplitCount`` <= 1024); this also covers counts a vendor
#: reports from the hardware (Enflame DRS capacity, MetaX ``total_dev_count``).
MAX_ADVERTISED_IDS = 32_768


def socket_name(vendor: str, resource_name: str) -> str:
    """``nvidia`` + ``nvidia.com/gpu`` → ``nvidia-gpu.sock``."""
    return f"{vendor}-{resource_name.rsplit('/', 1)[-1]}.sock"


def replica_ids(device: DeviceInfo) -> list[str]:
    return [f"{device.id}-{i}" for i in range(max(device.count, 1))]


def to_response(allocation: ContainerAllocation) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(allocation.env),
        mounts=[pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
                for m in allocation.mounts],
        devices=[pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
                 for d in allocation.devices],
        annotations=dict(allocation.annotations))


class DevicePluginServer(pb_grpc.DevicePluginServicer):
    """Serves one extended resource: ``start()`` serves and registers; ``stop()`` ends streams, removes the socket."""

    def __init__(self, *, resource_name: str, socket_path: str | os.PathLike[str], devices: Sequence[DeviceInfo],
                 allocator: Allocator, kubelet_socket: str | os.PathLike[str] | None = None,
                 numa_topology: bool = False, preferred_allocation: bool = False) -> None:
        self.resource_name = resource_name
        self.socket_path = Path(socket_path)
        self.kubelet_socket = Path(kubelet_socket) if kubelet_socket else None
        self.allocator = allocator
        self.numa_topology = numa_topology
        self.preferred_allocation = preferred_allocation
        self._devices = list(devices)
        total = sum(max(d.count, 1) for d in self._devices)
        if total > MAX_ADVERTISED_IDS:
            raise HamiError(f"{resource_name}: {len(self._devices)} devices would advertise {total} device IDs "
                            f"(replicas), more than the {MAX_ADVERTISED_IDS} that fit in one ListAndWatch message "
                            f"kubelet accepts; lower the split count (deviceSplitCount or the vendor's equivalent)")
        #: every advertised ID → the physical device it is a replica of: kubelet may only Allocate these
        self._replicas = {rid: d.id for d in self._devices for rid in replica_ids(d)}
        self._health = {d.id: True for d in self._devices}
        self._changed = threading.Condition()
        self._version = 0
        self._stopped = threading.Event()
        self._server: grpc.Server | None = None

    # ------------------------------------------------------------------------------------ health
    def set_health(self, device_id: str, healthy: bool) -> None:
        """Mark a physical device (and so every replica) healthy or not; open streams re-send the list."""
        with self._changed:
            if self._health.get(device_id) == healthy:
                return
            self._health[device_id] = healthy
            self._version += 1
            self._changed.notify_all()
        log.warning("device %s is now %s", device_id, HEALTHY if healthy else UNHEALTHY)

    def health(self, device_id: str) -> bool:
        return self._health.get(device_id, False)

    def devices(self) -> list[DeviceInfo]:
        """The served devices with their current health (for the registration writer)."""
        from dataclasses import replace

        return [replace(d, health=self.health(d.id)) for d in self._devices]

    def device_list(self) -> list[Any]:
        out = []
        for d in self._devices:
            health = HEALTHY if self.health(d.id) else UNHEALTHY
            topology = pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa)]) if self.numa_topology else None
            out.extend(pb.Device(ID=i, health=health, topology=topology) for i in replica_ids(d))
        return out

    # ------------------------------------------------------------------------------------ RPCs
    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        # HAMi always answers true here whatever it registered with; kubelet follows this answer.
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: Any, context: Any) -> Any:
        with self._changed:
            seen = self._version
        yield pb.ListAndWatchResponse(devices=self.device_list())
        while not self._stopped.is_set() and context.is_active():
            with self._changed:
                self._changed.wait(0.2)
                if self._version == seen:
                    continue
                seen = self._version
            yield pb.ListAndWatchResponse(devices=self.device_list())

    def physical_id(self, device_id: str) -> str:
        """The physical device an advertised ID is a replica of (the ID itself when it is not advertised)."""
        return self._replicas.get(device_id, device_id)

    def unknown_ids(self, requests: Sequence[Sequence[str]]) -> str | None:
        """Why kubelet's IDs are not a plausible request of this plugin's devices, or None: an ID it never
        advertised, or one ID twice in a container (kubelet hands each replica to one container at a time)."""
        if not requests:
            return "Allocate without any container request"
        for k, ids in enumerate(requests):
            if not ids:
                return f"container request {k} names no device ID"
            for device_id in ids:
                if device_id not in self._replicas:
                    return (f"unknown device ID {device_id!r} in container request {k}: not one of the "
                            f"{len(self._replicas)} IDs this plugin advertises for {self.resource_name}")
            if len(set(ids)) != len(ids):
                twice = next(i for i in ids if list(ids).count(i) > 1)
                return f"device ID {twice!r} is listed twice in container request {k}"
        return None

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        reqs = [PreferredRequest(tuple(r.available_deviceIDs), tuple(r.must_include_deviceIDs), r.allocation_size)
                for r in request.container_requests]
        answers = self.allocator.preferred(reqs, device_of=self.physical_id)
        return pb.PreferredAllocationResponse(container_responses=[
            pb.ContainerPreferredAllocationResponse(deviceIDs=ids) for ids in answers if ids is not None])

    def Allocate(self, request: Any, context: Any) -> Any:
        requests = [list(r.devices_ids) for r in request.container_requests]
        invalid = self.unknown_ids(requests)
        if invalid is not None:  # checked before any pod is looked up: nothing is read or written
            log.error("Allocate refused: %s", invalid)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, invalid)
        try:
            allocations = self.allocator.allocate(requests, device_of=self.physical_id)
        except AllocateError as exc:
            log.error("Allocate: %s", exc)
            context.abort(grpc.StatusCode.UNKNOWN, str(exc))
        except Exception as exc:
            log.exception("Allocate failed")
            context.abort(grpc.StatusCode.INTERNAL, f"allocate failed: {exc}")
        return pb.AllocateResponse(container_responses=[to_response(a) for a in allocations])

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return pb.PreStartContainerResponse()

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self, *, register: bool = True) -> None:
        """Serve on the socket, check it answers, then register with kubelet (if a kubelet socket is set and
        ``register``)."""
        self._stopped.clear()
        self.socket_path.parent.mkdir(mode=0o750, parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=16, thread_name_prefix="hami-dp"))
        pb_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        try:
            # gRPC binds with the process umask (often 0755); connecting needs write permission, so 0600 keeps
            # every non-root user away from Allocate. Done before registering, so kubelet never sees it open.
            os.chmod(self.socket_path, SOCKET_MODE)
        except OSError:
            self.stop()
            raise
        with grpc.insecure_channel(f"unix://{self.socket_path}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=DIAL_TIMEOUT_S)
            except grpc.FutureTimeoutError:
                self.stop()
                raise OSError(f"device plugin socket {self.socket_path} does not answer") from None
        if self.kubelet_socket is not None and register:
            try:
                self.register()
            except Exception:
                self.stop()
                raise
        log.info("serving %s on %s (%d devices)", self.resource_name, self.socket_path, len(self._devices))

    def register(self) -> None:
        """``Register`` with kubelet: version v1beta1, endpoint = our socket's file name."""
        assert self.kubelet_socket is not None
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            stub = pb_grpc.RegistrationStub(channel)
            stub.Register(pb.RegisterRequest(
                version=API_VERSION, endpoint=self.socket_path.name, resource_name=self.resource_name,
                options=pb.DevicePluginOptions(pre_start_required=False,
                                               get_preferred_allocation_available=self.preferred_allocation)),
                timeout=DIAL_TIMEOUT_S, wait_for_ready=True)
        log.info("registered %s with kubelet at %s", self.resource_name, self.kubelet_socket)

    def stop(self) -> None:
        """End ListAndWatch streams, stop the server, remove the socket. Safe to call twice."""
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()
        server, self._server = self._server, None
        if server is not None:
            server.stop(grace=0.5).wait(2.0)
        self.socket_path.unlink(missing_ok=True)


def _identity(path: Path) -> tuple[int, int, int] | None:
    # The inode number alone is not enough: a re-created socket often gets the freed inode back.
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


class KubeletWatcher:
    """Calls ``on_restart`` when ``kubelet.sock`` is (re-)created, i.e. a different file than last seen.

    Polls ``stat`` (portable, no inotify dependency); kubelet's restart takes far longer than ``interval_s``.
    """

    def __init__(self, kubelet_socket: str | os.PathLike[str], on_restart: Any, *, interval_s: float = 1.0) -> None:
        self.path = Path(kubelet_socket)
        self.on_restart = on_restart
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._seen = _identity(self.path)
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """One poll; True if a new socket appeared and ``on_restart`` was called."""
        now = _identity(self.path)
        if now is None or now == self._seen:
            if now is None:
                self._seen = None
            return False
        log.warning("%s re-created: kubelet restarted; restarting the device plugin", self.path)
        try:
            self.on_restart()
        except Exception:
            log.exception("restart after kubelet restart failed; retrying at the next poll")
            return False
        self._seen = now
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hami-kubelet-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.check()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
