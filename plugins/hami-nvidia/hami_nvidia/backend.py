"""HAMi's NVIDIA backend, scheduler side (vendors.md Part B; scheduler.md §4.4, §6.2, §6.6, §9.2).

Pure functions over plain Kubernetes JSON; :mod:`hami_nvidia.plugin` wires them to the hooks.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

from hami_core.default_plugins.health import allocatable_count, generic_health
from hami_core.plugins.errors import AdmissionFailed, WireFormatError
from hami_core.plugins.fit import quota_predicate, standard_fit
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    MigProfile,
    Placement,
    QuotaView,
    ResourceNames,
)
from hami_core.wire import keys
from hami_core.wire.common import split_list
from hami_core.wire.mig import MIG_PLACEMENT_CUSTOM_INFO, MIG_PROFILE_CUSTOM_INFO
from hami_core.wire.nodes import decode_node_devices, decode_pair_scores
from hami_core.wire.quantity import quantity_to_int
from hami_core.wire.reasons import Reason
from hami_nvidia.config import NvidiaConfig

COMMON_WORD = "NVIDIA"
VENDOR = "nvidia"
MAX_INT32 = 2**31 - 1
#: ``DeviceInfo.mode`` of a GPU that HAMi partitions by dynamic MIG (per-node ``operatingmode: mig``).
MIG_MODE = "mig"


def make_backend(cfg: NvidiaConfig) -> DeviceBackend:
    """The NVIDIA :class:`DeviceBackend` for a validated ``nvidia:`` section."""
    return DeviceBackend(
        name=COMMON_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(
            count=cfg.resource_count_name,
            memory=cfg.resource_memory_name,
            memory_percentage=cfg.resource_memory_percentage_name,
            cores=cfg.resource_core_name,
            priority=cfg.resource_priority_name,
            memory_factor=cfg.memory_factor,
        ),
        register_annotation=keys.NODE_NVIDIA_REGISTER,
        handshake_annotation=keys.NODE_HANDSHAKE,
        to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE,
        allocated_annotation=keys.VGPU_DEVICES_ALLOCATED,
        use_type_annotation=keys.NVIDIA_USE_GPUTYPE,
        nouse_type_annotation=keys.NVIDIA_NOUSE_GPUTYPE,
        use_uuid_annotation=keys.NVIDIA_USE_GPUUUID,
        nouse_uuid_annotation=keys.NVIDIA_NOUSE_GPUUUID,
        lock_annotation=keys.NODE_LOCK,
        standard_capacity=True,
        config=cfg,
    )


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


# ------------------------------------------------------------------------------------------ inventory
def node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Devices from ``hami.io/node-nvidia-register`` with topology pair scores attached.

    HAMi ≥ 2.8 writes JSON; the legacy colon/comma form of older device plugins is read too (HAMi
    itself rejects it, quirk §12.1.9). No annotation ⇒ no devices.
    """
    annos = _annotations(node)
    key = backend.register_annotation or keys.NODE_NVIDIA_REGISTER
    raw = annos.get(key)
    if raw is None or not raw.strip():
        return []
    devices = decode_node_devices(raw, key=key)
    scores_raw = annos.get(keys.NODE_NVIDIA_SCORE)
    if scores_raw and scores_raw.strip():
        scores = decode_pair_scores(scores_raw, key=keys.NODE_NVIDIA_SCORE)
        devices = [replace(d, pair_scores=scores[d.id]) if d.id in scores else d for d in devices]
    return devices


def node_health(backend: DeviceBackend, node: Mapping[str, Any], now: float,
                state: MutableMapping[str, Any]) -> HealthReport:
    """The generic handshake rule overlaid with allocatable and registration tracking (Appendix B.2)."""
    generic = generic_health(backend, node, now)
    name = (node.get("metadata") or {}).get("name", "")
    current = allocatable_count(node, backend.resource_names.count)
    text = _annotations(node).get(backend.register_annotation or keys.NODE_NVIDIA_REGISTER)
    known = name in state
    reported, seen = state.get(name, (0, None))
    if current == 0 and reported == 0:
        state[name] = (0, text)
        if not generic.healthy and known and backend.handshake_annotation:
            # NodeCleanUp of a node registered before deletes the handshake mark (spec §9.2 step 2, B.8).
            return replace(generic, annotations={**generic.annotations, backend.handshake_annotation: None})
        return generic
    if current == 0:
        state[name] = (0, text)
        cleanup = {backend.handshake_annotation: None} if backend.handshake_annotation else {}
        return HealthReport(False, generic.need_update, cleanup,
                            reason=f"{backend.resource_names.count} allocatable dropped from {reported} to 0")
    if current != reported:
        state[name] = (current, text)
        return HealthReport(True, True, generic.annotations)
    if text != seen:
        state[name] = (current, text)
        return HealthReport(generic.healthy, True, generic.annotations, generic.reason)
    return generic


# ------------------------------------------------------------------------------------------ requests
def _resource(container: Mapping[str, Any], name: str, *, limits_only: bool = False) -> Any:
    """A container resource: limits first, then requests (HAMi reads limits, falling back to requests)."""
    if not name:
        return None
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get(name)
    if value is None and not limits_only:
        value = (res.get("requests") or {}).get(name)
    return value


def _int(value: Any) -> int | None:
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


def container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for NVIDIA (spec §6.2)."""
    cfg: NvidiaConfig = backend.config
    names = backend.resource_names
    nums = _int(_resource(container, names.count))
    if nums is None or nums <= 0:
        return None
    factor = max(names.memory_factor, 1)
    memreq = 0
    raw_mem = _resource(container, names.memory)
    if raw_mem is not None:
        mem = _int(raw_mem)
        # HAMi drops the whole request on a non-integer or out-of-range memory (no silent under-allocation).
        if mem is None or mem < 0 or mem > MAX_INT32 // factor:
            return None
        memreq = mem * factor if factor > 1 else mem
    pct = MEM_PERCENTAGE_UNSET
    raw_pct = _resource(container, names.memory_percentage)
    if raw_pct is not None:
        value = _int(raw_pct)
        if value is not None and value > 0:
            pct = min(value, 100)
    if pct == MEM_PERCENTAGE_UNSET and memreq == 0:
        if cfg.default_memory:
            memreq = cfg.default_memory
        else:
            pct = 100
    cores = cfg.default_cores
    raw_cores = _resource(container, names.cores)
    if raw_cores is not None:
        value = _int(raw_cores)
        if value is not None:
            cores = max(value, 0)
    return DeviceRequest(COMMON_WORD, nums, memreq, pct, cores)


# ------------------------------------------------------------------------------------------ admission
def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = container.setdefault("env", [])
    for item in env:
        if item.get("name") == name:
            item["value"] = value
            return
    env.append({"name": name, "value": value})


def mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for NVIDIA (spec §4.4); returns whether the container uses NVIDIA.

    Idempotent: env vars are set, not appended twice.
    """
    cfg: NvidiaConfig = backend.config
    names = backend.resource_names
    cname = container.get("name", "<unnamed>")
    raw_pct = _resource(container, names.memory_percentage)
    if raw_pct is not None:
        pct = _int(raw_pct)
        if pct is None or not 0 <= pct <= 100:
            raise AdmissionFailed(f"container {cname}: {names.memory_percentage}={raw_pct!r} "
                                  "must be an integer between 0 and 100")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits")
    if limits is None:
        limits = resources["limits"] = {}
    priority = limits.get(names.priority) if names.priority else None
    if priority is not None:
        value = _int(priority)
        if value is None:
            raise AdmissionFailed(f"container {cname}: {names.priority}={priority!r} must be an integer")
        _set_env(container, "CUDA_TASK_PRIORITY", str(value))
    if cfg.gpu_core_policy not in ("", "default"):
        # HAMi adds this to every container it processes, GPU or not (quirk §12.1.6).
        _set_env(container, "GPU_CORE_UTILIZATION_POLICY", cfg.gpu_core_policy)
    has = names.count in limits
    if not has and cfg.default_gpu_num > 0 and any(
            n and n in limits for n in (names.cores, names.memory, names.memory_percentage)):
        limits[names.count] = str(cfg.default_gpu_num)
        has = True
    count_present = names.count in limits or names.count in (resources.get("requests") or {})
    if count_present and names.cores and _resource(container, names.cores) is None:
        pct_value = _resource(container, names.memory_percentage)
        exclusive = (_int(pct_value) == 100) if pct_value is not None else (
            not names.memory or _resource(container, names.memory) is None)
        if exclusive:
            limits[names.cores] = "100"
            has = True
    if not limits:
        del resources["limits"]
    if not resources:
        del container["resources"]
    spec = pod.setdefault("spec", {})
    if has and not spec.get("runtimeClassName") and cfg.runtime_class_name:
        spec["runtimeClassName"] = cfg.runtime_class_name
    if not has and cfg.overwrite_env:
        _set_env(container, "NVIDIA_VISIBLE_DEVICES", "none")
    return has


# ------------------------------------------------------------------------------------------ fit
class _Selection:
    """The pod's NVIDIA selection annotations, parsed once per filter call."""

    __slots__ = ("mode", "nouse_type", "nouse_uuid", "use_type", "use_uuid")

    def __init__(self, backend: DeviceBackend, pod: Mapping[str, Any]) -> None:
        annos = _annotations(pod)
        self.use_type = tuple(t.upper() for t in split_list(annos.get(backend.use_type_annotation or "")))
        self.nouse_type = tuple(t.upper() for t in split_list(annos.get(backend.nouse_type_annotation or "")))
        self.use_uuid = frozenset(split_list(annos.get(backend.use_uuid_annotation or "")))
        self.nouse_uuid = frozenset(split_list(annos.get(backend.nouse_uuid_annotation or "")))
        self.mode = annos.get(keys.NVIDIA_VGPU_MODE)

    def type_ok(self, dev: DeviceUsage) -> bool:
        card = dev.type.upper()
        if self.use_type and not any(t in card for t in self.use_type):
            return False
        if self.nouse_type and any(t in card for t in self.nouse_type):
            return False
        return self.mode is None or dev.mode in self.mode

    def uuid_ok(self, dev: DeviceUsage) -> bool:
        if self.use_uuid and dev.id not in self.use_uuid:
            return False
        return not (self.nouse_uuid and dev.id in self.nouse_uuid)

    @property
    def filters(self) -> bool:
        return bool(self.use_type or self.nouse_type or self.mode is not None)


def _never(dev: DeviceUsage) -> bool:
    return False


def _has_mig(cand: FitCandidate) -> bool:
    """Whether the candidate offers a MIG-mode GPU, for a node view without the engine's summary (``mig``)."""
    return any(d.mode == MIG_MODE for d in cand.devices)


# ------------------------------------------------------------------------------------------ MIG (spec §6.8)
@lru_cache(maxsize=256)
def _profiles_by_memory(profiles: tuple[MigProfile, ...]) -> tuple[tuple[MigProfile, tuple[Placement, ...]], ...]:
    """A GPU's profiles by (memoryMB, sliceCount), each with its placements in the order they are tried: ``1g.*``
    and ``3g.*`` from the highest start, the others from the lowest (HAMi ``mig_topology.go``; both sorts are
    stable). Placements of size 0 are left out: they name no slice, so they can be neither realized nor booked."""
    out = []
    for profile in sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)):
        high = profile.name.startswith(("1g.", "3g."))
        placements = sorted((p for p in profile.placements if p.size > 0), key=lambda p: p.start, reverse=high)
        out.append((profile, tuple(placements)))
    return tuple(out)


def select_mig(profiles: tuple[MigProfile, ...], occupied: Sequence[Placement],
               memory: int) -> tuple[MigProfile, Placement] | None:
    """HAMi ``selectMigCandidate``: the smallest profile with ``memoryMB >= memory`` that has a placement overlapping
    none of ``occupied``, and that placement; ``None`` when there is none."""
    for profile, placements in _profiles_by_memory(profiles):
        if profile.memory_mb < memory:
            continue
        for placement in placements:
            if not any(placement.overlaps(o) for o in occupied):
                return profile, placement
    return None


def is_mig(dev: DeviceUsage) -> bool:
    """A MIG-mode GPU: the fit examines it again after accepting it (several instances from one GPU)."""
    return dev.mode == MIG_MODE


def mig_rule(dev: DeviceUsage, mem: int, cores: int, chosen: Sequence[ContainerDevice]) -> bool:
    """HAMi's NVIDIA ``CustomFilterRule`` (spec §6.6 step 15): on a MIG GPU, the instances already chosen for this
    container on it (replayed in order) and one more for ``mem`` must all find free placements."""
    if dev.mode != MIG_MODE:
        return True
    profiles = dev.info.mig_profiles
    occupied = [inst.placement for inst in dev.mig_in_use]
    for earlier in chosen:
        if earlier.uuid == dev.id:
            got = select_mig(profiles, occupied, earlier.usedmem)
            if got is None:
                return False
            occupied.append(got[1])
    return select_mig(profiles, occupied, mem) is not None


def place_mig(result: FitResult, devices: Sequence[DeviceUsage]) -> FitResult:
    """HAMi's NVIDIA ``AddResourceUsage`` for MIG GPUs: each chosen MIG device gets its profile and placement (the
    same rule, in order) and books the profile's ``memoryMB``/``core`` instead of the request's memory and cores;
    the profile and placement go in ``custom_info`` (they become ``hami.io/vgpu-mig-allocations``)."""
    by_id = {d.id: d for d in devices if d.mode == MIG_MODE}
    if not by_id:
        return result
    occupied: dict[str, list[Placement]] = {}
    out = []
    for chosen in result.devices:
        dev = by_id.get(chosen.uuid)
        if dev is None:
            out.append(chosen)
            continue
        taken = occupied.setdefault(dev.id, [inst.placement for inst in dev.mig_in_use])
        got = select_mig(dev.info.mig_profiles, taken, chosen.usedmem)
        if got is None:  # the fit's rule held for this order, so only a topology re-pick can get here
            return FitResult.unschedulable(f"1/{len(devices)} {Reason.CardMigTopologyInfeasible}")
        profile, placement = got
        taken.append(placement)
        out.append(ContainerDevice(chosen.uuid, chosen.type, profile.memory_mb, profile.core, chosen.idx,
                                   custom_info={MIG_PROFILE_CUSTOM_INFO: profile.name,
                                                MIG_PLACEMENT_CUSTOM_INFO: placement}))
    return FitResult.success(out)


def filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                 candidates: Sequence[FitCandidate], policy: GpuPolicy, *,
                 quota: QuotaView | None = None) -> list[FitResult]:
    """HAMi's NVIDIA ``Fit`` (spec §6.6) on every candidate node.

    On a node with MIG-mode GPUs the fit also places MIG instances (spec §6.8): :func:`mig_rule` is step 15 (refused
    with ``CardMigTopologyInfeasible``), a MIG GPU is examined again after each accepted instance, and
    :func:`place_mig` gives the chosen MIG devices their profile and placement. Other nodes pay for none of it.

    ``quota``: the pod's namespace ResourceQuota; a device that would take the pod's hypothetical usage past a
    limit is refused with ``ResourceQuotaNotFit`` (step 10, before the memory and core checks; §11.2).
    """
    sel = _Selection(backend, pod)
    type_ok = sel.type_ok if sel.filters else None
    if request.backend != COMMON_WORD:
        # The type check is step 3, after health and cordon (spec §6.6), so it is a predicate, not a shortcut.
        type_ok = _never
    uuid_ok = sel.uuid_ok if (sel.use_uuid or sel.nouse_uuid) else None
    mutex = policy.has("mutex")
    topology = policy.has("topology-aware")
    out = []
    for cand in candidates:
        cordon_raw = cand.node.annotations.get(keys.DEVICE_CORDON)
        cordoned = frozenset(split_list(cordon_raw)) if cordon_raw else frozenset()
        summary = getattr(cand.node, "mig", None)  # the engine's node state: backends with a MIG-mode GPU
        mig = (COMMON_WORD in summary) if summary is not None else _has_mig(cand)
        result = standard_fit(cand.devices, request, type_ok=type_ok, uuid_ok=uuid_ok, cordoned=cordoned,
                              numa_bind=policy.numa_bind, mutex=mutex, topology=topology,
                              quota=quota_predicate(quota, backend, cand) if quota is not None else None,
                              custom_rule=mig_rule if mig else None, custom_reason=Reason.CardMigTopologyInfeasible,
                              revisit=is_mig if mig else None)
        out.append(place_mig(result, cand.devices) if mig and result.ok else result)
    return out
