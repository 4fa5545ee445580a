"""HAMi's Cambricon MLU backend, scheduler side (vendors.md Part D; scheduler.md §8.2, §9.2, §11).

:func:`make_backends` builds one :class:`MluBackend` per resolved :class:`~hami_cambricon.config.MluModelSpec`:
HAMi's single ``MLU`` backend by default, one per ``models`` entry otherwise; each serves only its own spec.
It is a :class:`~hami_core.plugins.StandardBackend`, so HAMi's generic rules hold where Cambricon follows them:
the request count and memory steps (x 256), the standard fit with UUID selection, ``mutex`` and the namespace
ResourceQuota (HAMi's Cambricon fit enforces it), and the allocation codec on
``hami.io/cambricon-<model>-devices-*`` (A.4). What differs is registration (devices synthesised from node
capacity), health (always healthy, no handshake), the core and percentage request steps, one model per pod, the
dynamic-sMLU annotations and Cambricon's own time-only node lock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hami_cambricon.config import SECTION, CambriconConfig, MluModelSpec
from hami_core.plugins import (
    AdmissionFailed,
    ContainerRequests,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    LockSpec,
    Mutation,
    PodSingleDevice,
    QuotaView,
    ResourceNames,
    StandardBackend,
    WireFormatError,
    as_whole,
    containers,
    metadata,
    resource,
    standard_allocation_annotations,
    standard_node_lock,
)
from hami_core.wire.common import check_device_count, go_quote, wire_error
from hami_core.wire.quantity import quantity_to_int

VENDOR = SECTION
#: One vmemory unit is 256 MiB (HAMi ``MemoryFactor``; also applied to quota limits).
MEMORY_FACTOR = 256
#: A synthesised device: 100 cores (percent of one MLU) shared by at most 100 tasks.
DEVICE_CORES = 100
DEVICE_SPLIT = 100

USE_UUID_ANNOTATION = "cambricon.com/use-gpuuuid"
NOUSE_UUID_ANNOTATION = "cambricon.com/nouse-gpuuuid"
#: Cambricon's own node lock (vendors D.6): an RFC3339 time, no owner, expiring after 2 minutes.
LOCK_ANNOTATION = "cambricon.com/dsmlu.lock"
LOCK_EXPIRY_S = 120.0
#: Pod annotations read by Cambricon's dynamic-sMLU device plugin (vendors D.5). They look like env names.
DSMLU_PROFILE = "CAMBRICON_DSMLU_PROFILE"
DSMLU_ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
#: The historical misspelling, written only with ``legacyAssignedAnnotation: true``.
DSMLU_ASSIGNED_LEGACY = "CAMBRICON_DSMLU_ASSIGHED"


def make_backends(cfg: CambriconConfig) -> list[MluBackend]:
    """One :class:`MluBackend` per resolved spec: ``MLU`` by default, one per ``models`` entry otherwise."""
    return [MluBackend.from_spec(cfg, spec) for spec in cfg.specs]


def _capacity_error(node: Mapping[str, Any], resource_name: str, raw: Any, why: str) -> WireFormatError:
    name = metadata(node).get("name", "<unnamed>")
    return wire_error(f"node {name}: status.capacity[{resource_name}]", f"{go_quote(raw)}: {why}")


def _capacity_int(node: Mapping[str, Any], resource_name: str) -> tuple[bool, int | None]:
    """``(present, integer value or None)`` of ``status.capacity[resource_name]``.

    A malformed quantity raises :class:`WireFormatError` naming the node and the resource.
    """
    capacity = (node.get("status") or {}).get("capacity") or {}
    if not resource_name or resource_name not in capacity:
        return False, None
    raw = capacity[resource_name]
    try:
        return True, quantity_to_int(raw)
    except WireFormatError as exc:
        raise _capacity_error(node, resource_name, raw, str(exc)) from None


@dataclass(frozen=True, slots=True)
class MluBackend(StandardBackend):
    """One MLU backend (vendors D.1-D.7); ``config`` is the whole ``cambricon:`` section (its sibling models and
    ``legacyAssignedAnnotation``), ``spec`` the model it serves."""

    # Overrides call the base as ``StandardBackend.<method>(self, ...)``: zero-argument ``super()`` fails in a
    # slots dataclass (the decorator builds a new class).

    #: a container without a core quantity books a whole card (D.3)
    default_cores: ClassVar[int] = DEVICE_CORES
    #: ``MemPercentagereq``: 100 (the whole card) without memory, else 0 (``Memreq`` wins) (D.3)
    memory_given_percentage: ClassVar[int] = 0
    #: HAMi's Cambricon fit checks the namespace ResourceQuota (D.4, scheduler §11.2)
    enforce_quota: ClassVar[bool] = True

    spec: MluModelSpec = field(kw_only=True, compare=False, repr=False)

    @classmethod
    def from_spec(cls, cfg: CambriconConfig, spec: MluModelSpec) -> MluBackend:
        """The backend of ``spec`` in the validated section ``cfg`` (D.1)."""
        return cls(name=spec.name, vendor=VENDOR,
                   resource_names=ResourceNames(count=spec.count, memory=spec.memory, cores=spec.cores,
                                                memory_factor=MEMORY_FACTOR),
                   to_allocate_annotation=spec.to_allocate_annotation, allocated_annotation=spec.allocated_annotation,
                   # HAMi declares cambricon.com/use-mlutype and nouse-mlutype but never reads them (vendors D.4).
                   use_uuid_annotation=USE_UUID_ANNOTATION, nouse_uuid_annotation=NOUSE_UUID_ANNOTATION,
                   lock_annotation=LOCK_ANNOTATION, standard_capacity=True, config=cfg, spec=spec)

    @property
    def siblings(self) -> list[MluModelSpec]:
        """The other models of the section (none on HAMi's default path)."""
        cfg: CambriconConfig = self.config
        return [s for s in cfg.specs if s.name != self.name]

    # ------------------------------------------------------------------------------------ inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """Devices synthesised from node capacity (HAMi ``GetNodeDevices``, vendors D.2).

        One device per started 100 cores of ``capacity[<core resource>]``: ID ``<node>-cambricon-mlu-<i>``,
        Count 100, Devcore 100, Devmem ``vmemory x 256 x 100 / cores`` MiB, type = the backend name, healthy.
        A node without the core resource (or not matching the model's ``nodeSelector``) has no devices. A
        present but unusable core capacity (zero or not an integer) is HAMi's "device not found" error: the
        engine keeps the node's previous devices and reports it.
        """
        spec = self.spec
        labels = metadata(node).get("labels") or {}
        if not spec.selects(labels):
            return []
        present, cores = _capacity_int(node, spec.cores)
        if not present:
            return []
        if cores is None or cores == 0:
            raw = ((node.get("status") or {}).get("capacity") or {})[spec.cores]
            raise _capacity_error(node, spec.cores, raw, "device not found: need a non-zero integer core count")
        if cores < 0:  # HAMi's loop registers nothing
            return []
        _, memory = _capacity_int(node, spec.memory)
        # HAMi ignores a memory capacity it cannot read as an integer (the devices get 0 MiB).
        memory = max(memory or 0, 0)
        devmem = memory * MEMORY_FACTOR * DEVICE_CORES // cores
        name = metadata(node).get("name", "")
        check_device_count(-(-cores // DEVICE_CORES), f"node {name}: status.capacity[{spec.cores}]")
        return [DeviceInfo(id=spec.device_id(name, i), index=i, count=DEVICE_SPLIT, devmem=devmem,
                           devcore=DEVICE_CORES, type=spec.name, numa=0, health=True)
                for i in range(-(-cores // DEVICE_CORES))]

    def hami_node_health(self) -> HealthReport:
        """HAMi's Cambricon ``CheckHealth``: always healthy and refreshed every pass; no handshake (vendors D.2)."""
        return HealthReport(True, True)

    # ------------------------------------------------------------------------------------ admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission`` for Cambricon: the container uses MLU iff the count is in its limits.

        Nothing is mutated. With several models configured, a pod asking for two of them is rejected:
        ``CAMBRICON_DSMLU_PROFILE`` describes a single device of a single model.
        """
        limits = (container.get("resources") or {}).get("limits") or {}
        if self.spec.count not in limits:
            return Mutation(False)
        init, app = containers(pod)
        for other in self.siblings:
            holder = next((c for c in (*init, *app) if resource(c, other.count) is not None), None)
            if holder is not None:
                raise AdmissionFailed(
                    f"container {container.get('name', '<unnamed>')} requests {self.spec.count} ({self.name}) and "
                    f"container {holder.get('name', '<unnamed>')} requests {other.count} ({other.name}): a pod may "
                    f"use one MLU model, as {DSMLU_PROFILE} describes one device")
        return Mutation(True)

    # ------------------------------------------------------------------------------------ requests (D.3)
    def request_cores(self, container: Mapping[str, Any]) -> int | None:
        """Cores per device: 100 (a whole card) when absent or not an integer; a negative quantity books 0 and a
        large one is kept for the fit to clamp (HAMi never drops a request for its cores)."""
        # Not as_int64, which also refuses values beyond int64: hami-cambricon has always read such a core quantity
        # as the integer it is (a huge one is clamped by the fit, a huge negative one books 0).
        value = as_whole(resource(container, self.resource_names.cores))
        return self.default_cores if value is None else max(value, 0)

    # ------------------------------------------------------------------------------------ filter (D.4)
    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        """The standard fit (UUID selection, ``mutex``, quota), except on a node where the pod already holds
        devices of another model: one pod, one model."""
        held = [next((s.name for s in self.siblings if any(cand.allocated.get(s.name, ()))), None)
                for cand in candidates]
        free = [cand for cand, other in zip(candidates, held, strict=True) if other is None]
        fits = iter(StandardBackend.hami_filter_nodes(self, pod, request, free, policy, quota) if free else ())
        return [next(fits) if other is None else
                FitResult.unschedulable(f"pod already holds {other} devices on this node; a pod may use one MLU model")
                for other in held]

    # ------------------------------------------------------------------------------------ bind
    def hami_allocation_annotations(self, devices: PodSingleDevice) -> Mapping[str, str] | None:
        """HAMi's to-allocate/allocated pair, then ``CAMBRICON_DSMLU_ASSIGNED=false`` and
        ``CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<mem/256>`` (D.5).

        The profile describes the first device of the first container that has one.
        """
        out = dict(standard_allocation_annotations(self, devices) or {})
        first = next((ctr[0] for ctr in devices if ctr), None)
        if first is not None:
            out[DSMLU_ASSIGNED] = "false"
            out[DSMLU_PROFILE] = f"{first.idx}_{first.usedcores}_{first.usedmem // MEMORY_FACTOR}"
            cfg: CambriconConfig = self.config
            if cfg.legacy_assigned_annotation:
                out[DSMLU_ASSIGNED_LEGACY] = "false"
        return out or None

    def hami_node_lock(self, requests: ContainerRequests) -> LockSpec | None:
        """Cambricon's time-only lock, expiring after 2 minutes, when an app container requests this backend
        (HAMi checks ``Spec.Containers`` only). The scheduler's node lock takes and releases it (D.6)."""
        if standard_node_lock(self, requests) is None:
            return None
        return LockSpec(LOCK_ANNOTATION, owned=False, expiry_s=LOCK_EXPIRY_S)
