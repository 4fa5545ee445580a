"""HAMi's Enflame backends, scheduler side (vendors.md Part I; Part A for the shared contract).

Two independent backends share the ``enflame:`` section:

* **GCU** (``pkg/device/enflame/gcu.go``): whole cards synthesised from ``status.capacity``, one task per
  card, only idle cards accepted.
* **Enflame** (``pkg/device/enflame/device.go``): DRS hard partitions. The device plugin publishes its
  cards and DRS profiles (``1g.6gb``, ``3g.20gb`` ...) as JSON; a container asks for a number of slices
  (direct mode) or for memory/cores (spec mode) and the fit picks the profile, booking its memory and
  core share.

Pure functions over plain Kubernetes JSON and hami-core's types; :mod:`hami_enflame.plugin` wires them to
the hooks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.engine.pods import annotations as annotations_of
from hami_core.plugins.errors import AdmissionFailed, WireFormatError
from hami_core.plugins.types import (
    ContainerDevice,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    PodSingleDevice,
    ResourceNames,
)
from hami_core.wire import gojson
from hami_core.wire.common import INT32_MAX, INT64_MAX, INT64_MIN, check_device_count, split_list, wire_error
from hami_core.wire.quantity import parse_quantity, quantity_to_int
from hami_core.wire.reasons import Reason, gen_reason_items
from hami_enflame.config import EnflameConfig

VENDOR = "enflame"

# -- GCU (whole card) --------------------------------------------------------------------------------------
GCU_WORD = "GCU"
GCU_TO_ALLOCATE = "hami.io/enflame-gcu-devices-to-allocate"
GCU_ALLOCATED = "hami.io/enflame-gcu-devices-allocated"
#: Every synthesised card: one task, "100" memory units and 100 % cores; a request books all of it.
GCU_DEVMEM = 100
GCU_DEVCORE = 100

# -- Enflame DRS -------------------------------------------------------------------------------------------
DRS_WORD = "Enflame"
DRS_ALLOCATED = "hami.io/enflame-vgpu-devices-allocated"
DRS_CAPACITY = "enflame.com/gcu-drs-capacity"
USE_UUID = "enflame.com/use-gpuuuid"
NOUSE_UUID = "enflame.com/nouse-gpuuuid"
REQUEST_SIZE = "enflame.com/gcu-request-size"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
ASSIGNED_TIME = "enflame.com/gcu-assigned-time"
ASSIGNED_CONTAINERS = "assigned-containers"
#: ``MemPercentagereq`` markers of a DRS request: slices given directly, or memory/cores "by spec".
MODE_DIRECT = 0
MODE_BY_SPEC = -1
#: Device custom info (registration) and container-device custom info (fit → annotations), HAMi's names.
INFO_MINOR = "minor"
INFO_INDEX = "index"
INFO_PROFILES = "profiles"
INFO_MAX_SLICE = "maxSlice"
INFO_PROFILE_NAME = "profileName"
INFO_PROFILE_ID = "profileID"
INFO_SLICE = "drsSlice"
INFO_REQUEST_MEM = "requestMem"
INFO_REQUEST_CORE = "requestCore"

_GO_INT = re.compile(r"[+-]?[0-9]+")


def make_gcu_backend(cfg: EnflameConfig) -> DeviceBackend:
    """The GCU :class:`DeviceBackend`: count resource only, no registration annotation, no lock."""
    return DeviceBackend(
        name=GCU_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(count=cfg.resource_name_gcu),
        to_allocate_annotation=GCU_TO_ALLOCATE,
        allocated_annotation=GCU_ALLOCATED,
        # Stricter than the standard template (idle cards only), so the numeric prefilter stays exact.
        standard_capacity=True,
        config=cfg,
    )


def make_drs_backend(cfg: EnflameConfig) -> DeviceBackend:
    """The Enflame DRS :class:`DeviceBackend`: only an allocated key, UUID selection, no lock."""
    return DeviceBackend(
        name=DRS_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(count=cfg.drs_resource, memory=cfg.memory_resource, cores=cfg.core_resource),
        register_annotation=DRS_CAPACITY,
        allocated_annotation=DRS_ALLOCATED,
        use_uuid_annotation=USE_UUID,
        nouse_uuid_annotation=NOUSE_UUID,
        # Memreq is a slice count or a spec that the fit turns into a profile: not the standard numbers.
        standard_capacity=False,
        config=cfg,
    )


def make_backends(cfg: EnflameConfig) -> list[DeviceBackend]:
    """Both backends of one ``enflame:`` section (HAMi initialises the two together)."""
    return [make_gcu_backend(cfg), make_drs_backend(cfg)]


# ------------------------------------------------------------------------------------------ helpers
def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _resources(container: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return ((container.get("resources") or {}).get(kind)) or {}


def as_int64(value: Any) -> int | None:
    """Go ``Quantity.AsInt64``: the value when it is a whole number within int64, else ``None``."""
    if value is None:
        return None
    try:
        number = quantity_to_int(value)
    except WireFormatError:
        return None
    if number is None or not INT64_MIN <= number <= INT64_MAX:
        return None
    return number


def quantity_value(value: Any) -> int | None:
    """Go ``Quantity.Value``: the value rounded up to an integer (``None`` when unreadable)."""
    try:
        number = parse_quantity(value)
    except WireFormatError:
        return None
    return -((-number.numerator) // number.denominator)


def _limit_or_request(container: Mapping[str, Any], name: str) -> Any:
    raw = _resources(container, "limits").get(name)
    return raw if raw is not None else _resources(container, "requests").get(name)


def _go_atoi(text: str) -> int | None:
    """Go ``strconv.Atoi`` (``None`` on error)."""
    return int(text) if _GO_INT.fullmatch(text) else None


# ==========================================================================================================
# GCU, whole cards
# ==========================================================================================================
def gcu_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Whole cards from ``status.capacity[<resourceNameGCU>]``: ``<node>-GCU-<i>``, Count 1, 100/100.

    No capacity means no GCU on the node. A capacity that is not a whole number raises
    :class:`WireFormatError` naming the field (the engine keeps the node's previous cards).
    """
    resource = backend.resource_names.count
    name = _metadata(node).get("name", "")
    raw = ((node.get("status") or {}).get("capacity") or {}).get(resource)
    if raw is None:
        return []
    count = as_int64(raw)
    if count is None:
        raise WireFormatError(f"node {name}: status.capacity[{resource}]: {raw!r} is not a whole number of devices")
    check_device_count(count, f"node {name}: status.capacity[{resource}]")
    return [DeviceInfo(id=f"{name}-{GCU_WORD}-{i}", index=i, count=1, devmem=GCU_DEVMEM, devcore=GCU_DEVCORE,
                       type=GCU_WORD, numa=0, health=True) for i in range(max(count, 0))]


def gcu_health(backend: DeviceBackend, node: Mapping[str, Any]) -> HealthReport:
    """HAMi ``CheckHealth`` for GCU: healthy iff ``status.capacity[<resourceNameGCU>] > 0``; always refresh.

    A node without the capacity key has no GCU to be unhealthy about (as hami-core's default health
    treats nodes without devices).
    """
    resource = backend.resource_names.count
    raw = ((node.get("status") or {}).get("capacity") or {}).get(resource)
    if raw is None:
        return HealthReport(True, False)
    if (as_int64(raw) or 0) > 0:
        return HealthReport(True, True)
    return HealthReport(False, True, reason=f"status.capacity[{resource}] is {raw!r}")


def gcu_mutate(backend: DeviceBackend, container: Mapping[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for GCU: the container uses GCU iff its limits name the count resource."""
    return backend.resource_names.count in _resources(container, "limits")


def gcu_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """Whole cards: ``{Nums n, Memreq 100, pct 100, cores 100}`` from limits, else requests.

    A count that is not a positive whole number within int32 is no request.
    """
    nums = as_int64(_limit_or_request(container, backend.resource_names.count))
    if nums is None or nums <= 0 or nums > INT32_MAX:
        return None
    return DeviceRequest(GCU_WORD, nums, GCU_DEVMEM, 100, GCU_DEVCORE)


def gcu_fit(devices: Sequence[DeviceUsage], request: DeviceRequest) -> FitResult:
    """GCU ``Fit``: walk from the preferred (last) device and take idle, healthy cards.

    Checks per device: health (``CardNotHealth``), request type (``CardTypeMismatch``), ``Used > 0``
    (``ExclusiveDeviceAllocateConflict``). Each card books the request's memory (100) and cores (100).
    """
    total = len(devices)
    need = request.nums
    counts: dict[str, int] = {}
    chosen: list[ContainerDevice] = []
    for i in range(total - 1, -1, -1):
        dev = devices[i]
        if not dev.health:
            reason = Reason.CardNotHealth
        elif request.backend != GCU_WORD:
            reason = Reason.CardTypeMismatch
        elif dev.used > 0:
            reason = Reason.ExclusiveDeviceAllocateConflict
        else:
            chosen.append(ContainerDevice(dev.id, GCU_WORD, request.memreq, request.coresreq, dev.index))
            need -= 1
            if need == 0:
                return FitResult.success(chosen)
            continue
        counts[reason] = counts.get(reason, 0) + 1
    if chosen:
        counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
    if not counts:
        return FitResult.unschedulable(Reason.NodeInsufficientDevice)
    return FitResult.unschedulable(*gen_reason_items(counts, total))


def gcu_filter_nodes(request: DeviceRequest, candidates: Sequence[FitCandidate]) -> list[FitResult]:
    """:func:`gcu_fit` on every candidate node."""
    return [gcu_fit(c.devices, request) for c in candidates]


# ==========================================================================================================
# Enflame DRS, hard partitions
# ==========================================================================================================
def parse_profile(name: str) -> tuple[int, int]:
    """``"3g.20gb"`` → ``(3, 20)``: slices and memory GB of a DRS profile name (HAMi ``parseProfile``).

    Unparsable slices give ``(0, 0)``; unparsable memory gives ``(slices, 0)``.
    """
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    size = _go_atoi(parts[0].strip().removesuffix("g"))
    if size is None:
        return 0, 0
    mem = _go_atoi(parts[1].strip().removesuffix("gb"))
    return size, (mem if mem is not None else 0)


def _drs_capacity(raw: Any) -> int | None:
    """A device's ``capacity``: a JSON number (truncated) or a decimal string; ``None`` when unusable."""
    if isinstance(raw, bool) or raw is None:
        return None
    if isinstance(raw, int | float):
        return int(raw) if math.isfinite(raw) else None
    if isinstance(raw, str):
        return _go_atoi(raw.strip())
    return None


def drs_node_devices(node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Parse ``enflame.com/gcu-drs-capacity`` into one device per listed card (HAMi ``GetNodeDevices``).

    Device: ``<node>-enflame-drs-<index>``, Count = capacity (slices), Devmem = largest profile GB * 1024,
    Devcore 100, custom info ``{minor, index, profiles, maxSlice}``. A node without the annotation has
    no DRS device; malformed JSON, no valid profile, a bad capacity or an empty device list raise
    :class:`WireFormatError` naming the annotation.
    """
    name = _metadata(node).get("name", "")
    raw = (_metadata(node).get("annotations") or {}).get(DRS_CAPACITY)
    if raw is None:
        return []
    spec = gojson.loads(raw, DRS_CAPACITY)
    if not isinstance(spec, dict):
        raise wire_error(DRS_CAPACITY, f"must be a JSON object, got {gojson.show(spec)}")
    spec = gojson.fold(spec)
    devices = gojson.get_list(spec, "devices", DRS_CAPACITY)
    profiles = gojson.get_object(spec, "profiles", DRS_CAPACITY) or {}
    for pname, pid in profiles.items():
        if not isinstance(pid, str):
            raise wire_error(DRS_CAPACITY, f"profile {gojson.show(pname)} must map to a string, got {gojson.show(pid)}")
    max_slice = max_mem = 0
    for pname in profiles:
        size, mem = parse_profile(pname)
        max_slice, max_mem = max(max_slice, size), max(max_mem, mem)
    if max_slice <= 0:
        raise wire_error(DRS_CAPACITY, f"no valid drs profiles found on node {name}")
    if max_mem <= 0:
        max_mem = max_slice
    out: list[DeviceInfo] = []
    for pos, entry in enumerate(devices):
        where = f"{DRS_CAPACITY}: devices[{pos}]"
        if not isinstance(entry, dict):
            raise wire_error(where, f"must be an object, got {gojson.show(entry)}")
        entry = gojson.fold(entry)
        index = _go_atoi(gojson.get_str(entry, "index", where))
        if index is None:
            index = pos  # HAMi falls back to the position when the index does not parse
        if index < 0:
            raise wire_error(where, f"index must not be negative, got {index}")
        capacity = _drs_capacity(entry.get("capacity"))
        if capacity is None or capacity <= 0 or capacity > INT32_MAX:
            raise wire_error(where, f"invalid drs capacity {gojson.show(entry.get('capacity'))} on node {name}")
        minor = gojson.get_str(entry, "minor", where).strip() or str(index)
        out.append(DeviceInfo(
            id=f"{name}-enflame-drs-{index}", index=index, count=capacity, devmem=max_mem * 1024, devcore=100,
            type=DRS_WORD, numa=0, health=True,
            custom_info={INFO_MINOR: minor, INFO_INDEX: str(index), INFO_PROFILES: dict(profiles),
                         INFO_MAX_SLICE: max_slice}))
    if not out:
        raise wire_error(DRS_CAPACITY, f"no drs devices found on node {name}")
    return out


def drs_health() -> HealthReport:
    """HAMi ``CheckHealth`` for Enflame DRS: always healthy, always refresh."""
    return HealthReport(True, True)


def _positive_value(container: Mapping[str, Any], name: str) -> tuple[Any, int | None]:
    raw = _limit_or_request(container, name)
    return raw, (None if raw is None else quantity_value(raw))


def drs_mutate(backend: DeviceBackend, container: dict[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for Enflame DRS: validate and mirror limits/requests.

    Direct mode (slice-count resource in limits or requests): the count must be > 0. Spec mode
    (memory and/or cores): memory must be > 0 and cores in (0, 100]. The quantity found is copied to
    whichever of limits/requests lacks it. Violations raise :class:`AdmissionFailed`.
    """
    names = backend.resource_names
    cname = container.get("name", "")
    count_raw, count = _positive_value(container, names.count)
    if count_raw is not None:
        if count is None or count <= 0:
            raise AdmissionFailed(f"container {cname}: {names.count} must be greater than 0")
        _mirror(container, names.count)
        return True
    mem_raw, mem = _positive_value(container, names.memory)
    core_raw, core = _positive_value(container, names.cores)
    if mem_raw is None and core_raw is None:
        return False
    if mem_raw is not None and (mem is None or mem <= 0):
        raise AdmissionFailed(f"container {cname}: {names.memory} must be greater than 0")
    if core_raw is not None and (core is None or core <= 0 or core > 100):
        raise AdmissionFailed(f"container {cname}: {names.cores} must be in range (0,100]")
    for name, raw in ((names.memory, mem_raw), (names.cores, core_raw)):
        if raw is not None:
            _mirror(container, name)
    return True


def _mirror(container: dict[str, Any], name: str) -> None:
    """Copy ``name`` from limits to requests or back, where it is missing (limits win)."""
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    value = limits.get(name)
    if value is None or quantity_value(value) == 0:
        value = requests.get(name, value)
    if name not in limits:
        resources["limits"] = {**limits, name: value}
    if name not in requests:
        resources["requests"] = {**requests, name: value}


def drs_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for Enflame DRS; always ``Nums 1``.

    Direct mode: a positive whole slice count → ``{Memreq slices, pct 0, cores 0}``. Otherwise spec mode:
    memory and/or cores (``Quantity.Value``) → ``{Memreq memory, pct -1, cores}``. Values beyond int32
    drop the request; so do negative values, which admission rejects anyway.
    """
    names = backend.resource_names
    slices = as_int64(_limit_or_request(container, names.count))
    if slices is not None and slices > 0:
        if slices > INT32_MAX:
            return None
        return DeviceRequest(DRS_WORD, 1, slices, MODE_DIRECT, 0)
    mem_raw, mem = _positive_value(container, names.memory)
    core_raw, core = _positive_value(container, names.cores)
    if mem_raw is None and core_raw is None:
        return None
    mem, core = mem or 0, core or 0
    if not (0 <= mem <= INT32_MAX and 0 <= core <= INT32_MAX):
        return None
    return DeviceRequest(DRS_WORD, 1, mem, MODE_BY_SPEC, core)


@dataclass(frozen=True, slots=True)
class Profile:
    """A DRS profile a node offers: ``3g.20gb`` = 3 slices, 20 GB, ``ceil(3 * 100 / maxSlice)`` % cores."""

    name: str
    id: str
    size: int
    memory_gb: int
    core_percent: int


def node_profiles(devices: Sequence[DeviceUsage]) -> list[Profile]:
    """Every profile of the node's devices, smallest first (by slices, then memory GB, then name)."""
    infos = [d.info.custom_info or {} for d in devices]
    max_slice = max((_info_int(i, INFO_MAX_SLICE) for i in infos), default=0)
    if max_slice <= 0:
        max_slice = max((parse_profile(p)[0] for i in infos for p in _info_profiles(i)), default=0)
    if max_slice <= 0:
        return []
    seen: dict[str, Profile] = {}
    for info in infos:
        for pname, pid in _info_profiles(info).items():
            size, mem = parse_profile(pname)
            if size > 0 and mem > 0:
                seen[pname] = Profile(pname, pid, size, mem, math.ceil(size * 100 / max_slice))
    return sorted(seen.values(), key=lambda p: (p.size, p.memory_gb, p.name))


def _info_profiles(info: Mapping[str, Any]) -> dict[str, str]:
    raw = info.get(INFO_PROFILES)
    if not isinstance(raw, Mapping):
        return {}
    return {k: v for k, v in raw.items() if isinstance(v, str)}


def _info_int(info: Mapping[str, Any] | None, key: str) -> int:
    raw = (info or {}).get(key)
    if isinstance(raw, bool):
        return 0
    if isinstance(raw, int | float):
        return int(raw)
    if isinstance(raw, str):
        return _go_atoi(raw.strip()) or 0
    return 0


def _info_str(info: Mapping[str, Any] | None, key: str) -> str:
    raw = (info or {}).get(key)
    if raw is None:
        return ""
    if isinstance(raw, float):
        return str(int(raw))
    return str(raw)


def memory_request_gb(raw: int, max_profile_gb: int) -> int:
    """HAMi ``normalizeMemoryRequestToGB``: a value above 2 * the largest profile GB is MiB, rounded up."""
    if raw <= 0:
        return 0
    if max_profile_gb <= 0 or raw <= 2 * max_profile_gb:
        return raw
    return -(-raw // 1024)


def select_profile(profiles: Sequence[Profile], request: DeviceRequest) -> tuple[Profile, int, int] | None:
    """The profile for ``request`` plus the normalised (memory GB, core %) it asked for.

    Direct mode: the profile whose size equals the slices. Spec mode: the smallest profile with
    memory ≥ the request and core % ≥ the request (zero means "any").
    """
    if not profiles:
        return None
    if request.mem_percentage == MODE_DIRECT:
        for p in profiles:
            if p.size == request.memreq:
                return p, 0, 0
        return None
    # HAMi takes the last profile of the size-sorted list as "the largest memory".
    mem_gb = memory_request_gb(request.memreq, profiles[-1].memory_gb)
    for p in profiles:
        if mem_gb > 0 and p.memory_gb < mem_gb:
            continue
        if request.coresreq > 0 and p.core_percent < request.coresreq:
            continue
        return p, mem_gb, request.coresreq
    return None


def _uuid_ok(annotations: Mapping[str, str], uuid: str) -> bool:
    """``enflame.com/use-gpuuuid`` / ``nouse-gpuuuid`` (comma lists, trimmed, exact) against a device id."""
    use = split_list(annotations.get(USE_UUID))
    if use and uuid not in use:
        return False
    return uuid not in split_list(annotations.get(NOUSE_UUID))


def drs_fit(devices: Sequence[DeviceUsage], request: DeviceRequest, annotations: Mapping[str, str], *,
            mutex: bool = False, extra_used: Mapping[str, int] | None = None) -> FitResult:
    """Enflame DRS ``Fit``: choose the profile, then one device that can host it.

    No matching profile → ``"1/<devices> ModeNotFit"``. Per device, from the preferred (last): health,
    type, UUID selection, ``Count <= Used`` (slots), ``mutex`` and ``Used > 0``, free memory < profile
    memory (MiB), free cores < profile core %. The chosen device books the **profile's** memory and
    cores, and carries the profile in ``custom_info`` for the annotations. ``extra_used`` adds, per
    device id, the slices beyond one that earlier containers of the pod took (HAMi's ``AddResourceUsage``
    adds the slice count to ``Used`` while the engine books one).
    """
    total = len(devices)
    picked = select_profile(node_profiles(devices), request)
    if picked is None:
        return FitResult.unschedulable(*gen_reason_items({Reason.ModeNotFit: 1}, total))
    profile, mem_gb, core_pct = picked
    mem = profile.memory_gb * 1024
    cores = max(profile.core_percent, 1)
    extra = extra_used or {}
    counts: dict[str, int] = {}
    for i in range(total - 1, -1, -1):
        dev = devices[i]
        used = dev.used + extra.get(dev.id, 0)
        if not dev.health:
            reason = Reason.CardNotHealth
        elif request.backend != DRS_WORD:
            reason = Reason.CardTypeMismatch
        elif not _uuid_ok(annotations, dev.id):
            reason = Reason.CardUuidMismatch
        elif dev.count <= used:
            reason = Reason.CardTimeSlicingExhausted
        elif mutex and used > 0:
            reason = Reason.ExclusiveDeviceAllocateConflict
        elif dev.totalmem - dev.usedmem < mem:
            reason = Reason.CardInsufficientMemory
        elif dev.totalcore > 0 and dev.totalcore - dev.usedcores < cores:
            reason = Reason.CardInsufficientCore
        else:
            info = dev.info.custom_info
            return FitResult.success([ContainerDevice(dev.id, DRS_WORD, mem, cores, dev.index, custom_info={
                INFO_PROFILE_NAME: profile.name, INFO_PROFILE_ID: profile.id,
                INFO_MINOR: _info_str(info, INFO_MINOR), INFO_INDEX: _info_str(info, INFO_INDEX),
                INFO_SLICE: profile.size, INFO_REQUEST_MEM: mem_gb, INFO_REQUEST_CORE: core_pct})])
        counts[reason] = counts.get(reason, 0) + 1
    if not counts:
        return FitResult.unschedulable(Reason.NodeInsufficientDevice)
    return FitResult.unschedulable(*gen_reason_items(counts, total))


def _init_count(pod: Mapping[str, Any]) -> int:
    return len(((pod.get("spec") or {}).get("initContainers")) or [])


def drs_filter_nodes(pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                     policy: GpuPolicy) -> list[FitResult]:
    """:func:`drs_fit` on every candidate, counting the slices earlier app containers of the pod took."""
    annotations = annotations_of(pod)
    init_count = _init_count(pod)
    mutex = policy.gpu == "mutex"
    out = []
    for cand in candidates:
        earlier = cand.allocated.get(DRS_WORD, ())
        extra: dict[str, int] = {}
        if len(earlier) >= init_count:  # an app container: earlier app containers' slices add up
            for ctr in earlier[init_count:]:
                for d in ctr:
                    slices = max(_info_int(d.custom_info, INFO_SLICE), 1)
                    extra[d.uuid] = extra.get(d.uuid, 0) + slices - 1
        out.append(drs_fit(cand.devices, request, annotations, mutex=mutex, extra_used=extra))
    return out


def container_name(pod: Mapping[str, Any], position: int) -> str:
    """The name of the container at ``position`` (init containers first), or ``container-<position>``."""
    spec = pod.get("spec") or {}
    init = spec.get("initContainers") or []
    app = spec.get("containers") or []
    if position < len(init):
        return str(init[position].get("name", ""))
    if 0 <= position - len(init) < len(app):
        return str(app[position - len(init)].get("name", ""))
    return f"container-{position}"


def drs_annotations(pod: Mapping[str, Any], devices: PodSingleDevice, now_ns: int) -> dict[str, str]:
    """The DRS annotations HAMi's ``PatchAnnotations`` adds beside ``hami.io/enflame-vgpu-devices-allocated``.

    ``enflame.com/gcu-assigned=false``, ``gcu-assigned-time`` (Unix ns), and from the first container
    with a device: ``gcu-assigned-index`` = ``gcu-assigned-id`` = device index, ``gcu-assigned-minor``,
    ``gcu-request-size`` (slices); ``assigned-containers`` = JSON by container name
    ``{"allocated":false,"request":<slices>,"profileID":..,"profileName":..}``.
    """
    out = {ASSIGNED: "false", ASSIGNED_TIME: str(now_ns)}
    assigned: dict[str, dict[str, Any]] = {}
    for pos, ctr in enumerate(devices):
        if not ctr:
            continue
        first = ctr[0]
        info = first.custom_info
        slices = _info_int(info, INFO_SLICE)
        if slices <= 0:
            slices = 1
        entry: dict[str, Any] = {"allocated": False, "request": slices}
        for key in (INFO_PROFILE_ID, INFO_PROFILE_NAME):
            if value := _info_str(info, key):
                entry[key] = value
        assigned[container_name(pod, pos)] = entry
        index = _info_str(info, INFO_INDEX)
        if index and ASSIGNED_INDEX not in out:
            out[ASSIGNED_INDEX] = out[ASSIGNED_ID] = index
        minor = _info_str(info, INFO_MINOR)
        if minor and ASSIGNED_MINOR not in out:
            out[ASSIGNED_MINOR] = minor
        out.setdefault(REQUEST_SIZE, str(slices))
    if assigned:
        out[ASSIGNED_CONTAINERS] = gojson.dumps(dict(sorted(assigned.items())))
    return out
