"""The engine's view of one node: its registered devices, what is booked on them, and node-wide sums."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, DeviceInfo, DeviceUsage, UsageTotals
from hami_core.wire.quantity import parse_quantity

if TYPE_CHECKING:
    from hami_core.engine.table import NodeTable


class NodeState:
    """One node: devices per backend with their usage, kept current by the ledger (implements NodeView).

    Node-wide sums are maintained incrementally so the default node score is O(1) per node.
    ``generation`` changes whenever usage or devices change (for caches keyed on node state).
    """

    __slots__ = ("allocatable", "annotations", "by_uuid", "capacity", "devices", "errors", "generation",
                 "host_total", "host_used", "infos", "labels", "mig", "name", "order_cache", "quarantine",
                 "reason_cache", "registration", "row", "sum_used", "sum_usedcores", "sum_usedmem", "table",
                 "tot_core", "tot_count", "tot_mem", "types", "unschedulable")

    def __init__(self, name: str) -> None:
        self.name = name
        self.annotations: Mapping[str, str] = {}
        self.labels: Mapping[str, str] = {}
        self.allocatable: Mapping[str, str] = {}
        self.capacity: Mapping[str, str] = {}
        self.unschedulable = False
        self.devices: dict[str, list[DeviceUsage]] = {}
        #: what :meth:`set_devices` was last given (backend → registered devices)
        self.infos: Mapping[str, list[DeviceInfo]] = {}
        #: (node content the registrations were read from, backend → what was read); see Engine.upsert_node
        self.registration: tuple[Any, dict[str, Any]] | None = None
        self.by_uuid: dict[str, DeviceUsage] = {}
        #: pod key → why its allocation could not be read; a quarantined node takes no new pods.
        self.quarantine: dict[str, str] = {}
        #: backend → last registration error (the previous devices are kept).
        self.errors: dict[str, str] = {}
        #: backend → the device types registered (device scores count a request only on an equal type).
        self.types: dict[str, frozenset[str]] = {}
        #: backends with a MIG-mode device (the device-count pre-check does not apply to them).
        self.mig: frozenset[str] = frozenset()
        #: (backend, policy key) → (generation, devices in policy order); valid while generation matches.
        self.order_cache: dict[tuple[object, ...], tuple[int, list[DeviceUsage]]] = {}
        #: request shape → (generation, why this node rejected it); see Engine._explain.
        self.reason_cache: dict[tuple[object, ...], tuple[int, str]] = {}
        self.generation = 0
        #: The node's row in the engine's :class:`~hami_core.engine.table.NodeTable` (set when added).
        self.row = -1
        self.table: NodeTable | None = None
        self.sum_used = self.sum_usedmem = self.sum_usedcores = 0
        self.tot_count = self.tot_mem = self.tot_core = 0
        #: Allocatable CPU (milli) and memory (MiB) from the Node (inf when not given), and what the pods
        #: the engine knows of request there.
        self.host_total = (math.inf, math.inf)
        self.host_used = [0, 0]

    def update_object(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        self.annotations = dict(meta.get("annotations") or {})
        self.labels = dict(meta.get("labels") or {})
        self.allocatable = dict(status.get("allocatable") or {})
        self.capacity = dict(status.get("capacity") or {})
        self.unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        total = (_quantity(self.allocatable.get("cpu"), 1 / 1000), _quantity(self.allocatable.get("memory"), 1 << 20))
        if total != self.host_total:
            self.host_total = total
            self._changed()

    def add_host(self, cpu: int, mem: int, sign: int) -> None:
        """Book (``sign=1``) or release (``-1``) a pod's CPU and memory requests on this node."""
        if cpu or mem:
            self.host_used[0] += cpu * sign
            self.host_used[1] += mem * sign
            self._changed()

    def _changed(self) -> None:
        self.generation += 1
        if self.table is not None:
            self.table.dirty.add(self.row)

    def set_devices(self, devices: Mapping[str, list[DeviceInfo]]) -> None:
        """Replace the inventory (usage is zeroed; the caller re-applies bookings)."""
        self.infos = dict(devices)
        self.devices = {b: [DeviceUsage(d) for d in devs] for b, devs in devices.items() if devs}
        self.by_uuid = {u.id: u for devs in self.devices.values() for u in devs}
        self.types = {b: frozenset(d.type for d in devs) for b, devs in self.devices.items()}
        self.mig = frozenset(b for b, devs in self.devices.items() if any(d.mode == "mig" for d in devs))
        self.order_cache = {}
        self.sum_used = self.sum_usedmem = self.sum_usedcores = 0
        all_devs = list(self.by_uuid.values())
        self.tot_count = sum(d.count for d in all_devs)
        self.tot_mem = sum(d.totalmem for d in all_devs)
        self.tot_core = sum(d.totalcore for d in all_devs)
        self.generation += 1
        if self.table is not None:
            self.table.dirty.add(self.row)

    @property
    def registered(self) -> bool:
        return bool(self.by_uuid)

    def apply(self, dev: ContainerDevice, sign: int) -> bool:
        """Add (``sign=1``) or remove (``sign=-1``) one collapsed booking; False if the UUID is unknown."""
        usage = self.by_uuid.get(dev.uuid)
        if usage is None:
            return False
        slots = max(dev.slots, 1) * sign
        usage.used += slots
        usage.usedmem += dev.usedmem * sign
        usage.usedcores += dev.usedcores * sign
        self.sum_used += slots
        self.sum_usedmem += dev.usedmem * sign
        self.sum_usedcores += dev.usedcores * sign
        self.generation += 1
        if self.table is not None:
            self.table.dirty.add(self.row)
        return True

    def totals(self) -> UsageTotals:
        return UsageTotals(self.sum_used, self.tot_count, self.sum_usedcores, self.tot_core, self.sum_usedmem,
                           self.tot_mem)


def _quantity(value: Any, unit: float) -> float:
    if value is None:
        return math.inf
    try:
        return float(parse_quantity(value) / unit)
    except (WireFormatError, ZeroDivisionError, TypeError, ValueError):
        return math.inf  # unreadable: do not let it constrain anything
