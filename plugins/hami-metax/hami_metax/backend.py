"""HAMi's MetaX backends, scheduler side (vendors.md Part G; Part A for the shared contract).

Two independent backends share the ``metax:`` section:

* **MetaX GPU** (common word ``Metax-GPU``, G.1): whole cards synthesised from node capacity, HAMi's
  standard fit plus "one pod, one card set", and a node score from the device plugin's topology
  loss/score tables.
* **MetaX sGPU** (common word ``Metax-SGPU``, G.2): shared cards registered as JSON by the MetaX sGPU
  device plugin, with QoS policies, online/offline app classes and MetaLink-aware choice and scoring.

Pure functions over plain Kubernetes JSON and hami-core's types; :mod:`hami_metax.plugin` wires them to
the hooks.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.engine.pods import annotations as annotations_of
from hami_core.engine.pods import containers, pod_key
from hami_core.plugins.errors import AdmissionFailed, WireFormatError
from hami_core.plugins.fit import standard_fit
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
from hami_core.wire import gojson as _json
from hami_core.wire import keys
from hami_core.wire.common import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    check_device_count,
    parse_go_bool,
    parse_go_int,
    split_list,
    wire_error,
)
from hami_core.wire.pods import decode_pod_single_device
from hami_core.wire.quantity import parse_quantity, quantity_to_int
from hami_core.wire.reasons import Reason, gen_reason_items
from hami_metax.config import MetaxConfig
from hami_metax.state import OFFLINE, ONLINE, JitteryQosCache, SgpuState

VENDOR = "metax"

# -- MetaX GPU (whole card) ----------------------------------------------------------------------------
GPU_WORD = "Metax-GPU"
GPU_TO_ALLOCATE = "hami.io/metax-gpu-devices-to-allocate"
GPU_ALLOCATED = "hami.io/metax-gpu-devices-allocated"
#: Node annotations of the MetaX GPU device plugin: JSON objects "number of GPUs" → integer.
TOPOLOGY_LOSSES = "metax-tech.com/gpu.topology.losses"
TOPOLOGY_SCORES = "metax-tech.com/gpu.topology.scores"
#: Every synthesised card has 64 GiB and 100 % compute, and takes one task (G.1).
GPU_DEVMEM = 65536
GPU_DEVCORE = 100
#: ``ScoreNode`` base: ``2000 - losses[k]`` (binpack) or ``2000 - scores[k]`` (spread).
GPU_SCORE_BASE = 2000

# -- MetaX sGPU -------------------------------------------------------------------------------------------
SGPU_WORD = "Metax-SGPU"
SGPU_TO_ALLOCATE = "hami.io/metax-sgpu-devices-to-allocate"
SGPU_ALLOCATED = "hami.io/metax-sgpu-devices-allocated"
NODE_SGPU_DEVICES = "metax-tech.com/node-gpu-devices"
SGPU_DEVICES_ALLOCATED = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME = "metax-tech.com/predicate-time"
USE_UUID = "metax-tech.com/use-gpuuuid"
NOUSE_UUID = "metax-tech.com/nouse-gpuuuid"
QOS_POLICY = "metax-tech.com/sgpu-qos-policy"
TOPOLOGY_AWARE = "metax-tech.com/sgpu-topology-aware"
APP_CLASS = "metax-tech.com/sgpu-app-class"
BEST_EFFORT = "best-effort"
FIXED_SHARE = "fixed-share"
BURST_SHARE = "burst-share"
QOS_POLICIES = (BEST_EFFORT, FIXED_SHARE, BURST_SHARE)
APP_CLASSES = (ONLINE, OFFLINE)
#: A bare ``vmemory`` quantity is GiB; HAMi's ``MemoryFactor`` for quota.
MEMORY_FACTOR = 1024
#: Score of two distinct devices in the same MetaLink zone.
DIRECT_LINK_SCORE = 10
#: Registered device custom info keys (HAMi's names).
INFO_QOS = "QosPolicy"
INFO_MODEL = "Model"
INFO_LINK_ZONE = "LinkZone"
#: Facts the sGPU fit hands to the node score through ``ContainerDevice.custom_info`` (in memory only),
#: as HAMi passes the pod's annotations there: the pod classes on the device, the configured topology flag.
INFO_POD_CLASSES = "hami-metax.podClasses"
INFO_TOPOLOGY_AWARE = "hami-metax.topologyAware"

_MIB = 1024 * 1024


def make_gpu_backend(cfg: MetaxConfig) -> DeviceBackend:
    """The MetaX GPU :class:`DeviceBackend`: count resource only, no lock, no registration annotation."""
    return DeviceBackend(
        name=GPU_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(count=cfg.resource_count_name),
        to_allocate_annotation=GPU_TO_ALLOCATE,
        allocated_annotation=GPU_ALLOCATED,
        standard_capacity=True,
        config=cfg,
    )


def make_sgpu_backend(cfg: MetaxConfig) -> DeviceBackend:
    """The MetaX sGPU :class:`DeviceBackend`: GiB memory (factor 1024), UUID selection, the shared lock."""
    return DeviceBackend(
        name=SGPU_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(count=cfg.resource_vcount_name, memory=cfg.resource_vmemory_name,
                                     cores=cfg.resource_vcore_name, memory_factor=MEMORY_FACTOR),
        register_annotation=NODE_SGPU_DEVICES,
        to_allocate_annotation=SGPU_TO_ALLOCATE,
        allocated_annotation=SGPU_ALLOCATED,
        use_uuid_annotation=USE_UUID,
        nouse_uuid_annotation=NOUSE_UUID,
        lock_annotation=keys.NODE_LOCK,
        # Online pods skip the core checks, so the engine's numeric prefilter would be wrong here.
        standard_capacity=False,
        config=cfg,
    )


def make_backends(cfg: MetaxConfig) -> list[DeviceBackend]:
    """Both backends of one ``metax:`` section (HAMi always creates the two together)."""
    return [make_gpu_backend(cfg), make_sgpu_backend(cfg)]


# ------------------------------------------------------------------------------------------ helpers
def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _limits(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((container.get("resources") or {}).get("limits")) or {}


def _requests(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((container.get("resources") or {}).get("requests")) or {}


def as_int64(value: Any) -> int | None:
    """Go ``Quantity.AsInt64``: the quantity's value when it is a whole number within int64, else ``None``.

    Unreadable quantities are ``None`` too (Kubernetes would never have accepted them).
    """
    if value is None:
        return None
    try:
        number = quantity_to_int(value)
    except WireFormatError:
        return None
    if number is None or not INT64_MIN <= number <= INT64_MAX:
        return None
    return number


def _has_unit(value: Any) -> bool:
    """Whether a quantity is written with a suffix or exponent (any ASCII letter), as HAMi tests it."""
    return isinstance(value, str) and any("a" <= c.lower() <= "z" for c in value)


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // b
    return q if a >= 0 else -q


# ==========================================================================================================
# MetaX GPU (G.1)
# ==========================================================================================================
def gpu_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Whole cards from ``status.capacity[<resourceCountName>]``: ``<node>-metax-<i>``, 64 GiB, 100 cores.

    No capacity (or 0) means no MetaX GPU on the node. A capacity that is not a whole number raises
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
    return [DeviceInfo(id=f"{name}-metax-{i}", index=i, count=1, devmem=GPU_DEVMEM, devcore=GPU_DEVCORE,
                       type=GPU_WORD, numa=0, health=True) for i in range(max(count, 0))]


def gpu_health(backend: DeviceBackend, node: Mapping[str, Any]) -> HealthReport:
    """HAMi ``CheckHealth`` for MetaX GPU: healthy iff the node's capacity is > 0; always refresh.

    A node without the capacity key has no MetaX GPU to be unhealthy about (as hami-core's default
    health treats nodes without devices); a capacity of 0 is a device plugin saying it has none.
    """
    resource = backend.resource_names.count
    raw = ((node.get("status") or {}).get("capacity") or {}).get(resource)
    if raw is None:
        return HealthReport(True, False)
    if (as_int64(raw) or 0) > 0:
        return HealthReport(True, True)
    return HealthReport(False, True, reason=f"status.capacity[{resource}] is {raw!r}")


def gpu_mutate(backend: DeviceBackend, container: Mapping[str, Any]) -> bool:
    """HAMi ``MutateAdmission``: the container uses MetaX GPU iff its limits name the count resource."""
    return backend.resource_names.count in _limits(container)


def gpu_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """Whole cards: ``{Nums n, Memreq 0, pct 100, cores 100}`` from limits, else requests (G.1).

    A count that is not a positive whole number is no request.
    """
    name = backend.resource_names.count
    raw = _limits(container).get(name)
    if raw is None:
        raw = _requests(container).get(name)
    nums = as_int64(raw)
    if nums is None or nums <= 0 or nums > INT32_MAX:
        return None
    return DeviceRequest(GPU_WORD, nums, 0, 100, 100)


def _never(dev: DeviceUsage) -> bool:
    return False


def gpu_fit(devices: Sequence[DeviceUsage], request: DeviceRequest,
            allocated: Iterable[Sequence[ContainerDevice]] = ()) -> FitResult:
    """HAMi's standard fit without UUID selection, plus MetaX's custom rule (G.1).

    ``allocated`` are the cards earlier containers of the pod received: once there are any, a card
    whose ID differs from one of them is refused with ``CardNotFoundCustomFilterRule``.
    """
    earlier = tuple(d.uuid for ctr in allocated for d in ctr)

    def same_cards(dev: DeviceUsage, mem: int, cores: int, chosen: Sequence[ContainerDevice]) -> bool:
        return all(uuid == dev.id for uuid in earlier)

    return standard_fit(devices, request, type_ok=None if request.backend == GPU_WORD else _never,
                        custom_rule=same_cards if earlier else None)


def gpu_filter_nodes(request: DeviceRequest, candidates: Sequence[FitCandidate]) -> list[FitResult]:
    """:func:`gpu_fit` on every candidate node."""
    return [gpu_fit(c.devices, request, c.allocated.get(GPU_WORD, ())) for c in candidates]


def topology_value(raw: str, count: int) -> int:
    """``losses[count]`` / ``scores[count]`` from a topology annotation; 0 when missing or unreadable.

    Format: a JSON object whose keys are decimal integers and values integers, e.g.
    ``{"1":0,"2":110,"3":270}``. Like Go's ``json.Unmarshal`` into ``map[int]int``, one bad key or value
    makes the whole table unreadable.
    """
    try:
        data = _json.loads(raw, TOPOLOGY_LOSSES)
    except WireFormatError:
        return 0
    if not isinstance(data, dict):
        return 0
    table: dict[int, int] = {}
    for key, value in data.items():
        try:
            number = parse_go_int(key)
        except WireFormatError:
            return 0
        if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
            return 0
        table[number] = value
    return table.get(count, 0)


def gpu_score(node_annotations: Mapping[str, str], devices: PodSingleDevice, node_policy: str) -> float:
    """HAMi ``ScoreNode`` for MetaX GPU (not policy neutral): reads the node policy itself.

    With ``k`` the number of cards given to the pod: binpack → ``2000 - losses[k]`` from
    ``metax-tech.com/gpu.topology.losses``; spread → ``2000 - scores[k]`` from
    ``metax-tech.com/gpu.topology.scores``. No annotation or another policy → 0.
    """
    k = sum(len(ctr) for ctr in devices)
    if node_policy == "binpack":
        key = TOPOLOGY_LOSSES
    elif node_policy == "spread":
        key = TOPOLOGY_SCORES
    else:
        return 0.0
    raw = node_annotations.get(key)
    if raw is None:
        return 0.0
    return float(GPU_SCORE_BASE - topology_value(raw, k))


# ==========================================================================================================
# MetaX sGPU (G.2)
# ==========================================================================================================
@dataclass(frozen=True, slots=True)
class SgpuDevice:
    """One device of ``metax-tech.com/node-gpu-devices`` (HAMi ``MetaxSDeviceInfo``)."""

    uuid: str
    bdf: str = ""
    model: str = ""
    total_dev_count: int = 0
    total_compute: int = 0
    total_vram: int = 0
    available_dev_count: int = 0
    available_compute: int = 0
    available_vram: int = 0
    numa: int = 0
    healthy: bool = False
    qos_policy: str = ""
    link_zone: int = 0


#: (JSON key, attribute, lowest value) of the integer fields, in the Go struct's order.
_SGPU_INTS = (
    ("totalDevCount", "total_dev_count", 0), ("totalCompute", "total_compute", 0), ("totalVRam", "total_vram", 0),
    ("availableDevCount", "available_dev_count", INT32_MIN), ("availableCompute", "available_compute", INT32_MIN),
    ("availableVRam", "available_vram", INT32_MIN), ("numa", "numa", INT32_MIN),
)


def _decode_sgpu_device(raw: Any, where: str) -> SgpuDevice:
    if not isinstance(raw, dict):
        raise wire_error(where, f"must be an object, got {_json.show(raw)}")
    obj = _json.fold(raw)
    uuid = _json.get_str(obj, "uuid", where)
    if not uuid:
        raise wire_error(where, 'field "uuid" must be a non-empty string')
    ints = {attr: _json.get_int(obj, name, where, lo, INT32_MAX, "int32") for name, attr, lo in _SGPU_INTS}
    return SgpuDevice(uuid=uuid, bdf=_json.get_str(obj, "bdf", where), model=_json.get_str(obj, "model", where),
                      healthy=_json.get_bool(obj, "healthy", where), qos_policy=_json.get_str(obj, "qosPolicy", where),
                      link_zone=_json.get_int(obj, "linkZone", where, INT32_MIN, INT32_MAX, "int32"), **ints)


def decode_sgpu_devices(value: str, *, key: str = NODE_SGPU_DEVICES) -> list[SgpuDevice]:
    """Decode the MetaX sGPU registration.

    Format: a JSON array of objects with keys ``uuid, bdf, model, totalDevCount, totalCompute, totalVRam,
    availableDevCount, availableCompute, availableVRam, numa, healthy, qosPolicy, linkZone`` (matched
    case-insensitively, as Go does; missing keys are zero), e.g.
    ``[{"uuid":"GPU-123","model":"sgpu","totalDevCount":16,"totalCompute":100,"totalVRam":32768,
    "healthy":true,"qosPolicy":"fixed-share","linkZone":1}]``. ``null`` is ``[]``. Errors name the key
    and the device position.
    """
    data = _json.loads(value, key)
    if data is None:
        return []
    if not isinstance(data, list):
        raise wire_error(key, f"expected a JSON array of devices, got {_json.show(data)}")
    return [_decode_sgpu_device(item, f"{key}: device {i}") for i, item in enumerate(data)]


def encode_sgpu_devices(devices: Iterable[SgpuDevice]) -> str:
    """Encode a registration as the MetaX sGPU device plugin does (Go ``omitempty``: zero fields left out)."""
    out = []
    for d in devices:
        item: dict[str, Any] = {"uuid": d.uuid}
        for name, value in (("bdf", d.bdf), ("model", d.model), ("totalDevCount", d.total_dev_count),
                            ("totalCompute", d.total_compute), ("totalVRam", d.total_vram),
                            ("availableDevCount", d.available_dev_count), ("availableCompute", d.available_compute),
                            ("availableVRam", d.available_vram), ("numa", d.numa), ("healthy", d.healthy),
                            ("qosPolicy", d.qos_policy), ("linkZone", d.link_zone)):
            if value:
                item[name] = value
        out.append(item)
    return _json.dumps(out)


def to_device_infos(devices: Sequence[SgpuDevice]) -> list[DeviceInfo]:
    """HAMi's mapping: ID=uuid, Index=position, Count=totalDevCount, Devmem=totalVRam, Devcore=totalCompute,
    Type=``Metax-SGPU``, custom info ``{QosPolicy, Model, LinkZone}``."""
    return [DeviceInfo(id=d.uuid, index=i, count=d.total_dev_count, devmem=d.total_vram, devcore=d.total_compute,
                       type=SGPU_WORD, numa=d.numa, mode="", health=d.healthy,
                       custom_info={INFO_QOS: d.qos_policy, INFO_MODEL: d.model, INFO_LINK_ZONE: d.link_zone})
            for i, d in enumerate(devices)]


def sgpu_node_devices(backend: DeviceBackend, node: Mapping[str, Any], state: SgpuState) -> list[DeviceInfo]:
    """Devices from ``metax-tech.com/node-gpu-devices``; no annotation ⇒ none.

    A readable registration also clears the jittery QoS entries it confirms (HAMi ``jqCache.Sync``).
    """
    key = backend.register_annotation or NODE_SGPU_DEVICES
    raw = (_metadata(node).get("annotations") or {}).get(key)
    if raw is None:
        return []
    records = decode_sgpu_devices(raw, key=key)
    state.jittery.sync((d.uuid, d.qos_policy) for d in records)
    return to_device_infos(records)


def sgpu_health(backend: DeviceBackend, node: Mapping[str, Any], devices: Sequence[DeviceInfo]) -> HealthReport:
    """HAMi ``CheckHealth`` for sGPU: healthy iff the registration lists a device; always refresh.

    A node without the annotation has no MetaX sGPU to be unhealthy about (as hami-core's default
    health treats nodes without devices).
    """
    if devices:
        return HealthReport(True, True)
    key = backend.register_annotation or NODE_SGPU_DEVICES
    if key not in (_metadata(node).get("annotations") or {}):
        return HealthReport(True, False)
    return HealthReport(False, True, reason=f"{key} lists no device")


# ------------------------------------------------------------------------------------------ admission
def quantity_value(value: Any) -> int | None:
    """Go ``Quantity.Value``: the value rounded up to an integer (``None`` when unreadable)."""
    try:
        number = parse_quantity(value)
    except WireFormatError:
        return None
    return -((-number.numerator) // number.denominator)


def sgpu_mutate(backend: DeviceBackend, pod: dict[str, Any], container: Mapping[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for sGPU (G.2); returns whether the container requests sGPU.

    With the count in limits: an app class must be ``online``/``offline`` with a count of exactly 1; a
    pod that is not ``online`` gets ``metax-tech.com/sgpu-qos-policy: best-effort`` when it has none, and
    must otherwise name one of the three policies. Violations raise :class:`AdmissionFailed`.
    """
    limits = _limits(container)
    count_name = backend.resource_names.count
    if count_name not in limits:
        return False
    cname = container.get("name", "<unnamed>")
    meta = pod.setdefault("metadata", {})
    annotations = meta.get("annotations")
    if annotations is None:
        annotations = meta["annotations"] = {}
    app_class = annotations.get(APP_CLASS)
    if app_class is not None:
        if app_class not in APP_CLASSES:
            raise AdmissionFailed(f"container {cname}: {APP_CLASS} must be set one of [{ONLINE}, {OFFLINE}]")
        if quantity_value(limits[count_name]) != 1:
            raise AdmissionFailed(f"container {cname}: app-class pod must request single device")
    if app_class != ONLINE:
        qos = annotations.get(QOS_POLICY)
        if qos is None:
            annotations[QOS_POLICY] = BEST_EFFORT
        elif qos not in QOS_POLICIES:
            raise AdmissionFailed(f"container {cname}: {QOS_POLICY} must be set one of "
                                  f"[{BEST_EFFORT}, {FIXED_SHARE}, {BURST_SHARE}]")
    return True


# ------------------------------------------------------------------------------------------ requests
def sgpu_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for sGPU (G.2); only ``limits`` are read.

    Count 1..MaxInt32; ``vcore`` (default 100) 0..MaxInt32; ``vmemory`` bare = GiB (x1024, at most
    MaxInt32/1024), with a unit = bytes → MiB. Out-of-range values drop the request; values that are
    not whole numbers are ignored (a count that is not is no request). Memory 0 ⇒ 100 % of the card.
    """
    names = backend.resource_names
    limits = _limits(container)
    nums = as_int64(limits.get(names.count))
    if nums is None or nums <= 0 or nums > INT32_MAX:
        return None
    cores = 100
    cores_value = as_int64(limits.get(names.cores)) if names.cores else None
    if cores_value is not None:
        if not 0 <= cores_value <= INT32_MAX:
            return None
        cores = cores_value
    mem = 0
    raw_mem = limits.get(names.memory) if names.memory else None
    mem_value = as_int64(raw_mem)
    if mem_value is not None:
        if _has_unit(raw_mem):
            mem = _trunc_div(mem_value, _MIB)
        else:
            if not 0 <= mem_value <= INT32_MAX // MEMORY_FACTOR:
                return None
            mem = mem_value * MEMORY_FACTOR
        if not 0 <= mem <= INT32_MAX:
            return None
    return DeviceRequest(SGPU_WORD, nums, mem, 100 if mem == 0 else 0, cores)


# ------------------------------------------------------------------------------------------ fit
def check_app_class(request_class: str, used: int, online: int, offline: int) -> bool:
    """HAMi ``checkAppClass``: may a pod of ``request_class`` ("" = normal) join this device?

    An idle device (``used == 0``) takes anyone. A device hosting online/offline pods takes only
    online/offline pods, except offline ones on a device with an online pod; a device hosting normal
    pods takes only normal pods.
    """
    if used == 0:
        return True
    classed_device = online > 0 or offline > 0
    classed_request = request_class in APP_CLASSES
    if classed_device != classed_request:
        return False
    return not (online > 0 and request_class == OFFLINE)


def check_qos(request_qos: str, used: int, coresreq: int, device_qos: str) -> bool:
    """HAMi ``checkDeviceQos``: an idle device or an exclusive (100-core) request fits any QoS; otherwise
    the device's QoS must be unset or equal to the request's."""
    if used == 0 or coresreq == 100:
        return True
    return device_qos in ("", request_qos)


def link_zone(info: Mapping[str, Any] | None) -> int:
    """The device's MetaLink zone from its custom info (0 = none)."""
    value = (info or {}).get(INFO_LINK_ZONE, 0)
    return value if type(value) is int else 0


def prioritize_exclusive(candidates: Sequence[DeviceUsage], need: int) -> list[DeviceUsage]:
    """HAMi ``prioritizeExclusiveDevices``: keep exclusive multi-card pods inside one MetaLink zone.

    Zones (LinkZone > 0) are tried smallest first; the first one that can hold ``need`` cards gives its
    first ``need``. Otherwise cards are taken across zones in that order, then from zone-less cards.
    Go iterates a map here, so ties between zones of equal size are arbitrary there; this keeps the
    zones' order of appearance.
    """
    if len(candidates) <= need:
        return list(candidates)
    zones: dict[int, list[DeviceUsage]] = {}
    others: list[DeviceUsage] = []
    for dev in candidates:
        zone = link_zone(dev.info.custom_info)
        if zone <= 0:
            others.append(dev)
        else:
            zones.setdefault(zone, []).append(dev)
    groups = sorted(zones.values(), key=len)
    for group in groups:
        if len(group) >= need:
            return group[:need]
    picked = [dev for group in groups for dev in group] + others
    return picked[:need] if len(picked) >= need else list(candidates[:need])


def prioritize_online(candidates: Sequence[DeviceUsage], need: int,
                      classes: Mapping[str, tuple[int, int]]) -> list[DeviceUsage]:
    """HAMi ``prioritizeOnlineDevices``: fewer online pods first, then fewer offline pods; devices that host
    only offline pods go last (fewer offline pods first among them)."""
    if len(candidates) <= need:
        return list(candidates)

    def key(dev: DeviceUsage) -> tuple[int, int, int]:
        online, offline = classes.get(dev.id, (0, 0))
        if online == 0 and offline > 0:
            return (1, offline, 0)
        return (0, online, offline)

    return sorted(candidates, key=key)[:need]


def _uuid_ok(annotations: Mapping[str, str], uuid: str) -> bool:
    use = split_list(annotations.get(USE_UUID))
    nouse = split_list(annotations.get(NOUSE_UUID))
    return not (use and uuid not in use) and not (nouse and uuid in nouse)


def registered_qos(dev: DeviceUsage) -> str:
    value = (dev.info.custom_info or {}).get(INFO_QOS, "")
    return value if isinstance(value, str) else ""


def sgpu_fit(devices: Sequence[DeviceUsage], request: DeviceRequest, annotations: Mapping[str, str], *,
             mutex: bool = False, current_qos: Mapping[str, str] | None = None,
             jittery: Mapping[str, str] | None = None, classes: Mapping[str, tuple[int, int]] | None = None,
             topology_aware: bool = False) -> FitResult:
    """HAMi's MetaX sGPU ``Fit`` (G.2) on one node's devices, sorted with the preferred device last.

    Every device is checked (no early exit), from the last to the first: type, health (``CardUnhealthy``),
    app class, QoS (not for online pods), UUID selection, split count, ``mutex``, memory (``Memreq`` or
    ``Totalmem x pct / 100``), then for non-online pods cores, the exclusive whole card and exhausted
    compute. Then the first ``Nums`` candidates, re-ordered for online pods and for exclusive pods
    without an app class when there are more candidates than needed.

    ``current_qos`` overrides a device's registered QoS (the pod's earlier containers changed it in this
    cycle, HAMi ``AddResourceUsage``); ``jittery`` (HAMi's jittery QoS cache) overrides both for the
    check. ``classes`` maps a device to the ``(online, offline)`` pods it hosts.
    """
    current_qos = current_qos or {}
    jittery = jittery or {}
    classes = classes or {}
    app_class = annotations.get(APP_CLASS, "")
    online = app_class == ONLINE
    request_qos = annotations.get(QOS_POLICY, "")
    counts: dict[str, int] = {}
    found: list[DeviceUsage] = []

    def fail(reason: str) -> None:
        counts[reason] = counts.get(reason, 0) + 1

    def memory(dev: DeviceUsage) -> int:
        return request.memreq if request.memreq > 0 else dev.totalmem * request.mem_percentage // 100

    for dev in reversed(devices):
        if request.backend != SGPU_WORD:
            fail(Reason.CardTypeMismatch)
            continue
        if not dev.health:
            fail(Reason.CardUnhealthy)
            continue
        if not check_app_class(app_class, dev.used, *classes.get(dev.id, (0, 0))):
            fail(Reason.CardAppClassMismatch)
            continue
        if not online:
            device_qos = jittery.get(dev.id, current_qos.get(dev.id, registered_qos(dev)))
            if not check_qos(request_qos, dev.used, request.coresreq, device_qos):
                fail(Reason.CardQosPolicyMismatch)
                continue
        if not _uuid_ok(annotations, dev.id):
            fail(Reason.CardUuidMismatch)
            continue
        if dev.count <= dev.used:
            fail(Reason.CardTimeSlicingExhausted)
            continue
        if mutex and dev.used > 0:
            fail(Reason.ExclusiveDeviceAllocateConflict)
            continue
        if dev.totalmem - dev.usedmem < memory(dev):
            fail(Reason.CardInsufficientMemory)
            continue
        if not online:
            if dev.totalcore - dev.usedcores < request.coresreq:
                fail(Reason.CardInsufficientCore)
                continue
            if dev.totalcore == 100 and request.coresreq == 100 and dev.used > 0:
                fail(Reason.ExclusiveDeviceAllocateConflict)
                continue
            if dev.totalcore != 0 and dev.usedcores == dev.totalcore and request.coresreq == 0:
                fail(Reason.CardComputeUnitsExhausted)
                continue
        found.append(dev)

    if len(found) < request.nums:
        if found:
            counts[Reason.AllocatedCardsInsufficientRequest] = len(found)
        if not counts:
            return FitResult.unschedulable(Reason.NodeInsufficientDevice)
        return FitResult.unschedulable(*gen_reason_items(counts, len(devices)))

    best = found[:request.nums]
    if len(found) > request.nums:
        if APP_CLASS in annotations:
            if online:
                best = prioritize_online(found, request.nums, classes)
        elif request.coresreq == 100:
            best = prioritize_exclusive(found, request.nums)
    cores = 0 if online else request.coresreq
    chosen = []
    for dev in best:
        info = dict(dev.info.custom_info or {})
        info[INFO_QOS] = current_qos.get(dev.id, registered_qos(dev))
        info[INFO_POD_CLASSES] = classes.get(dev.id, (0, 0))
        info[INFO_TOPOLOGY_AWARE] = topology_aware
        chosen.append(ContainerDevice(dev.id, dev.type, memory(dev), cores, dev.index, custom_info=info))
    return FitResult.success(chosen)


def expected_qos(request_qos: str, usedcores: int) -> str:
    """The QoS a device takes once a non-online container runs on it: none for an exclusive (100-core) one."""
    return "" if usedcores == 100 else request_qos


def _init_count(pod: Mapping[str, Any]) -> int:
    return len(containers(pod)[0])


def sgpu_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult]:
    """:func:`sgpu_fit` on every candidate, with the state HAMi keeps in ``DeviceUsage`` and its caches.

    The pod's earlier app containers on a node changed their devices' QoS in this cycle (HAMi
    ``AddResourceUsage``). A device's pod classes come from :class:`~hami_metax.state.PodClasses`,
    ignoring the pod itself; a device on which nothing but this pod is booked is idle, so any
    classes remembered for it are stale and dropped.
    """
    cfg: MetaxConfig = backend.config
    state = cfg.state
    annotations = annotations_of(pod)
    key = pod_key(pod)
    online = annotations.get(APP_CLASS) == ONLINE
    request_qos = annotations.get(QOS_POLICY, "")
    jittery = state.jittery.snapshot()
    init_count = _init_count(pod)
    mutex = policy.gpu == "mutex"
    out = []
    for cand in candidates:
        own_slots: dict[str, int] = {}
        current: dict[str, str] = {}
        for pos, ctr in enumerate(cand.allocated.get(SGPU_WORD, ())):
            if pos < init_count:
                continue  # init containers do not add to the usage later containers see
            for d in ctr:
                own_slots[d.uuid] = own_slots.get(d.uuid, 0) + 1
                if not online:
                    current[d.uuid] = expected_qos(request_qos, d.usedcores)
        classes: dict[str, tuple[int, int]] = {}
        for dev in cand.devices:
            if dev.used - own_slots.get(dev.id, 0) <= 0:
                state.pods.forget_device(dev.id, keep=key)
            else:
                classes[dev.id] = state.pods.counts(dev.id, exclude=key)
        out.append(sgpu_fit(cand.devices, request, annotations, mutex=mutex, current_qos=current, jittery=jittery,
                            classes=classes, topology_aware=cfg.sgpu_topology_aware))
    return out


# ------------------------------------------------------------------------------------------ score
def link_score(devices: Sequence[tuple[str, int]]) -> int:
    """HAMi ``LinkDevices.Score``: 10 per pair of distinct devices in the same non-zero zone."""
    score = 0
    for i, (uuid_a, zone_a) in enumerate(devices):
        for uuid_b, zone_b in devices[i + 1:]:
            if uuid_a != uuid_b and zone_a != 0 and zone_a == zone_b:
                score += DIRECT_LINK_SCORE
    return score


def score_exclusive(devices: Iterable[ContainerDevice], previous: Sequence[DeviceUsage]) -> int:
    """HAMi ``scoreExclusiveDevices``: reward a pod's exclusive cards sharing a zone, penalise the MetaLink
    pairs among idle cards that the choice breaks.

    B = the pod's exclusive (100-core) cards, A = idle cards before the pod, R = A without B:
    ``10·score(B) - (score(A) - score(B) - score(R))``.
    """
    allocated = [(d.uuid, link_zone(d.custom_info)) for d in devices if d.usedcores == 100]
    taken = {uuid for uuid, _ in allocated}
    available = [(p.id, link_zone(p.info.custom_info)) for p in previous if p.used == 0]
    rest = [item for item in available if item[0] not in taken]
    a, b, r = link_score(available), link_score(allocated), link_score(rest)
    return DIRECT_LINK_SCORE * b - (a - b - r)


def score_online(uuids: Iterable[str], previous: Sequence[DeviceUsage], classes: Mapping[str, tuple[int, int]]) -> int:
    """HAMi ``scoreOnlineDevices``: over the pod's devices, -100 per offline pod on a device hosting only
    offline pods, otherwise -20 per online and -2 per offline pod."""
    chosen = set(uuids)
    total = 0
    for dev in previous:
        if dev.id not in chosen:
            continue
        online, offline = classes.get(dev.id, (0, 0))
        if offline > 0 and online == 0:
            total += -100 * offline
        else:
            total += -20 * online - 2 * offline
    return total


def topology_aware_enabled(annotations: Mapping[str, str], devices: Iterable[ContainerDevice]) -> bool:
    """HAMi ``topologyAwareEnable``: only for a pod with an exclusive card; ``sgpuTopologyAware`` unless the
    pod's ``metax-tech.com/sgpu-topology-aware`` (a Go bool) says otherwise."""
    for d in devices:
        if d.usedcores == 100:
            enabled = bool((d.custom_info or {}).get(INFO_TOPOLOGY_AWARE, False))
            raw = annotations.get(TOPOLOGY_AWARE)
            if raw is not None:
                with contextlib.suppress(WireFormatError):
                    enabled = parse_go_bool(raw)
            return enabled
    return False


def sgpu_score(annotations: Mapping[str, str], devices: PodSingleDevice, previous: Sequence[DeviceUsage]) -> int:
    """HAMi ``ScoreNode`` for sGPU, policy neutral (the engine applies x±10000).

    Online pods: :func:`score_online`; otherwise, when topology awareness applies,
    :func:`score_exclusive`; else 0. ``previous`` is the node's sGPU usage before the pod.
    """
    flat = [d for ctr in devices for d in ctr]
    if not flat:
        return 0
    if annotations.get(APP_CLASS) == ONLINE:
        classes = {d.uuid: (d.custom_info or {}).get(INFO_POD_CLASSES, (0, 0)) for d in flat}
        return score_online(classes, previous, classes)
    if topology_aware_enabled(annotations, flat):
        return score_exclusive(flat, previous)
    return 0


# ------------------------------------------------------------------------------------------ annotations
def metax_allocation(devices: PodSingleDevice) -> str:
    """``metax-tech.com/gpu-devices-allocated``: per container (annotation order) a list of
    ``{"uuid","compute","vRam"}``, zero values left out, e.g. ``[[{"uuid":"GPU-1","compute":60,"vRam":4096}],[]]``."""
    payload = []
    for ctr in devices:
        entries = []
        for d in ctr:
            entry: dict[str, Any] = {"uuid": d.uuid}
            if d.usedcores:
                entry["compute"] = d.usedcores
            if d.usedmem:
                entry["vRam"] = d.usedmem
            entries.append(entry)
        payload.append(entries)
    return _json.dumps(payload)


def record_jittery(cache: JitteryQosCache, request_qos: str, devices: PodSingleDevice) -> None:
    """HAMi ``addJitteryQos``: remember each device whose QoS at fit time differs from the one this pod
    expects (none for an exclusive card)."""
    for ctr in devices:
        for d in ctr:
            current = (d.custom_info or {}).get(INFO_QOS)
            if not isinstance(current, str):
                continue
            expected = expected_qos(request_qos, d.usedcores)
            if current != expected:
                cache.add(d.uuid, expected)


def sgpu_annotations(backend: DeviceBackend, pod: Mapping[str, Any], devices: PodSingleDevice, *,
                     now_ns: int | None = None) -> dict[str, str]:
    """The MetaX annotations HAMi's ``PatchAnnotations`` adds to the to-allocate/allocated pair.

    ``metax-tech.com/gpu-devices-allocated`` (:func:`metax_allocation`) and
    ``metax-tech.com/predicate-time`` (Unix nanoseconds). Like HAMi's Filter, it also records non-online
    pods' expected QoS changes in the jittery cache and the pod's class on its devices.
    """
    if not any(devices):
        return {}
    state: SgpuState = backend.config.state
    annotations = annotations_of(pod)
    app_class = annotations.get(APP_CLASS, "")
    if app_class != ONLINE:
        record_jittery(state.jittery, annotations.get(QOS_POLICY, ""), devices)
    state.pods.record(pod_key(pod), app_class, (d.uuid for ctr in devices for d in ctr))
    return {SGPU_DEVICES_ALLOCATED: metax_allocation(devices),
            PREDICATE_TIME: str(time.time_ns() if now_ns is None else now_ns)}


def sgpu_decode(backend: DeviceBackend, pod: Mapping[str, Any]) -> PodSingleDevice | None:
    """Decode the pod's ``hami.io/metax-sgpu-devices-allocated`` and remember its app class on those devices."""
    key = backend.allocated_annotation or SGPU_ALLOCATED
    state: SgpuState = backend.config.state
    annotations = annotations_of(pod)
    value = annotations.get(key)
    if not value:
        state.pods.discard(pod_key(pod))
        return None
    try:
        devices = decode_pod_single_device(value, key=key)
    except WireFormatError:
        state.pods.discard(pod_key(pod))
        raise
    state.pods.record(pod_key(pod), annotations.get(APP_CLASS, ""), (d.uuid for ctr in devices for d in ctr))
    return devices
