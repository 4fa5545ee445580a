"""HAMi's Enflame DRS backend, hard partitions (``pkg/device/enflame/device.go``, vendors.md Part I).

The device plugin publishes its cards and DRS profiles (``1g.6gb``, ``3g.20gb`` ...) as JSON on
``enflame.com/gcu-drs-capacity``; a container asks for a number of slices (direct mode) or for memory/cores
(spec mode) and the fit picks the profile, booking its memory and core share. HAMi's generic rules are the DRS
backend's for decoding the allocated key; there is no node lock and no node score (HAMi's ``ScoreNode`` is 0).
Everything else is its own: registration, health, admission, the request, the fit and the extra pod annotations.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.plugins import (
    AdmissionFailed,
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    Mutation,
    PodSingleDevice,
    QuotaView,
    ResourceNames,
    Selection,
    StandardBackend,
    as_int64,
    containers,
    metadata,
    quantity_value,
    resource,
    standard_allocation_annotations,
    unix_nanos,
)

# Not from hami_core.plugins: there the name ``annotations`` is the ``from __future__ import annotations`` feature.
from hami_core.plugins.objects import annotations
from hami_core.wire import gojson
from hami_core.wire.common import INT32_MAX, wire_error
from hami_core.wire.reasons import Reason, gen_reason_items
from hami_enflame.config import VENDOR, EnflameConfig

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


# ------------------------------------------------------------------------------------------ helpers
def _go_atoi(text: str) -> int | None:
    """Go ``strconv.Atoi`` (``None`` on error)."""
    return int(text) if _GO_INT.fullmatch(text) else None


def _positive_value(container: Mapping[str, Any], name: str | None) -> tuple[Any, int | None]:
    """A resource as written (limits, else requests) and its ``Quantity.Value``."""
    raw = resource(container, name)
    return raw, (None if raw is None else quantity_value(raw))


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


# ------------------------------------------------------------------------------------------ profiles
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


@dataclass(frozen=True, slots=True)
class DrsBackend(StandardBackend):
    """Enflame DRS partitions (HAMi's ``EnflameDevices``)."""

    @classmethod
    def from_config(cls, cfg: EnflameConfig) -> DrsBackend:
        """Only an allocated key, UUID selection, no lock."""
        return cls(name=DRS_WORD, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.drs_resource, memory=cfg.memory_resource,
                                                cores=cfg.core_resource),
                   register_annotation=DRS_CAPACITY, allocated_annotation=DRS_ALLOCATED,
                   use_uuid_annotation=USE_UUID, nouse_uuid_annotation=NOUSE_UUID,
                   # Memreq is a slice count or a spec that the fit turns into a profile: not the standard numbers.
                   standard_capacity=False, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """Parse ``enflame.com/gcu-drs-capacity`` into one device per listed card (HAMi ``GetNodeDevices``).

        Device: ``<node>-enflame-drs-<index>``, Count = capacity (slices), Devmem = largest profile GB * 1024,
        Devcore 100, custom info ``{minor, index, profiles, maxSlice}``. A node without the annotation has
        no DRS device; malformed JSON, no valid profile, a bad capacity or an empty device list raise
        :class:`WireFormatError` naming the annotation.
        """
        name = metadata(node).get("name", "")
        raw = annotations(node).get(DRS_CAPACITY)
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
                raise wire_error(DRS_CAPACITY,
                                 f"profile {gojson.show(pname)} must map to a string, got {gojson.show(pid)}")
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

    def hami_node_health(self, node: Mapping[str, Any], devices: Sequence[DeviceInfo], now: float) -> HealthReport:
        """HAMi ``CheckHealth`` for Enflame DRS: always healthy, always refresh."""
        return HealthReport(True, True)

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission`` for Enflame DRS: validate and mirror limits/requests.

        Direct mode (slice-count resource in limits or requests): the count must be > 0. Spec mode
        (memory and/or cores): memory must be > 0 and cores in (0, 100]. The quantity found is copied to
        whichever of limits/requests lacks it. Violations raise :class:`AdmissionFailed`.
        """
        names = self.resource_names
        cname = container.get("name", "")
        count_raw, count = _positive_value(container, names.count)
        if count_raw is not None:
            if count is None or count <= 0:
                raise AdmissionFailed(f"container {cname}: {names.count} must be greater than 0")
            _mirror(container, names.count)
            return Mutation(True)
        mem_raw, mem = _positive_value(container, names.memory)
        core_raw, core = _positive_value(container, names.cores)
        if mem_raw is None and core_raw is None:
            return Mutation(False)
        if mem_raw is not None and (mem is None or mem <= 0):
            raise AdmissionFailed(f"container {cname}: {names.memory} must be greater than 0")
        if core_raw is not None and (core is None or core <= 0 or core > 100):
            raise AdmissionFailed(f"container {cname}: {names.cores} must be in range (0,100]")
        for name, raw in ((names.memory, mem_raw), (names.cores, core_raw)):
            if name and raw is not None:
                _mirror(container, name)
        return Mutation(True)

    # ----------------------------------------------------------------------------------- requests
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        """HAMi ``GenerateResourceRequests`` for Enflame DRS; always ``Nums 1``.

        Direct mode: a positive whole slice count → ``{Memreq slices, pct 0, cores 0}``. Otherwise spec mode:
        memory and/or cores (``Quantity.Value``) → ``{Memreq memory, pct -1, cores}``. Values beyond int32
        drop the request; so do negative values, which admission rejects anyway.
        """
        names = self.resource_names
        slices = as_int64(resource(container, names.count))
        if slices is not None and slices > 0:
            if slices > INT32_MAX:
                return None
            return DeviceRequest(self.name, 1, slices, MODE_DIRECT, 0)
        mem_raw, mem = _positive_value(container, names.memory)
        core_raw, core = _positive_value(container, names.cores)
        if mem_raw is None and core_raw is None:
            return None
        mem, core = mem or 0, core or 0
        if not (0 <= mem <= INT32_MAX and 0 <= core <= INT32_MAX):
            return None
        return DeviceRequest(self.name, 1, mem, MODE_BY_SPEC, core)

    # ----------------------------------------------------------------------------------- fit
    def fit(self, devices: Sequence[DeviceUsage], request: DeviceRequest, pod_annotations: Mapping[str, str], *,
            mutex: bool = False, extra_used: Mapping[str, int] | None = None) -> FitResult:
        """Enflame DRS ``Fit``: choose the profile, then one device that can host it.

        No matching profile → ``"1/<devices> ModeNotFit"``. Per device, from the preferred (last): health,
        type, UUID selection (``enflame.com/use-gpuuuid`` / ``nouse-gpuuuid`` in ``pod_annotations``),
        ``Count <= Used`` (slots), ``mutex`` and ``Used > 0``, free memory < profile memory (MiB), free cores <
        profile core %. The chosen device books the **profile's** memory and cores, and carries the profile in
        ``custom_info`` for the annotations. ``extra_used`` adds, per device id, the slices beyond one that
        earlier containers of the pod took (HAMi's ``AddResourceUsage`` adds the slice count to ``Used`` while
        the engine books one).
        """
        total = len(devices)
        picked = select_profile(node_profiles(devices), request)
        if picked is None:
            return FitResult.unschedulable(*gen_reason_items({Reason.ModeNotFit: 1}, total))
        profile, mem_gb, core_pct = picked
        mem = profile.memory_gb * 1024
        cores = max(profile.core_percent, 1)
        extra = extra_used or {}
        sel = Selection(pod_annotations, use_type=None, nouse_type=None, use_uuid=self.use_uuid_annotation,
                        nouse_uuid=self.nouse_uuid_annotation)
        counts: dict[str, int] = {}
        for i in range(total - 1, -1, -1):
            dev = devices[i]
            used = dev.used + extra.get(dev.id, 0)
            if not dev.health:
                reason = Reason.CardNotHealth
            elif request.backend != self.name:
                reason = Reason.CardTypeMismatch
            elif not sel.uuid_ok(dev.id):
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
                return FitResult.success([ContainerDevice(dev.id, self.name, mem, cores, dev.index, custom_info={
                    INFO_PROFILE_NAME: profile.name, INFO_PROFILE_ID: profile.id,
                    INFO_MINOR: _info_str(info, INFO_MINOR), INFO_INDEX: _info_str(info, INFO_INDEX),
                    INFO_SLICE: profile.size, INFO_REQUEST_MEM: mem_gb, INFO_REQUEST_CORE: core_pct})])
            counts[reason] = counts.get(reason, 0) + 1
        if not counts:
            return FitResult.unschedulable(Reason.NodeInsufficientDevice)
        return FitResult.unschedulable(*gen_reason_items(counts, total))

    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        """:meth:`fit` on every candidate, counting the slices earlier app containers of the pod took."""
        pod_annotations = annotations(pod)
        init_count = len(containers(pod)[0])
        mutex = policy.has("mutex")  # a token of the policy chain (HAMi v2.10, PR #2621: "binpack,mutex" too)
        out = []
        for cand in candidates:
            earlier = cand.allocated.get(self.name, ())
            extra: dict[str, int] = {}
            if len(earlier) >= init_count:  # an app container: earlier app containers' slices add up
                for ctr in earlier[init_count:]:
                    for d in ctr:
                        slices = max(_info_int(d.custom_info, INFO_SLICE), 1)
                        extra[d.uuid] = extra.get(d.uuid, 0) + slices - 1
            out.append(self.fit(cand.devices, request, pod_annotations, mutex=mutex, extra_used=extra))
        return out

    # ----------------------------------------------------------------------------------- annotations
    def hami_allocation_annotations(self, pod: Mapping[str, Any], devices: PodSingleDevice,
                                    now: float) -> Mapping[str, str] | None:
        """The allocated key, plus the DRS annotations HAMi's ``PatchAnnotations`` adds when a container got a
        device (:func:`drs_annotations`, the time in Unix nanoseconds)."""
        out = dict(standard_allocation_annotations(self, devices) or {})
        if any(devices):
            out.update(drs_annotations(pod, devices, unix_nanos(now)))
        return out


# ------------------------------------------------------------------------------------------ annotations
def container_name(pod: Mapping[str, Any], position: int) -> str:
    """The name of the container at ``position`` (init containers first), or ``container-<position>``."""
    init, app = containers(pod)
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
