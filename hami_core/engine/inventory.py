"""The engine's view of one node: its registered devices, what is booked on them, and node-wide sums."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, DeviceInfo, DeviceUsage, MigInstance, UsageTotals
from hami_core.wire.quantity import parse_quantity

log = logging.getLogger("hami.engine")

#: ``DeviceInfo.mode`` of a GPU partitioned by dynamic MIG.
MIG_MODE = "mig"


class RowTable(Protocol):
    """What a node state tells the table holding its row (:class:`~hami_core.engine.table.NodeTable`, which
    imports this module: a protocol here keeps the import one-way)."""

    #: rows whose usage or devices changed
    dirty: set[int]
    #: rows whose node annotations changed
    annotations_dirty: set[int]


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
        #: pod shape number (Planner._reason_key) → (generation, why this node rejected it); see Planner._explain.
        self.reason_cache: dict[int, tuple[int, str]] = {}
        self.generation = 0
        #: The node's row in the engine's :class:`~hami_core.engine.table.NodeTable` (set when added).
        self.row = -1
        self.table: RowTable | None = None
        self.sum_used = self.sum_usedmem = self.sum_usedcores = 0
        self.tot_count = self.tot_mem = self.tot_core = 0
        #: Allocatable CPU (milli) and memory (MiB) from the Node (inf when not given), and what the pods
        #: the engine knows of request there.
        self.host_total = (math.inf, math.inf)
        self.host_used = [0, 0]

    def update_object(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        status = node.get("status") or {}
        annotations = dict(meta.get("annotations") or {})
        if annotations != self.annotations and self.table is not None:
            self.table.annotations_dirty.add(self.row)
        self.annotations = annotations
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

    def apply_mig(self, pod: str, uuids: Iterable[str], mig: Mapping[str, tuple[MigInstance, ...]], sign: int) -> None:
        """Book (``sign=1``) or release (``-1``) one pod's MIG instances (spec §6.3 step 3, HAMi ``getNodesUsage``).

        ``uuids``: the devices the pod's allocation names; ``mig``: its MIG instances per GPU UUID. Instances on a
        MIG GPU join its ``mig_in_use``; instances on any other GPU, or a MIG GPU the pod uses without an instance,
        count as a conflict that keeps the device unhealthy while the pod is booked.
        """
        changed = False
        for uuid, instances in mig.items():
            usage = self.by_uuid.get(uuid)
            if usage is None:
                if sign > 0:
                    log.warning("pod %s holds MIG instances on GPU %s that node %s does not register; ignored",
                                pod, uuid, self.name)
                continue
            changed = True
            if usage.mode != MIG_MODE:
                if sign > 0:
                    log.error("pod %s holds MIG instances on GPU %s of node %s, which is in %r mode: the GPU is "
                              "unhealthy until the pod goes", pod, uuid, self.name, usage.mode)
                mig_conflict(usage, sign)
            else:
                mig_book(usage, instances, sign)
        for uuid in uuids:
            if uuid in mig:
                continue
            usage = self.by_uuid.get(uuid)
            if usage is not None and usage.mode == MIG_MODE:
                if sign > 0:
                    log.error("pod %s uses MIG GPU %s of node %s without a MIG reservation (%s missing): the GPU is "
                              "unhealthy until the pod goes", pod, uuid, self.name, "hami.io/vgpu-mig-allocations")
                mig_conflict(usage, sign)
                changed = True
        if changed:
            self._changed()

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


def mig_book(usage: DeviceUsage, instances: Iterable[MigInstance], sign: int) -> None:
    """Add (``sign=1``) or remove (``-1``) MIG instances from ``usage.mig_in_use`` (one occurrence each)."""
    if sign > 0:
        usage.mig_in_use = (*usage.mig_in_use, *instances)
        return
    kept = list(usage.mig_in_use)
    for inst in instances:
        if inst in kept:
            kept.remove(inst)
    usage.mig_in_use = tuple(kept)


def mig_conflict(usage: DeviceUsage, sign: int) -> None:
    """Count a booking that contradicts the device's mode; the device is healthy only without any."""
    usage.mig_conflicts += sign
    usage.health = usage.info.health and usage.mig_conflicts <= 0
