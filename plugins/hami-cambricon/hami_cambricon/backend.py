"""HAMi's Cambricon MLU backend, scheduler side (vendors.md Part D; scheduler.md §8.2, §9.2, §11).

Pure functions over plain Kubernetes JSON; :mod:`hami_cambricon.plugin` wires them to the hooks. Every
function takes the :class:`~hami_cambricon.config.MluModelSpec` of the backend it serves, so the HAMi
default (one backend ``MLU``) and the per-model backends share one code path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hami_cambricon.config import SECTION, CambriconConfig, MluModelSpec
from hami_core.plugins.errors import AdmissionFailed, TemporaryError, WireFormatError
from hami_core.plugins.fit import QuotaCheck, collapse, standard_fit
from hami_core.plugins.types import (
    ContainerDevice,
    ContainerRequests,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    LockSpec,
    PodSingleDevice,
    QuotaView,
    ResourceNames,
)
from hami_core.wire.common import check_device_count, go_quote, split_list, wire_error
from hami_core.wire.lock import decode_lock_time, encode_lock_time
from hami_core.wire.quantity import quantity_to_int

VENDOR = SECTION
MAX_INT32 = 2**31 - 1
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


def make_backends(cfg: CambriconConfig) -> list[DeviceBackend]:
    """One :class:`DeviceBackend` per resolved spec: ``MLU`` by default, one per ``models`` entry otherwise."""
    return [
        DeviceBackend(
            name=spec.name,
            vendor=VENDOR,
            resource_names=ResourceNames(count=spec.count, memory=spec.memory, cores=spec.cores,
                                         memory_factor=MEMORY_FACTOR),
            to_allocate_annotation=spec.to_allocate_annotation,
            allocated_annotation=spec.allocated_annotation,
            # HAMi declares cambricon.com/use-mlutype and nouse-mlutype but never reads them (vendors D.4).
            use_uuid_annotation=USE_UUID_ANNOTATION,
            nouse_uuid_annotation=NOUSE_UUID_ANNOTATION,
            lock_annotation=LOCK_ANNOTATION,
            standard_capacity=True,
            config=cfg,
        )
        for spec in cfg.specs
    ]


def spec_of(backend: DeviceBackend) -> MluModelSpec | None:
    """The spec a Cambricon backend serves, or ``None`` for a backend this plugin does not own."""
    cfg = backend.config
    if backend.vendor != VENDOR or not isinstance(cfg, CambriconConfig):
        return None
    return cfg.spec(backend.name)


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("annotations") or {}


# ------------------------------------------------------------------------------------------ inventory
def _capacity_int(node: Mapping[str, Any], resource: str) -> tuple[bool, int | None]:
    """``(present, integer value or None)`` of ``status.capacity[resource]``.

    A malformed quantity raises :class:`WireFormatError` naming the node and the resource.
    """
    capacity = (node.get("status") or {}).get("capacity") or {}
    if not resource or resource not in capacity:
        return False, None
    raw = capacity[resource]
    try:
        return True, quantity_to_int(raw)
    except WireFormatError as exc:
        raise _capacity_error(node, resource, raw, str(exc)) from None


def _capacity_error(node: Mapping[str, Any], resource: str, raw: Any, why: str) -> WireFormatError:
    name = _meta(node).get("name", "<unnamed>")
    return wire_error(f"node {name}: status.capacity[{resource}]", f"{go_quote(raw)}: {why}")


def node_devices(spec: MluModelSpec, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Devices synthesised from node capacity (HAMi ``GetNodeDevices``, vendors D.2).

    One device per started 100 cores of ``capacity[<core resource>]``: ID ``<node>-cambricon-mlu-<i>``,
    Count 100, Devcore 100, Devmem ``vmemory x 256 x 100 / cores`` MiB, type = the backend name, healthy.
    A node without the core resource (or not matching the model's ``nodeSelector``) has no devices. A
    present but unusable core capacity (zero or not an integer) is HAMi's "device not found" error: the
    engine keeps the node's previous devices and reports it.
    """
    labels = _meta(node).get("labels") or {}
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
    name = _meta(node).get("name", "")
    check_device_count(-(-cores // DEVICE_CORES), f"node {name}: status.capacity[{spec.cores}]")
    return [DeviceInfo(id=spec.device_id(name, i), index=i, count=DEVICE_SPLIT, devmem=devmem, devcore=DEVICE_CORES,
                       type=spec.name, numa=0, health=True)
            for i in range(-(-cores // DEVICE_CORES))]


def node_health() -> HealthReport:
    """HAMi's Cambricon ``CheckHealth``: always healthy and refreshed every pass; no handshake (vendors D.2)."""
    return HealthReport(True, True)


# ------------------------------------------------------------------------------------------ requests
def _resource(container: Mapping[str, Any], name: str) -> Any:
    """A container resource: limits first, then requests."""
    if not name:
        return None
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get(name)
    if value is None:
        value = (res.get("requests") or {}).get(name)
    return value


def _int(value: Any) -> int | None:
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


def container_request(spec: MluModelSpec, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for Cambricon (vendors D.3).

    Count (limits, else requests) must be an integer in 1..MaxInt32. Memory in 256 MiB units must be an
    integer in 0..MaxInt32/256, otherwise the whole request is dropped (``16Gi`` is not silently
    truncated). Cores default to 100 (a whole card); a memory of 0 or none books 100 % of the card.
    """
    nums = _int(_resource(container, spec.count))
    if nums is None or not 0 < nums <= MAX_INT32:
        return None
    memreq = 0
    raw_mem = _resource(container, spec.memory)
    if raw_mem is not None:
        units = _int(raw_mem)
        if units is None or not 0 <= units <= MAX_INT32 // MEMORY_FACTOR:
            return None
        memreq = units * MEMORY_FACTOR
    cores = DEVICE_CORES
    raw_cores = _resource(container, spec.cores)
    if raw_cores is not None:
        value = _int(raw_cores)
        if value is not None:  # HAMi keeps the default for a non-integer core quantity
            cores = max(value, 0)
    return DeviceRequest(spec.name, nums, memreq, 100 if memreq == 0 else 0, cores)


# ------------------------------------------------------------------------------------------ admission
def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def mutate_container(cfg: CambriconConfig, spec: MluModelSpec, pod: Mapping[str, Any],
                     container: Mapping[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for Cambricon: the container uses MLU iff the count is in its limits.

    Nothing is mutated. With several models configured, a pod asking for two of them is rejected:
    ``CAMBRICON_DSMLU_PROFILE`` describes a single device of a single model.
    """
    limits = (container.get("resources") or {}).get("limits") or {}
    if spec.count not in limits:
        return False
    for other in cfg.specs:
        if other.name == spec.name:
            continue
        holder = next((c for c in _containers(pod) if _resource(c, other.count) is not None), None)
        if holder is not None:
            raise AdmissionFailed(
                f"container {container.get('name', '<unnamed>')} requests {spec.count} ({spec.name}) and "
                f"container {holder.get('name', '<unnamed>')} requests {other.count} ({other.name}): a pod may use "
                f"one MLU model, as {DSMLU_PROFILE} describes one device")
    return True


# ------------------------------------------------------------------------------------------ fit
@dataclass(frozen=True, slots=True)
class QuotaUsage:
    """One namespace's ResourceQuota entry for one resource, as HAMi's quota cache holds it (spec §11.1).

    ``limit`` is the ``limits.<resource>`` quantity in resource units (256 MiB units for memory);
    ``used`` what HAMi booked in the namespace in MiB (memory) or percent (cores). An entry exists only
    when a limit is set, so a limit of 0 blocks everything.
    """

    limit: int
    used: int = 0


#: ``(namespace, resource name) → QuotaUsage``.
Quotas = Mapping[tuple[str, str], QuotaUsage]


def quotas_of(view: QuotaView | None) -> Quotas | None:
    """The engine's quota view of the pod's namespace (``hami_filter_nodes``' ``quota``) as :data:`Quotas`."""
    if view is None:
        return None
    return {(view.namespace, resource): QuotaUsage(e.limit, e.used) for resource, e in view.entries.items()}


def fit_quota(spec: MluModelSpec, quotas: Quotas, namespace: str, mem: int, cores: int) -> bool:
    """HAMi ``FitQuota`` (spec §11.2): ``used + request`` within the limit; memory limits count x 256."""
    mem_quota = quotas.get((namespace, spec.memory)) if spec.memory else None
    if mem_quota is not None and mem_quota.used + mem > mem_quota.limit * MEMORY_FACTOR:
        return False
    core_quota = quotas.get((namespace, spec.cores)) if spec.cores else None
    return core_quota is None or core_quota.used + cores <= core_quota.limit


def _quota_check(spec: MluModelSpec, pod: Mapping[str, Any], cand: FitCandidate,
                 quotas: Quotas) -> QuotaCheck | None:
    """The per-device quota predicate for one node: the pod's hypothetical usage must fit (spec §11.2).

    Hypothetical usage = devices chosen for earlier containers + this container so far + the candidate,
    collapsed (init containers as a peak, app containers as a sum) and summed.
    """
    namespace = _meta(pod).get("namespace") or "default"
    if not any((namespace, r) in quotas for r in (spec.memory, spec.cores) if r):
        return None
    earlier = [tuple(c) for c in cand.allocated.get(spec.name, ())]
    ctrs = _containers(pod)
    wanted = [i for i, c in enumerate(ctrs) if container_request(spec, c) is not None]
    placed = sum(1 for c in earlier if c)
    position = wanted[placed] if placed < len(wanted) else len(earlier)
    slots = earlier + [()] * max(0, position + 1 - len(earlier))
    init_count = len((pod.get("spec") or {}).get("initContainers") or [])

    def check(dev: DeviceUsage, mem: int, cores: int, chosen: Sequence[ContainerDevice]) -> bool:
        slots[position] = (*chosen, ContainerDevice(dev.id, spec.name, mem, cores, dev.index))
        booked = collapse({spec.name: tuple(slots)}, init_count).get(spec.name, ())
        return fit_quota(spec, quotas, namespace, sum(d.usedmem for d in booked), sum(d.usedcores for d in booked))

    return check


class _UuidSelection:
    """``cambricon.com/use-gpuuuid`` / ``nouse-gpuuuid`` (HAMi ``CheckUUID``, vendors A.8)."""

    __slots__ = ("nouse", "use")

    def __init__(self, pod: Mapping[str, Any]) -> None:
        annos = _annotations(pod)
        self.use = frozenset(split_list(annos.get(USE_UUID_ANNOTATION)))
        self.nouse = frozenset(split_list(annos.get(NOUSE_UUID_ANNOTATION)))

    def __call__(self, dev: DeviceUsage) -> bool:
        if self.use and dev.id not in self.use:
            return False
        return not (self.nouse and dev.id in self.nouse)


def _never(dev: DeviceUsage) -> bool:
    return False


def filter_nodes(cfg: CambriconConfig, spec: MluModelSpec, pod: Mapping[str, Any], request: DeviceRequest,
                 candidates: Sequence[FitCandidate], policy: GpuPolicy, *,
                 quotas: Quotas | None = None) -> list[FitResult]:
    """HAMi's Cambricon ``Fit`` (vendors D.4, A.7) on every candidate node.

    The standard checklist with: type = the request ``Type`` equals the backend name; no NUMA and no
    cordon; UUID selection; ``mutex``; the namespace quota (``quotas``: the hook passes the engine's view of the
    pod's namespace when it limits MLU memory or cores). With several models configured, a node
    where the pod already holds devices of another model is refused.
    """
    uuids = _UuidSelection(pod)
    uuid_ok = uuids if (uuids.use or uuids.nouse) else None
    type_ok = None if request.backend == spec.name else _never
    mutex = policy.has("mutex")
    siblings = [s.name for s in cfg.specs if s.name != spec.name]
    out = []
    for cand in candidates:
        other = next((s for s in siblings if any(cand.allocated.get(s, ()))), None)
        if other is not None:
            out.append(FitResult.unschedulable(
                f"pod already holds {other} devices on this node; a pod may use one MLU model"))
            continue
        quota = _quota_check(spec, pod, cand, quotas) if quotas else None
        out.append(standard_fit(cand.devices, request, type_ok=type_ok, uuid_ok=uuid_ok, mutex=mutex, quota=quota))
    return out


# ------------------------------------------------------------------------------------------ bind
def allocation_annotations(cfg: CambriconConfig, devices: PodSingleDevice) -> dict[str, str] | None:
    """``CAMBRICON_DSMLU_ASSIGNED=false`` and ``CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<mem/256>`` (D.5).

    The profile describes the first device of the first container that has one. The to-allocate and
    allocated keys come from the core's default codec.
    """
    first = next((ctr[0] for ctr in devices if ctr), None)
    if first is None:
        return None
    out = {DSMLU_ASSIGNED: "false",
           DSMLU_PROFILE: f"{first.idx}_{first.usedcores}_{first.usedmem // MEMORY_FACTOR}"}
    if cfg.legacy_assigned_annotation:
        out[DSMLU_ASSIGNED_LEGACY] = "false"
    return out


def node_lock(spec: MluModelSpec, requests: ContainerRequests) -> LockSpec | None:
    """Cambricon's lock when an app container requests this backend (HAMi checks ``Spec.Containers`` only)."""
    app = requests.containers[requests.init_count:]
    if any(spec.name in ctr for ctr in app):
        return LockSpec(LOCK_ANNOTATION, owned=False, expiry_s=LOCK_EXPIRY_S)
    return None


def acquire_lock(node: Mapping[str, Any], now: float) -> dict[str, str]:
    """HAMi's ``LockNode`` decision on a node (vendors D.6), as the merge patch to write.

    Absent → set ``<now, RFC3339>``; older than 2 minutes → released and set again (the same patch);
    younger (or exactly 2 minutes) → :class:`TemporaryError` ``node <n> has been locked within 2 minutes``;
    unparsable → :class:`WireFormatError` naming the annotation. The cluster adapter applies the patch
    with the node's ``resourceVersion``.
    """
    value = _annotations(node).get(LOCK_ANNOTATION)
    stamp = encode_lock_time(datetime.fromtimestamp(now))
    if value is None:
        return {LOCK_ANNOTATION: stamp}
    held_since = decode_lock_time(value, key=LOCK_ANNOTATION).timestamp()
    if now - held_since > LOCK_EXPIRY_S:
        return {LOCK_ANNOTATION: stamp}
    raise TemporaryError(f"node {_meta(node).get('name', '<unnamed>')} has been locked within 2 minutes")


def release_lock(node: Mapping[str, Any]) -> dict[str, None]:
    """HAMi's ``ReleaseNodeLock``: remove the lock if present, whoever set it and whatever the pod uses."""
    return {LOCK_ANNOTATION: None} if LOCK_ANNOTATION in _annotations(node) else {}
