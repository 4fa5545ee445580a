"""HAMi's Ascend backends, scheduler side (vendors.md Part C; A.3-A.9 for the shared contract).

Pure functions over plain Kubernetes JSON; :mod:`hami_ascend.plugin` wires them to the hooks. One
backend exists per configured chip model; its common word (``Ascend910B3``, ...) is the request Type.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hami_ascend.config import AscendConfig, BackendConfig, ChipConfig
from hami_core.default_plugins.health import generic_health
from hami_core.plugins.errors import AdmissionFailed, WireFormatError
from hami_core.plugins.fit import memory_to_book
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
    NodeScore,
    PodSingleDevice,
    ResourceNames,
    ScoreCandidate,
)
from hami_core.wire import gojson as _json
from hami_core.wire.common import INT32_MAX, split_list
from hami_core.wire.keys import NODE_LOCK
from hami_core.wire.nodes import decode_node_devices_json
from hami_core.wire.quantity import parse_quantity, quantity_to_int
from hami_core.wire.reasons import Reason
from hami_core.wire.times import encode_unix_seconds

VENDOR = "ascend"
#: Pod annotation selecting hami-core soft split (arbitrary memory and cores) instead of templates.
VNPU_MODE = "huawei.com/vnpu-mode"
VNPU_MODE_HAMI_CORE = "hami-core"
#: Node annotation written by the device plugin; overrides the global ``hamiVnpuCore`` for the node.
NODE_VNPU_CORE = "hami-vnpu-core"
#: Pod annotation with the decision time in Unix seconds (no ``hami.io/`` prefix, as in HAMi).
PREDICATE_TIME = "predicate-time"
#: Environment variable blanked by ``overwriteEnv`` in containers that do not request the chip.
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"
#: Common-word prefix of the chips with HCCS network topology (NetworkID in the registration).
ASCEND910_PREFIX = "Ascend910"
#: The 910C common word: NPUs come in modules of two (``index // 2``).
ASCEND910C = "Ascend910C"
NETWORK_ID = "NetworkID"
NETWORK_WEIGHT = 10
MODULE_NPUS = 2


def backends(cfg: AscendConfig) -> list[DeviceBackend]:
    """One :class:`DeviceBackend` per chip of a validated ``vnpus:`` section (C.1)."""
    return [make_backend(chip, hami_vnpu_core=cfg.hami_vnpu_core) for chip in cfg.chips()]


def make_backend(chip: ChipConfig, *, hami_vnpu_core: bool = False) -> DeviceBackend:
    """The backend of one chip: HAMi's per-common-word annotation keys and the shared node lock (C.3, C.8).

    ``standard_capacity`` stays off: in hami-core mode a device's core total is taken as 100 whatever
    ``devcore`` it registers, so the engine's numeric prefilter could drop a node that fits.
    """
    word = chip.common_word
    return DeviceBackend(
        name=word,
        vendor=VENDOR,
        resource_names=ResourceNames(count=chip.resource_name, memory=chip.resource_memory_name,
                                     cores=chip.resource_core_name, memory_factor=max(chip.memory_factor, 1)),
        register_annotation=f"hami.io/node-register-{word}",
        handshake_annotation=f"hami.io/node-handshake-{word}",
        to_allocate_annotation=f"hami.io/{word}-devices-to-allocate",
        allocated_annotation=f"hami.io/{word}-devices-allocated",
        use_uuid_annotation=f"hami.io/use-{word}-uuid",
        nouse_uuid_annotation=f"hami.io/no-use-{word}-uuid",
        lock_annotation=NODE_LOCK,
        standard_capacity=False,
        config=BackendConfig(chip=chip, hami_vnpu_core=hami_vnpu_core),
    )


def chip_of(backend: DeviceBackend) -> ChipConfig:
    cfg: BackendConfig = backend.config
    return cfg.chip


def runtime_annotation(backend: DeviceBackend) -> str:
    """``huawei.com/<commonWord>``: the runtime-info JSON the device plugin reads (C.3)."""
    return f"huawei.com/{backend.name}"


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def is_hami_core_pod(pod: Mapping[str, Any]) -> bool:
    """The pod asks for hami-core soft split: ``huawei.com/vnpu-mode: hami-core`` (C.3)."""
    return _annotations(pod).get(VNPU_MODE) == VNPU_MODE_HAMI_CORE


def node_supports_hami_core(backend: DeviceBackend, node_annotations: Mapping[str, str]) -> bool:
    """C.7.1: the node's ``hami-vnpu-core`` annotation (``"true"`` or not) when present, else ``hamiVnpuCore``."""
    value = node_annotations.get(NODE_VNPU_CORE)
    if value is not None:
        return value == "true"
    cfg: BackendConfig = backend.config
    return cfg.hami_vnpu_core


# ------------------------------------------------------------------------------------------ inventory
def node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Devices from ``hami.io/node-register-<commonWord>`` (C.3): a JSON list, keys case-insensitive.

    No annotation (or a blank one) means no devices of this chip; malformed JSON raises
    :class:`WireFormatError` naming the annotation, so the engine keeps the node's previous devices.
    """
    key = backend.register_annotation or f"hami.io/node-register-{backend.name}"
    raw = _annotations(node).get(key)
    if raw is None or not raw.strip():
        return []
    return decode_node_devices_json(raw, key=key)


def node_health(backend: DeviceBackend, node: Mapping[str, Any], devices: Sequence[DeviceInfo],
                now: float) -> HealthReport:
    """HAMi's generic handshake rule (A.5) for nodes that register this chip; nothing for the others.

    HAMi's registration loop checks health only after ``GetNodeDevices`` succeeded, and Ascend's fails
    without a registration, so a node without the chip never gets its ``Requesting_`` mark.
    """
    if not devices:
        return HealthReport(True, False)
    return generic_health(backend, node, now)


# ------------------------------------------------------------------------------------------ quantities
def _resource(container: Mapping[str, Any], name: str, *, limits_only: bool = False) -> Any:
    """A container resource: limits first, then requests (HAMi reads limits, falling back to requests)."""
    if not name:
        return None
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get(name)
    if value is None and not limits_only:
        value = (res.get("requests") or {}).get(name)
    return value


def _as_int64(value: Any) -> int | None:
    """Go ``Quantity.AsInt64``: the exact integer value, or ``None`` (non-integer or malformed)."""
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


def _value(value: Any, what: str) -> int:
    """Go ``Quantity.Value``: the value rounded up to an integer; malformed quantities reject the pod."""
    try:
        return math.ceil(parse_quantity(value))
    except WireFormatError as exc:
        raise AdmissionFailed(f"{what}: {exc}") from None


# ------------------------------------------------------------------------------------------ admission
def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = container.setdefault("env", [])
    for item in env:
        if item.get("name") == name:
            item["value"] = value
            return
    env.append({"name": name, "value": value})


def mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for one Ascend chip (C.5); returns whether the container requests it.

    Only a count in **limits** counts. 910C super-pod requests of 1 become 2 (odd counts > 1 are refused);
    hard split refuses ``-core`` requests and rounds memory up to a template (or the whole card); memory
    limit and request are then both set to the final value. Raises :class:`AdmissionFailed`.
    """
    chip = chip_of(backend)
    names = backend.resource_names
    cname = container.get("name", "<unnamed>")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if names.count not in limits:
        if not resources:
            del container["resources"]
        if chip.overwrite_env:
            _set_env(container, VISIBLE_DEVICES_ENV, "")
        return False
    resources["limits"] = limits
    count = _value(limits[names.count], f"container {cname}: {names.count}")
    if chip.common_word == ASCEND910C and chip.super_pod:
        if count == 1:
            # The smallest unit is one module of two NPUs.
            limits[names.count] = "2"
            requests = resources.get("requests")
            if requests is not None and names.count in requests:
                requests[names.count] = "2"
        elif count % 2 != 0:
            raise AdmissionFailed(f"container {cname}: {ASCEND910C} device request must be 1 or 2*n, got {count}")
    hami_core = is_hami_core_pod(pod)
    if not hami_core and names.cores:
        raw_core = _resource(container, names.cores)
        if raw_core is not None and _value(raw_core, f"container {cname}: {names.cores}") > 0:
            raise AdmissionFailed(f"container {cname}: {names.cores} is only supported in hami-core (soft split) "
                                  f"mode; set the pod annotation {VNPU_MODE}: {VNPU_MODE_HAMI_CORE}")
    memory = chip.memory_allocatable
    raw_mem = limits.get(names.memory) if names.memory else None
    if raw_mem is not None:
        value = _value(raw_mem, f"container {cname}: {names.memory}")
        if hami_core:
            memory = value
        else:
            memory, _ = chip.trim(value)
            if memory <= 0:
                raise AdmissionFailed(f"container {cname}: {names.memory} {value} is invalid "
                                      f"(more than the {chip.memory_capacity} MiB of a {chip.common_word})")
    if not hami_core and count > 1 and memory != chip.memory_allocatable:
        raise AdmissionFailed(f"container {cname}: vNPU not supported for multiple devices "
                              f"({names.count}={count} with {names.memory}={memory})")
    if names.memory:
        limits[names.memory] = str(memory)
        requests = resources.get("requests")
        if requests is None:
            requests = resources["requests"] = {}
        requests[names.memory] = str(memory)
    spec = pod.setdefault("spec", {})
    if not spec.get("runtimeClassName") and chip.runtime_class_name:
        spec["runtimeClassName"] = chip.runtime_class_name
    return True


# ------------------------------------------------------------------------------------------ requests
def container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for one Ascend chip (C.6).

    Count (limits, then requests) must be an integer in 1..MaxInt32. Memory: negative, beyond MaxInt32
    or overflowing after ``memoryFactor`` drops the request; a non-integer quantity is ignored. Cores
    come from ``-core`` (0..MaxInt32, default 0). ``mem_percentage`` is 100 without memory, else 0.
    """
    names = backend.resource_names
    nums = _as_int64(_resource(container, names.count))
    if nums is None or not 1 <= nums <= INT32_MAX:
        return None
    memreq = 0
    raw_mem = _resource(container, names.memory)
    if raw_mem is not None:
        mem = _as_int64(raw_mem)
        if mem is not None:
            if mem < 0 or mem > INT32_MAX:
                return None
            factor = names.memory_factor
            if factor > 1:
                mem *= factor
                if mem > INT32_MAX:
                    return None
            memreq = mem
    cores = 0
    raw_cores = _resource(container, names.cores)
    if raw_cores is not None:
        try:
            cores = math.ceil(parse_quantity(raw_cores))
        except WireFormatError:
            return None
        if not 0 <= cores <= INT32_MAX:
            return None
    return DeviceRequest(backend.name, nums, memreq, 100 if memreq == 0 else 0, cores)


# ------------------------------------------------------------------------------------------ fit
def _network_id(info: Mapping[str, Any] | None) -> int | None:
    """The registration's ``NetworkID`` as Go reads it (a JSON number), else ``None``."""
    value = (info or {}).get(NETWORK_ID)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _has_network_id(devices: Sequence[DeviceUsage]) -> bool:
    """C.7.2: every device carries a ``NetworkID`` key in its custom info."""
    return all(d.info.custom_info is not None and NETWORK_ID in d.info.custom_info for d in devices)


def _reasons(counts: Mapping[str, int], total: int) -> tuple[str, ...]:
    # HAMi's GenReason prints every map entry, zero included (a 910C pairing that finds no module).
    return tuple(sorted(f"{count}/{total} {reason}" for reason, count in counts.items()))


def _pair_modules(accepted: Sequence[ContainerDevice], nums: int) -> list[ContainerDevice]:
    """C.7.5: whole 910C modules (``index // 2``) whose two NPUs are both candidates, until ``nums``.

    Modules are taken fullest first, ties in the order their first NPU was accepted (the preferred one).
    """
    modules: dict[int, list[ContainerDevice]] = {}
    for dev in accepted:
        modules.setdefault(dev.idx // MODULE_NPUS, []).append(dev)
    chosen: list[ContainerDevice] = []
    left = nums
    for module in sorted(modules.values(), key=len, reverse=True):
        if left <= 0:
            break
        if len(module) == MODULE_NPUS:
            chosen.extend(module)
            left -= MODULE_NPUS
    return chosen


def _by_network(accepted: Sequence[ContainerDevice], nums: int) -> list[ContainerDevice]:
    """C.7.6: fill from the largest NetworkID group first (ties: first accepted group first)."""
    groups: dict[int, list[ContainerDevice]] = {}
    for dev in accepted:
        nid = _network_id(dev.custom_info)
        if nid is not None:
            groups.setdefault(nid, []).append(dev)
    chosen: list[ContainerDevice] = []
    for group in sorted(groups.values(), key=len, reverse=True):
        for dev in group:
            chosen.append(dev)
            if len(chosen) == nums:
                return chosen
    return chosen


class _Selection:
    """The pod's ``hami.io/use-<cw>-uuid`` / ``no-use-<cw>-uuid`` lists (A.8 ``CheckUUID``)."""

    __slots__ = ("nouse", "use")

    def __init__(self, backend: DeviceBackend, pod: Mapping[str, Any]) -> None:
        annos = _annotations(pod)
        self.use = frozenset(split_list(annos.get(backend.use_uuid_annotation or "")))
        self.nouse = frozenset(split_list(annos.get(backend.nouse_uuid_annotation or "")))

    def ok(self, dev: DeviceUsage) -> bool:
        if self.use and dev.id not in self.use:
            return False
        return not (self.nouse and dev.id in self.nouse)


def fit_node(backend: DeviceBackend, devices: Sequence[DeviceUsage], request: DeviceRequest, *, hami_core: bool,
             node_hami_core: bool, selection: _Selection, mutex: bool) -> FitResult:
    """HAMi's Ascend ``Fit`` on one node (C.7), walking ``devices`` from the last (preferred) to the first.

    Per device, in A.7's order: health, type (request Type = common word), UUID lists, free slot,
    ``mutex``, memory, cores, exclusive card, exhausted compute; in hami-core mode the core checks use a
    total of 100 instead of the registered ``devcore``. Every candidate is collected (instead of stopping
    at ``nums``) in topology mode and for 910C requests of more than one NPU, then chosen by module pairs
    or NetworkID groups. Chosen devices carry the registration's custom info (for the node score).
    """
    total = len(devices)
    if hami_core and not node_hami_core:
        return FitResult.unschedulable(f"1/{total} {Reason.ModeNotFit}")
    nums = request.nums
    pair_910c = request.backend == ASCEND910C and nums > 1
    topology = backend.name.startswith(ASCEND910_PREFIX) and _has_network_id(devices)
    collect = topology or pair_910c
    cores = min(request.coresreq, 100)
    type_ok = request.backend == backend.name
    counts: dict[str, int] = {}
    accepted: list[ContainerDevice] = []

    def fail(reason: str) -> None:
        counts[reason] = counts.get(reason, 0) + 1

    for i in range(total - 1, -1, -1):
        dev = devices[i]
        if not dev.health:
            fail(Reason.CardNotHealth)
            continue
        if not type_ok:
            fail(Reason.CardTypeMismatch)
            continue
        if not selection.ok(dev):
            fail(Reason.CardUuidMismatch)
            continue
        if dev.count <= dev.used:
            fail(Reason.CardTimeSlicingExhausted)
            continue
        if mutex and dev.used > 0:
            fail(Reason.ExclusiveDeviceAllocateConflict)
            continue
        mem = memory_to_book(dev, request)
        if dev.totalmem - dev.usedmem < mem:
            fail(Reason.CardInsufficientMemory)
            continue
        totalcore = 100 if hami_core else dev.totalcore
        if totalcore - dev.usedcores < cores:
            fail(Reason.CardInsufficientCore)
            continue
        if totalcore == 100 and cores == 100 and dev.used > 0:
            fail(Reason.ExclusiveDeviceAllocateConflict)
            continue
        if totalcore != 0 and dev.usedcores == totalcore and cores == 0:
            fail(Reason.CardComputeUnitsExhausted)
            continue
        accepted.append(ContainerDevice(dev.id, request.backend, mem, cores, dev.index,
                                        custom_info=dev.info.custom_info))
        if not collect and len(accepted) == nums:
            return FitResult.success(accepted)

    if pair_910c:
        chosen = _pair_modules(accepted, nums)
        if len(chosen) != nums:
            counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
            return FitResult.unschedulable(*_reasons(counts, nums))
        return FitResult.success(chosen)
    if topology and len(accepted) >= nums:
        if len(accepted) == nums:
            return FitResult.success(accepted)
        chosen = [accepted[0]] if nums == 1 else _by_network(accepted, nums)
        if len(chosen) == nums:
            return FitResult.success(chosen)
        # A NetworkID that is not a number leaves its devices out of every group; HAMi would then
        # "succeed" with fewer devices than requested, which is refused here.
        counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
        return FitResult.unschedulable(*_reasons(counts, total))
    if accepted:
        counts[Reason.AllocatedCardsInsufficientRequest] = len(accepted)
    return FitResult.unschedulable(*_reasons(counts, total))


def filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                 candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult]:
    """:func:`fit_node` on every candidate node."""
    selection = _Selection(backend, pod)
    hami_core = is_hami_core_pod(pod)
    mutex = policy.has("mutex")
    return [fit_node(backend, cand.devices, request, hami_core=hami_core,
                     node_hami_core=node_supports_hami_core(backend, cand.node.annotations),
                     selection=selection, mutex=mutex)
            for cand in candidates]


# ------------------------------------------------------------------------------------------ score
def topology_score(name: str, devices: PodSingleDevice) -> float:
    """HAMi Ascend ``ScoreNode`` (C.7): for ``Ascend910*`` chips, per container the share of its devices in
    its largest NetworkID group, summed, x 10; 0 when any chosen device has no NetworkID."""
    if not name.startswith(ASCEND910_PREFIX):
        return 0.0
    score = 0.0
    for ctr in devices:
        if not ctr:
            continue
        per_network: dict[int, int] = {}
        for dev in ctr:
            if dev.custom_info is None or NETWORK_ID not in dev.custom_info:
                return 0.0
            nid = _network_id(dev.custom_info)
            if nid is not None:
                per_network[nid] = per_network.get(nid, 0) + 1
        counted = sum(per_network.values())
        if counted:
            score += max(per_network.values()) / counted
    return score * NETWORK_WEIGHT


def score_nodes(candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None]:
    """One raw score per candidate (added as is, not policy neutral); ``None`` where no Ascend910 chip is used."""
    out: list[NodeScore | None] = []
    for cand in candidates:
        mine = [name for name in cand.assignment if name.startswith(ASCEND910_PREFIX)]
        out.append(NodeScore(sum(topology_score(n, cand.assignment[n]) for n in mine)) if mine else None)
    return out


# ------------------------------------------------------------------------------------------ annotations
def runtime_info(backend: DeviceBackend, devices: PodSingleDevice, *, hami_core: bool) -> str:
    """The ``huawei.com/<commonWord>`` JSON (C.3): one ``{"UUID","temp","memory","core"}`` per device.

    ``temp`` is the template the booked memory maps to (left out in hami-core mode and for a whole
    card); ``memory`` and ``core`` are left out when 0 (Go ``omitempty``).
    """
    chip = chip_of(backend)
    out: list[dict[str, Any]] = []
    for ctr in devices:
        for dev in ctr:
            info: dict[str, Any] = {}
            if dev.uuid:
                info["UUID"] = dev.uuid
            if not hami_core:
                _, temp = chip.trim(dev.usedmem)
                if temp:
                    info["temp"] = temp
            if dev.usedmem:
                info["memory"] = dev.usedmem
            if dev.usedcores:
                info["core"] = dev.usedcores
            out.append(info)
    return _json.dumps(out)


def allocation_annotations(backend: DeviceBackend, pod: Mapping[str, Any], devices: PodSingleDevice,
                           now: float) -> dict[str, str]:
    """The annotations Ascend adds to the core's to-allocate/allocated pair (C.3): the runtime-info JSON
    and ``predicate-time`` (Unix seconds of the decision, the same instant as ``hami.io/vgpu-time``)."""
    if not any(devices):
        return {}
    return {
        runtime_annotation(backend): runtime_info(backend, devices, hami_core=is_hami_core_pod(pod)),
        PREDICATE_TIME: encode_unix_seconds(now),
    }
