"""HAMi's MetaX sGPU backend, scheduler side (vendors.md G.2; Part A for the shared contract).

Shared cards (common word ``Metax-SGPU``) registered as JSON by the MetaX sGPU device plugin, with QoS policies,
online/offline app classes and MetaLink-aware choice and scoring.

:class:`SgpuBackend` is a :class:`~hami_core.plugins.StandardBackend` holding the scheduler-side memory HAMi's
``MetaxSDevices`` keeps (:mod:`hami_metax.state`: the jittery QoS cache and the app classes of the pods on each
device), one per engine. From the base it keeps the shared node lock ``hami.io/mutex.lock`` and the
to-allocate/allocated pair, to which it adds MetaX's own allocation annotations; registration, health, admission,
the request's limits-only reading and memory units, fit and score are MetaX's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

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
    NodeScore,
    PodSingleDevice,
    ResourceNames,
    ScoreCandidate,
    Selection,
    StandardBackend,
    WireFormatError,
    as_int64,
    containers,
    pod_key,
    quantity_value,
    resource,
    standard_allocation_annotations,
    unix_nanos,
)

# `from hami_core.plugins import annotations` yields __future__.annotations (the package's own future import
# binds the name before its lazy export can): take the accessor from its module until hami-core fixes that.
from hami_core.plugins.objects import annotations
from hami_core.wire import gojson as _json
from hami_core.wire import keys
from hami_core.wire.common import INT32_MAX, INT32_MIN, parse_go_bool, wire_error
from hami_core.wire.pods import decode_pod_single_device
from hami_core.wire.reasons import Reason, gen_reason_items
from hami_metax.common import GPU_WORD, SGPU_WORD, VENDOR
from hami_metax.config import MetaxConfig
from hami_metax.state import OFFLINE, ONLINE, JitteryQosCache, PodClasses

__all__ = ["SGPU_WORD", "SgpuBackend", "SgpuDevice", "decode_sgpu_devices", "encode_sgpu_devices", "sgpu_fit",
           "sgpu_score"]

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


@dataclass(frozen=True, slots=True)
class SgpuBackend(StandardBackend):
    """The MetaX sGPU backend (G.2): GiB memory (factor 1024), UUID selection, the shared lock.

    Its memory lives as long as the engine that built it (each engine asks the plugin for its own backends).
    """

    #: a container without ``vcore`` books a whole card's compute
    default_cores: ClassVar[int] = 100
    #: ``MemPercentagereq``: 100 % of the card without memory, else 0 (``Memreq`` wins)
    memory_given_percentage: ClassVar[int] = 0

    #: HAMi's jittery QoS cache: devices whose QoS policy this scheduler expects to change
    jittery: JitteryQosCache = field(default_factory=JitteryQosCache, compare=False, repr=False)
    #: the app class of the pods holding each device (HAMi's ``DeviceUsage.PodInfos``)
    pods: PodClasses = field(default_factory=PodClasses, compare=False, repr=False)

    @classmethod
    def from_config(cls, cfg: MetaxConfig) -> SgpuBackend:
        return cls(name=SGPU_WORD, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.resource_vcount_name, memory=cfg.resource_vmemory_name,
                                                cores=cfg.resource_vcore_name, memory_factor=MEMORY_FACTOR),
                   register_annotation=NODE_SGPU_DEVICES, to_allocate_annotation=SGPU_TO_ALLOCATE,
                   allocated_annotation=SGPU_ALLOCATED, use_uuid_annotation=USE_UUID, nouse_uuid_annotation=NOUSE_UUID,
                   lock_annotation=keys.NODE_LOCK,
                   # Online pods skip the core checks, so the engine's numeric prefilter would be wrong here.
                   standard_capacity=False, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> list[DeviceInfo]:
        """Devices from ``metax-tech.com/node-gpu-devices``; no annotation ⇒ none.

        A readable registration also clears the jittery QoS entries it confirms (HAMi ``jqCache.Sync``).
        """
        key = self.register_annotation or NODE_SGPU_DEVICES
        raw = annotations(node).get(key)
        if raw is None:
            return []
        records = decode_sgpu_devices(raw, key=key)
        self.jittery.sync((d.uuid, d.qos_policy) for d in records)
        return to_device_infos(records)

    def hami_node_health(self, node: Mapping[str, Any], devices: Sequence[DeviceInfo]) -> HealthReport:
        """HAMi ``CheckHealth`` for sGPU: healthy iff the registration lists a device; always refresh.

        A node without the annotation has no MetaX sGPU to be unhealthy about (as hami-core's generic
        health treats nodes without devices).
        """
        if devices:
            return HealthReport(True, True)
        key = self.register_annotation or NODE_SGPU_DEVICES
        if key not in annotations(node):
            return HealthReport(True, False)
        return HealthReport(False, True, reason=f"{key} lists no device")

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission`` for sGPU (G.2): whether the container requests sGPU.

        With the count in limits: an app class must be ``online``/``offline`` with a count of exactly 1; a
        pod that is not ``online`` gets ``metax-tech.com/sgpu-qos-policy: best-effort`` when it has none, and
        must otherwise name one of the three policies. Violations raise :class:`AdmissionFailed`.
        """
        limits = (container.get("resources") or {}).get("limits") or {}
        count_name = self.resource_names.count
        if count_name not in limits:
            return Mutation(False)
        cname = container.get("name", "<unnamed>")
        meta = pod.setdefault("metadata", {})
        annos = meta.get("annotations")
        if annos is None:
            annos = meta["annotations"] = {}
        app_class = annos.get(APP_CLASS)
        if app_class is not None:
            if app_class not in APP_CLASSES:
                raise AdmissionFailed(f"container {cname}: {APP_CLASS} must be set one of [{ONLINE}, {OFFLINE}]")
            if quantity_value(limits[count_name]) != 1:
                raise AdmissionFailed(f"container {cname}: app-class pod must request single device")
        if app_class != ONLINE:
            qos = annos.get(QOS_POLICY)
            if qos is None:
                annos[QOS_POLICY] = BEST_EFFORT
            elif qos not in QOS_POLICIES:
                raise AdmissionFailed(f"container {cname}: {QOS_POLICY} must be set one of "
                                      f"[{BEST_EFFORT}, {FIXED_SHARE}, {BURST_SHARE}]")
        return Mutation(True)

    # ----------------------------------------------------------------------------------- requests
    # HAMi ``GenerateResourceRequests`` for sGPU (G.2) reads only ``limits``: count 1..MaxInt32; ``vcore``
    # (default 100) 0..MaxInt32; ``vmemory`` bare = GiB, with a unit = bytes. Out-of-range values drop the
    # request; values that are not whole numbers are ignored (a count that is not is no request).
    def request_count(self, container: Mapping[str, Any]) -> int | None:
        nums = as_int64(resource(container, self.resource_names.count, limits_only=True))
        return nums if nums is not None and 1 <= nums <= INT32_MAX else None

    def request_memory(self, container: Mapping[str, Any]) -> int | None:
        """MiB: a bare ``vmemory`` x1024 (at most MaxInt32/1024), one with a unit (bytes) / 1 MiB, truncated;
        0 when absent or not a whole number; ``None`` (dropped) outside 0..MaxInt32 MiB."""
        raw = resource(container, self.resource_names.memory, limits_only=True)
        value = as_int64(raw)
        if value is None:
            return 0
        if _has_unit(raw):
            mem = _trunc_div(value, _MIB)
        else:
            if not 0 <= value <= INT32_MAX // MEMORY_FACTOR:
                return None
            mem = value * MEMORY_FACTOR
        return mem if 0 <= mem <= INT32_MAX else None

    def request_cores(self, container: Mapping[str, Any]) -> int | None:
        value = as_int64(resource(container, self.resource_names.cores, limits_only=True))
        if value is None:
            return self.default_cores
        return value if 0 <= value <= INT32_MAX else None

    # ----------------------------------------------------------------------------------- filter
    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy) -> list[FitResult]:
        """:func:`sgpu_fit` on every candidate, with the state HAMi keeps in ``DeviceUsage`` and its caches.

        The pod's earlier app containers on a node changed their devices' QoS in this cycle (HAMi
        ``AddResourceUsage``). A device's pod classes come from :attr:`pods`, ignoring the pod itself; a
        device on which nothing but this pod is booked is idle, so any classes remembered for it are stale
        and dropped. ``mutex`` applies when the whole GPU policy is ``mutex``, as HAMi compares it.
        """
        annos = annotations(pod)
        key = pod_key(pod)
        online = annos.get(APP_CLASS) == ONLINE
        request_qos = annos.get(QOS_POLICY, "")
        jittery = self.jittery.snapshot()
        init_count = len(containers(pod)[0])
        mutex = policy.has("mutex")  # a token of the policy chain (HAMi v2.10, PR #2621)
        out = []
        for cand in candidates:
            own_slots: dict[str, int] = {}
            current: dict[str, str] = {}
            for pos, ctr in enumerate(cand.allocated.get(self.name, ())):
                if pos < init_count:
                    continue  # init containers do not add to the usage later containers see
                for d in ctr:
                    own_slots[d.uuid] = own_slots.get(d.uuid, 0) + 1
                    if not online:
                        current[d.uuid] = expected_qos(request_qos, d.usedcores)
            classes: dict[str, tuple[int, int]] = {}
            for dev in cand.devices:
                if dev.used - own_slots.get(dev.id, 0) <= 0:
                    self.pods.forget_device(dev.id, keep=key)
                else:
                    classes[dev.id] = self.pods.counts(dev.id, exclude=key)
            out.append(sgpu_fit(cand.devices, request, annos, mutex=mutex, current_qos=current, jittery=jittery,
                                classes=classes, topology_aware=self.config.sgpu_topology_aware))
        return out

    # ----------------------------------------------------------------------------------- score
    def hami_score_nodes(self, pod: Mapping[str, Any], candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None]:
        """:func:`sgpu_score`, policy neutral, on every node where the pod got sGPU devices; ``None`` elsewhere,
        and where it got MetaX GPU cards too: that node's one answer is the GPU backend's (:mod:`hami_metax.common`)."""
        out: list[NodeScore | None] = []
        for cand in candidates:
            devices = cand.assignment.get(self.name, ())
            if not any(devices) or any(cand.assignment.get(GPU_WORD, ())):
                out.append(None)
                continue
            out.append(NodeScore(sgpu_score(annotations(pod), devices, cand.previous.get(self.name, ())),
                                 neutral=True))
        return out

    # ----------------------------------------------------------------------------------- reserve / bind
    def hami_allocation_annotations(self, pod: Mapping[str, Any], devices: PodSingleDevice,
                                    now: float) -> dict[str, str]:
        """The to-allocate/allocated pair plus what HAMi's ``PatchAnnotations`` adds for MetaX sGPU.

        ``metax-tech.com/gpu-devices-allocated`` (:func:`metax_allocation`) and ``metax-tech.com/predicate-time``
        (the decision time in Unix nanoseconds). Like HAMi's Filter, it also records non-online pods' expected
        QoS changes in the jittery cache and the pod's class on its devices.
        """
        out = dict(standard_allocation_annotations(self, devices) or {})
        if not any(devices):
            return out
        annos = annotations(pod)
        app_class = annos.get(APP_CLASS, "")
        if app_class != ONLINE:
            record_jittery(self.jittery, annos.get(QOS_POLICY, ""), devices)
        self.pods.record(pod_key(pod), app_class, (d.uuid for ctr in devices for d in ctr))
        out[SGPU_DEVICES_ALLOCATED] = metax_allocation(devices)
        out[PREDICATE_TIME] = str(unix_nanos(now))
        return out

    def hami_decode_allocation(self, pod: Mapping[str, Any]) -> PodSingleDevice | None:
        """Decode the pod's ``hami.io/metax-sgpu-devices-allocated`` and remember its app class on those devices."""
        key = self.allocated_annotation or SGPU_ALLOCATED
        annos = annotations(pod)
        value = annos.get(key)
        if not value:
            self.pods.discard(pod_key(pod))
            return None
        try:
            devices = decode_pod_single_device(value, key=key)
        except WireFormatError:
            self.pods.discard(pod_key(pod))
            raise
        self.pods.record(pod_key(pod), annos.get(APP_CLASS, ""), (d.uuid for ctr in devices for d in ctr))
        return devices


def _has_unit(value: Any) -> bool:
    """Whether a quantity is written with a suffix or exponent (any ASCII letter), as HAMi tests it."""
    return isinstance(value, str) and any("a" <= c.lower() <= "z" for c in value)


def _trunc_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // b
    return q if a >= 0 else -q


# ------------------------------------------------------------------------------------------ registration
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
    sel = Selection(annotations, use_type=None, nouse_type=None, use_uuid=USE_UUID, nouse_uuid=NOUSE_UUID)
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
        if not sel.uuid_ok(dev.id):
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

