"""``hami dra-driver``'s engine: this node's devices, described by the vendor plugins, published as ResourceSlices.

Devices come through the same node-side hooks the device plugin uses: :func:`hami_discover_devices` (NVML for
NVIDIA, fake devices from ``HAMI_OVERRIDE_<VENDOR>_DEVICES_FILE``) inside the node context, and
:func:`hami_watch_health` for health changes. A backend that discovers nothing by itself (no plugin implements
discovery) is published from the node's HAMi registration annotation (:func:`hami_node_devices`) when the driver is
told so (``registration=True``). Each backend's devices become :class:`~hami_core.dra.model.DraDevice` objects
through :func:`hami_dra_devices` (the standard description when no plugin answers), and
:func:`hami_core.dra.slices.plan` says what to write.

Keeping the slices current: a pass every ``resync_s`` seconds, and at once when a device's health changes. A pass
lists this node's slices of each driver and writes only a difference (bumping the pool's generation); a failed pass
is retried after ``error_interval_s``.

Shutdown leaves the slices in place, on purpose: a restarting driver (rolling update, crash, node reboot) must not
withdraw devices that running pods hold and that kube-scheduler would otherwise hand out again from nothing; the
new process lists what is published and republishes only what changed (the generation continues from the
published one). Slices go when the Node goes (each slice is owned by its Node, so the garbage collector deletes
them), or with ``hami dra-driver --withdraw`` when a node leaves DRA mode.

The kubelet plugin's seam is :meth:`DraDriver.device` / :meth:`DraDriver.devices`: the current DraDevices of this
node by driver name and device name (what the published slices describe, unhealthy devices included and marked).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami_core.cluster.base import ConflictError, NotFoundError
from hami_core.dra.model import DraDevice, driver_name
from hami_core.dra.slices import Plan, SliceError, plan
from hami_core.plugins.errors import HamiError, WireFormatError
from hami_core.plugins.node_context import NodeContext, bound
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.standard import standard_dra_devices
from hami_core.plugins.types import DeviceBackend, DeviceInfo, HealthWatch

__all__ = ["DEFAULT_RESYNC_S", "ERROR_INTERVAL_S", "BackendDevices", "DraDriver", "describe", "node_slices",
           "withdraw"]

log = logging.getLogger("hami.dra")

DEFAULT_RESYNC_S = 60.0
ERROR_INTERVAL_S = 5.0


def describe(hook: Any, backend: DeviceBackend, devices: Sequence[DeviceInfo]) -> list[DraDevice]:
    """``backend``'s devices as DraDevices: its ``hami_dra_devices`` answer, else the standard description. A
    wrong answer (not DraDevices, another backend's) is a :class:`HamiError` naming the backend's plugin."""
    answer = hook.hami_dra_devices(backend=backend, devices=list(devices))
    if answer is None:
        return standard_dra_devices(backend, devices)
    out = list(answer)
    for item in out:
        if not isinstance(item, DraDevice) or item.backend != backend.name:
            raise HamiError(f"plugin {backend.plugin or '?'}: hami_dra_devices for backend {backend.name} returned "
                            f"{item!r}, expected a DraDevice of backend {backend.name}")
    return out


def node_slices(pm: Any, backends: Sequence[DeviceBackend], node: Mapping[str, Any], *,
                generation: int = 1) -> list[dict[str, Any]]:
    """The ResourceSlices ``node`` would get from its HAMi registration annotations (``--dry-run``), for every
    backend with devices there, at ``generation``. A malformed registration is a :class:`HamiError` naming the node
    and the annotation."""
    from hami_core.dra.slices import build_slices

    hook = RoutedHooks(pm, backends)
    name = str((node.get("metadata") or {}).get("name") or "")
    out: list[dict[str, Any]] = []
    for backend in backends:
        try:
            infos = hook.hami_node_devices(backend=backend, node=node) or []
        except WireFormatError as exc:
            raise HamiError(f"node {name}: backend {backend.name}: {exc}") from None
        if infos:
            out.extend(build_slices(name, backend.name, describe(hook, backend, infos), generation=generation,
                                    vendor=backend.vendor))
    return out


def withdraw(cluster: Any, node: str, backends: Sequence[DeviceBackend]) -> list[str]:
    """Delete every slice of ``backends``' drivers on ``node`` (a node leaving DRA mode); the names deleted."""
    gone = []
    for backend in backends:
        for item in cluster.list_resource_slices(node=node, driver=driver_name(backend.name)):
            name = item["metadata"]["name"]
            try:
                cluster.delete_resource_slice(name)
            except NotFoundError:
                continue
            gone.append(name)
    return gone


@dataclass
class BackendDevices:
    """One backend on this node: its discovered devices, their health as last reported, its health watch."""

    backend: DeviceBackend
    infos: list[DeviceInfo]
    health: dict[str, bool]
    watch: HealthWatch | None = None

    def current(self) -> list[DeviceInfo]:
        return [replace(d, health=self.health.get(d.id, d.health)) for d in self.infos]


class DraDriver:
    """Publishes ``backends``' devices on ``node_name`` as ResourceSlices and keeps them current.

    :param pm: the plugin manager (vendor plugins loaded).
    :param backends: the backends to publish (one driver and one pool each).
    :param cluster: a cluster with the ResourceSlice calls (:class:`~hami_core.cluster.kube.KubeCluster`,
        :class:`~hami_core.cluster.memory.MemoryCluster`).
    :param registration: publish a backend that no plugin discovers from the node's registration annotation.
    :param resync_s: period of the publication pass; ``error_interval_s`` after a failed one.
    """

    def __init__(self, pm: Any, backends: Sequence[DeviceBackend], cluster: Any, node_name: str, *,
                 registration: bool = False, resync_s: float = DEFAULT_RESYNC_S,
                 error_interval_s: float = ERROR_INTERVAL_S) -> None:
        if not node_name:
            raise HamiError("the DRA driver needs this node's name (--node-name or $NODE_NAME)")
        self.pm = pm
        self.backends = list(backends)
        self.hook = RoutedHooks(pm, self.backends)
        self.cluster = cluster
        self.node_name = node_name
        self.registration = registration
        self.resync_s = resync_s
        self.error_interval_s = error_interval_s
        self.context = NodeContext(node_name, lambda: cluster.pods_on_node(node_name))
        self._lock = threading.Lock()
        self._by_backend: dict[str, BackendDevices] = {}
        self._devices: dict[str, dict[str, DraDevice]] = {}
        #: the last plan written per backend (tests, logs)
        self.last_plans: dict[str, Plan] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._owner: dict[str, Any] | None = None

    # ------------------------------------------------------------------------------------ the kubelet plugin's seam
    def devices(self) -> dict[str, dict[str, DraDevice]]:
        """The current DraDevices of this node: ``{driver name: {device name: DraDevice}}`` (a copy), unhealthy
        devices included (``healthy`` False; they are not published)."""
        with self._lock:
            return {driver: dict(devs) for driver, devs in self._devices.items()}

    def device(self, driver: str, name: str) -> DraDevice | None:
        """The DraDevice published as ``name`` by ``driver`` on this node (``None``: not one of ours)."""
        with self._lock:
            return self._devices.get(driver, {}).get(name)

    def backend_of(self, driver: str) -> DeviceBackend | None:
        """The backend whose driver name is ``driver``."""
        return next((b for b in self.backends if driver_name(b.name) == driver), None)

    # ------------------------------------------------------------------------------------ discovery
    def discover(self) -> None:
        """Ask each backend for its devices (the node-side hooks), then describe them; starts no watch."""
        for backend in self.backends:
            with bound(self.context):
                infos = self.hook.hami_discover_devices(backend=backend)
            if infos is None and self.registration:
                infos = self._registered(backend)
            if infos is None:
                log.warning("backend %s: no plugin discovers its devices; publishing none (use --from-registration "
                            "to publish the node's registration annotation)", backend.name)
                infos = []
            entry = BackendDevices(backend, list(infos), {d.id: d.health for d in infos})
            self._by_backend[backend.name] = entry
        self._refresh()

    def _registered(self, backend: DeviceBackend) -> list[DeviceInfo]:
        node = self.cluster.get_node(self.node_name)
        try:
            return list(self.hook.hami_node_devices(backend=backend, node=node) or [])
        except WireFormatError as exc:
            raise HamiError(f"node {self.node_name}: backend {backend.name}: {exc}") from None

    def _refresh(self) -> None:
        described: dict[str, dict[str, DraDevice]] = {}
        for entry in self._by_backend.values():
            devs = describe(self.hook, entry.backend, entry.current())
            described[driver_name(entry.backend.name)] = {d.name: d for d in devs}
        with self._lock:
            self._devices = described

    def on_health(self, backend: str, device_id: str, healthy: bool) -> None:
        """A health change of one device (``hami_watch_health``'s callback): republish at once."""
        entry = self._by_backend.get(backend)
        if entry is None or device_id not in entry.health:
            log.warning("backend %s: health report for unknown device %r ignored", backend, device_id)
            return
        with self._lock:
            changed = entry.health[device_id] != healthy
            entry.health[device_id] = healthy
        if changed:
            log.info("backend %s: device %s is now %s", backend, device_id, "healthy" if healthy else "unhealthy")
            self._wake.set()

    def _start_watches(self) -> None:
        for entry in self._by_backend.values():
            if not entry.infos:
                continue
            name = entry.backend.name
            callback: Callable[[str, bool], None] = lambda dev, ok, name=name: self.on_health(name, dev, ok)  # noqa: E731
            try:
                with bound(self.context):
                    entry.watch = self.hook.hami_watch_health(backend=entry.backend, devices=list(entry.infos),
                                                              on_health=callback)
            except Exception as exc:  # as the device plugin: health checks off, never down
                log.error("backend %s: the device health watch failed to start (%s: %s); every device stays as "
                          "discovered", name, type(exc).__name__, exc)

    # ------------------------------------------------------------------------------------ publishing
    def _owner_reference(self) -> dict[str, Any] | None:
        if self._owner is None:
            try:
                node = self.cluster.get_node(self.node_name)
            except NotFoundError:
                return None
            uid = (node.get("metadata") or {}).get("uid")
            if not uid:
                return None
            self._owner = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid, "controller": True}
        return self._owner

    def publish(self) -> dict[str, Plan]:
        """One publication pass over every backend: what each wrote (an unchanged backend writes nothing)."""
        self._refresh()
        owner = self._owner_reference()
        plans = {}
        for entry in self._by_backend.values():
            backend = entry.backend
            driver = driver_name(backend.name)
            with self._lock:
                devices = list(self._devices.get(driver, {}).values())
            existing = self.cluster.list_resource_slices(node=self.node_name, driver=driver)
            result = plan(self.node_name, backend.name, devices, existing, vendor=backend.vendor)
            for item in [*result.create, *result.update]:
                if owner is not None:
                    item["metadata"]["ownerReferences"] = [dict(owner)]
            for item in result.update:
                self.cluster.update_resource_slice(item)
            for item in result.create:
                self.cluster.create_resource_slice(item)
            for name in result.delete:
                with contextlib.suppress(NotFoundError):
                    self.cluster.delete_resource_slice(name)
            if result.changed:
                healthy = sum(1 for d in devices if d.healthy)
                log.info("node %s: %s pool at generation %d: %d of %d devices published", self.node_name, driver,
                         result.generation, healthy, len(devices))
            plans[backend.name] = result
            self.last_plans[backend.name] = result
        return plans

    def run(self, stop: threading.Event | None = None) -> None:
        """Publish until ``stop`` (or :meth:`stop`): every ``resync_s``, at once on a health change."""
        stop = stop or self._stop
        while not stop.is_set() and not self._stop.is_set():
            try:
                self.publish()
                wait = self.resync_s
            except (SliceError, ConflictError, HamiError) as exc:
                log.warning("node %s: publishing ResourceSlices failed: %s; retrying in %.0f s", self.node_name, exc,
                            self.error_interval_s)
                wait = self.error_interval_s
            except Exception as exc:  # a vendor bug or a transport failure must not end the node component
                log.error("node %s: publishing ResourceSlices failed: %s: %s; retrying in %.0f s", self.node_name,
                          type(exc).__name__, exc, self.error_interval_s)
                wait = self.error_interval_s
            self._wake.wait(wait)
            self._wake.clear()

    def start(self) -> DraDriver:
        """Discover, start the health watches and the publication thread."""
        self.discover()
        self._start_watches()
        self._stop.clear()
        self._thread = threading.Thread(target=self.run, name="hami-dra-publish", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the watches and the publication thread; the published slices stay (module docstring)."""
        self._stop.set()
        self._wake.set()
        for entry in self._by_backend.values():
            watch, entry.watch = entry.watch, None
            if watch is not None:
                try:
                    watch.stop()
                except Exception as exc:
                    log.error("backend %s: stopping the health watch failed: %s", entry.backend.name, exc)
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
