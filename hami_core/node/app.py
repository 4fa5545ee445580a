"""Wiring for ``hami device-plugin``: discover through the vendor hook, serve, register, watch kubelet and health."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hami_core.cluster.base import Cluster
from hami_core.node.allocate import Allocator
from hami_core.node.register import RegistrationWriter
from hami_core.node.server import KUBELET_SOCKET, DevicePluginServer, KubeletWatcher, socket_name
from hami_core.plugins.errors import HamiError
from hami_core.plugins.node_context import NodeContext, bound
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.types import ContainerAllocation, ContainerDevice, DeviceBackend, HealthWatch
from hami_core.wire import keys

log = logging.getLogger("hami.node")

#: NodeContext.state keys a backend's ``hami_discover_devices`` may set to choose, for this node, whether kubelet
#: gets each device's NUMA node (TopologyInfo) and whether the plugin registers GetPreferredAllocation.
NUMA_TOPOLOGY_STATE = "node.numa_topology"
PREFERRED_ALLOCATION_STATE = "node.preferred_allocation"


class DevicePluginApp:
    """One vendor backend on one node: the gRPC server, the register loop, the kubelet and health watchers."""

    def __init__(self, pm: Any, backend: DeviceBackend, cluster: Cluster, node_name: str, *,
                 plugin_dir: str | Path, kubelet_socket: str | Path | None = None,
                 register_interval_s: float = 30.0, watch_interval_s: float = 1.0) -> None:
        self.pm = pm
        self.backend = backend
        #: ``pm.hook`` with this backend's hooks routed to it alone
        self.hook = RoutedHooks(pm, [backend])
        self.cluster = cluster
        self.node_name = node_name
        plugin_dir = Path(plugin_dir)
        self.kubelet_socket = Path(kubelet_socket) if kubelet_socket else plugin_dir / KUBELET_SOCKET
        #: Bound around every node-side hook call (see :mod:`hami_core.plugins.node_context`).
        self.context = NodeContext(node_name, lambda: cluster.pods_on_node(node_name))
        with bound(self.context):
            devices = self.hook.hami_discover_devices(backend=backend)
        if devices is None:
            raise HamiError(f"no plugin implements hami_discover_devices for backend {backend.name}")
        self.devices = list(devices)
        self._device_ids = frozenset(d.id for d in self.devices)
        allocator = Allocator(cluster, node_name, backend, self._allocate)
        cfg = backend.config
        # Discovery may decide these for this node only (NVIDIA: its per-node config.json) by leaving them in the
        # context's state; otherwise the backend config's enable_numa_topology, and no preferred allocation.
        state = self.context.state
        self.server = DevicePluginServer(
            resource_name=backend.resource_names.count,
            socket_path=plugin_dir / socket_name(backend.vendor, backend.resource_names.count),
            devices=self.devices, allocator=allocator, kubelet_socket=self.kubelet_socket,
            numa_topology=bool(state.get(NUMA_TOPOLOGY_STATE, getattr(cfg, "enable_numa_topology", False))),
            preferred_allocation=bool(state.get(PREFERRED_ALLOCATION_STATE, False)))
        self.writer = RegistrationWriter(cluster, node_name, backend.register_annotation or keys.NODE_NVIDIA_REGISTER)
        self.watcher = KubeletWatcher(self.kubelet_socket, self.restart, interval_s=watch_interval_s)
        self.register_interval_s = register_interval_s
        #: The vendor's running health watch (``hami_watch_health``), ``None`` when there is none.
        self.health_watch: HealthWatch | None = None
        self._health_started = False
        self._stop = threading.Event()
        # Set on a health change so the register loop writes the new health at once, not up to 30 s later:
        # until then the scheduler would keep placing pods on a device kubelet already refuses.
        self._register_now = threading.Event()
        self._threads: list[threading.Thread] = []

    def _allocate(self, pod: Mapping[str, Any], index: int,
                  devices: Sequence[ContainerDevice]) -> ContainerAllocation | None:
        with bound(self.context):
            return self.hook.hami_allocate(backend=self.backend, pod=pod, container_index=index, devices=devices)

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
        self._start_health_watch()
        t = threading.Thread(target=self.writer.run, args=(self.server.devices, self._stop),
                             kwargs={"interval_s": self.register_interval_s, "wake": self._register_now},
                             name="hami-register", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        self._register_now.set()
        watch, self.health_watch = self.health_watch, None
        if watch is not None:
            try:
                watch.stop()
            except Exception as exc:  # a vendor bug must not keep the socket and the other threads alive
                log.error("backend %s: stopping the health watch failed: %s", self.backend.name, exc)
        self.watcher.stop()
        self.server.stop()
        for t in self._threads:
            t.join(5.0)

    # ------------------------------------------------------------------------------------ health
    def _on_health(self, device_id: str, healthy: bool) -> None:
        """``on_health`` of ``hami_watch_health``: kubelet's list and the registration follow the device."""
        if device_id not in self._device_ids:
            # A vendor bug; advertising it would put a device kubelet never saw into the registration.
            log.warning("backend %s: health report for unknown device %r ignored", self.backend.name, device_id)
            return
        self.server.set_health(device_id, healthy)
        self._register_now.set()

    def _start_health_watch(self) -> None:
        """Ask the vendor for a health watch, once. Any failure leaves the devices Healthy and the plugin serving."""
        if self._health_started or not self.devices:
            return
        self._health_started = True
        name = self.backend.name
        try:
            with bound(self.context):
                watch = self.hook.hami_watch_health(backend=self.backend, devices=list(self.devices),
                                                      on_health=self._on_health)
        except Exception as exc:
            log.error("backend %s: the device health watch failed to start (%s: %s); serving with health "
                      "checks off, every device stays Healthy", name, type(exc).__name__, exc)
            log.debug("health watch start failure", exc_info=True)
            return
        if watch is None:
            log.info("backend %s: no device health watch; every device stays Healthy", name)
            return
        if not callable(getattr(watch, "stop", None)):
            log.error("backend %s: hami_watch_health returned %r, which has no stop(); it cannot be stopped",
                      name, watch)
            return
        self.health_watch = watch
        log.info("backend %s: watching the health of %d devices", name, len(self.devices))
