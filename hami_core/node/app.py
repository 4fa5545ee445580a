"""Wiring for ``hami device-plugin``: discover through the vendor hook, serve, register, watch kubelet."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from hami_core.cluster.base import Cluster
from hami_core.node.allocate import Allocator
from hami_core.node.register import RegistrationWriter
from hami_core.node.server import KUBELET_SOCKET, DevicePluginServer, KubeletWatcher, socket_name
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import DeviceBackend
from hami_core.wire import keys

log = logging.getLogger("hami.node")


class DevicePluginApp:
    """One vendor backend on one node: the gRPC server, the register loop and the kubelet watcher."""

    def __init__(self, pm: Any, backend: DeviceBackend, cluster: Cluster, node_name: str, *,
                 plugin_dir: str | Path, kubelet_socket: str | Path | None = None,
                 register_interval_s: float = 30.0, watch_interval_s: float = 1.0) -> None:
        self.pm = pm
        self.backend = backend
        self.cluster = cluster
        self.node_name = node_name
        plugin_dir = Path(plugin_dir)
        self.kubelet_socket = Path(kubelet_socket) if kubelet_socket else plugin_dir / KUBELET_SOCKET
        devices = pm.hook.hami_discover_devices(backend=backend)
        if devices is None:
            raise HamiError(f"no plugin implements hami_discover_devices for backend {backend.name}")
        self.devices = list(devices)
        allocator = Allocator(cluster, node_name, backend, lambda pod, index, devs: pm.hook.hami_allocate(
            backend=backend, pod=pod, container_index=index, devices=devs))
        cfg = backend.config
        self.server = DevicePluginServer(
            resource_name=backend.resource_names.count,
            socket_path=plugin_dir / socket_name(backend.vendor, backend.resource_names.count),
            devices=self.devices, allocator=allocator, kubelet_socket=self.kubelet_socket,
            numa_topology=bool(getattr(cfg, "enable_numa_topology", False)))
        self.writer = RegistrationWriter(cluster, node_name, backend.register_annotation or keys.NODE_NVIDIA_REGISTER)
        self.watcher = KubeletWatcher(self.kubelet_socket, self.restart, interval_s=watch_interval_s)
        self.register_interval_s = register_interval_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def restart(self) -> None:
        self.server.stop()
        self.server.start()

    def start(self) -> None:
        if not self.devices:
            log.warning("backend %s: no devices on node %s; serving nothing", self.backend.name, self.node_name)
        elif not self.kubelet_socket.exists():
            # kubelet is not up yet (node boot, kubelet restart): serve now and register as soon as it creates
            # its socket (the watcher sees a new kubelet.sock) instead of failing the pod into a restart loop.
            log.warning("%s does not exist yet; registering when kubelet creates it", self.kubelet_socket)
            self.server.start(register=False)
        else:
            self.server.start()
        self.watcher.start()
        t = threading.Thread(target=self.writer.run, args=(self.server.devices, self._stop),
                             kwargs={"interval_s": self.register_interval_s}, name="hami-register", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self.watcher.stop()
        self.server.stop()
        for t in self._threads:
            t.join(5.0)
