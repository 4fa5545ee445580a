"""HAMi's Kunlunxin backends, scheduler side (vendors.md Part I; Part A for the shared contract).

Two backends share one ``kunlun:`` config section:

- ``kunlun`` (``pkg/device/kunlun/device.go``): whole XPU cards synthesised from node capacity;
- ``XPU`` (``pkg/device/kunlun/vdevice.go``): vXPU slices (quarter, half or full card) registered as JSON.

Both place devices with HAMi's wing/interconnect selector (``topo.go``), implemented here over device
*indexes* (HAMi's latest ``graghSelect`` orders devices by index itself, since the framework hands the
fit a score-sorted list). Pure functions over plain Kubernetes JSON; :mod:`hami_kunlun.plugin` wires them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import (
    ContainerDevice,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    NodeScore,
    PodSingleDevice,
    ResourceNames,
    ScoreCandidate,
)
from hami_core.wire.common import INT32_MAX, check_device_count, go_quote, split_list
from hami_core.wire.nodes import decode_node_devices_json
from hami_core.wire.quantity import parse_quantity, quantity_to_int
from hami_core.wire.reasons import Reason, gen_reason_items
from hami_kunlun.config import KunlunConfig

VENDOR = "kunlun"
#: Common word of the whole-card backend (also the registered device type).
KUNLUN = "kunlun"
#: Common word of the vXPU backend.
XPU = "XPU"

# Whole card (Part I, first paragraph).
KUNLUN_ALLOCATED = "hami.io/kunlun-allocated"
DEVICE_IDX = "BAIDU_COM_DEVICE_IDX"
CARD_MEMORY = 98304
CARD_COUNT = 100
CARD_CORES = 100

# vXPU (Part I, second paragraph).
XPU_REGISTER = "hami.io/node-register-xpu"
XPU_HANDSHAKE = "hami.io/node-handshake-xpu"
XPU_TO_ALLOCATE = "hami.io/xpu-devices-to-allocate"
XPU_ALLOCATED = "hami.io/xpu-devices-allocated"
NODE_LOCK = "hami.io/mutex.lock"
#: The vXPU memory sizes (MiB): quarter and half card; anything larger is a full card.
SLICES: tuple[int, ...] = (24576, 49152)
MAX_MEMORY = 98304

#: UUID selection keys; both backends read both families (hami.io first, then the legacy baidu.com pair).
USE_UUID = "hami.io/use-xpu-uuid"
NOUSE_UUID = "hami.io/no-use-xpu-uuid"
BAIDU_USE_UUID = "baidu.com/use-gpuuuid"
BAIDU_NOUSE_UUID = "baidu.com/nouse-gpuuuid"

#: Cross-wing links (``InterGroupConnection``) and in-wing links (``GroupConnection``).
INTER_PAIRS: tuple[tuple[int, int], ...] = ((0, 4), (1, 5), (2, 6), (3, 7))
GROUP_PAIRS: tuple[tuple[int, int], ...] = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3),
                                            (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7))
#: Connected quads (``InterGroupConnection2``), in HAMi's preference order.
QUADS: tuple[tuple[int, int, int, int], ...] = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7),
                                                (0, 3, 4, 7), (1, 2, 5, 6))
#: Wing free counts tried, in order, for a one-device request (``oddorder``).
ODD_ORDER: tuple[int, ...] = (1, 3, 2, 4)
WING = 4

Predicate = Callable[[DeviceUsage], bool]


# ------------------------------------------------------------------------------------------ backends
def make_backends(cfg: KunlunConfig) -> list[DeviceBackend]:
    """The ``kunlun`` and ``XPU`` :class:`DeviceBackend` for a validated ``kunlun:`` section.

    ``kunlun``: capacity based (no register/handshake annotation), only the allocated pod key, no lock;
    its fit takes idle cards only, so ``standard_capacity`` holds. ``XPU``: JSON registration with the
    generic handshake, both pod keys, the shared node lock; its fit checks memory but not the split
    count (as HAMi), so the engine must not prefilter it as a standard fit.
    """
    uuid = {"use_uuid_annotation": USE_UUID, "nouse_uuid_annotation": NOUSE_UUID}
    kunlun = DeviceBackend(
        name=KUNLUN, vendor=VENDOR, resource_names=ResourceNames(count=cfg.resource_count_name),
        allocated_annotation=KUNLUN_ALLOCATED, standard_capacity=True, config=cfg, **uuid)
    xpu = DeviceBackend(
        name=XPU, vendor=VENDOR,
        resource_names=ResourceNames(count=cfg.resource_vcount_name, memory=cfg.resource_vmemory_name),
        register_annotation=XPU_REGISTER, handshake_annotation=XPU_HANDSHAKE,
        to_allocate_annotation=XPU_TO_ALLOCATE, allocated_annotation=XPU_ALLOCATED,
        lock_annotation=NODE_LOCK, standard_capacity=False, config=cfg, **uuid)
    return [kunlun, xpu]


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _metadata(obj).get("annotations") or {}


# ------------------------------------------------------------------------------------------ inventory
def kunlun_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Whole cards from ``status.capacity[<count resource>]`` (HAMi ``KunlunDevices.GetNodeDevices``).

    n cards ⇒ devices ``<node>-kunlun-<i>``, index i, split count 100, 98304 MiB, 100 cores, type
    ``kunlun``, healthy, NUMA 1 for ``i >= n / 2`` (integer division) and 0 below. Absent or 0 ⇒ none;
    a value that is not a non-negative integer raises :class:`WireFormatError` naming the resource.
    """
    resource = backend.resource_names.count
    name = str(_metadata(node).get("name", ""))
    raw = ((node.get("status") or {}).get("capacity") or {}).get(resource)
    if raw is None:
        return []
    try:
        cards = quantity_to_int(raw)
    except WireFormatError as exc:
        raise WireFormatError(f"node {name}: status.capacity[{resource}]: {exc}") from None
    if cards is None or not 0 <= cards <= INT32_MAX:
        raise WireFormatError(f"node {name}: status.capacity[{resource}]: {go_quote(raw)} "
                              "is not a non-negative integer")
    check_device_count(cards, f"node {name}: status.capacity[{resource}]")
    return [DeviceInfo(id=f"{name}-kunlun-{i}", index=i, count=CARD_COUNT, devmem=CARD_MEMORY, devcore=CARD_CORES,
                       type=KUNLUN, numa=1 if i >= cards // 2 else 0, health=True)
            for i in range(cards)]


def xpu_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """vXPU cards from the ``hami.io/node-register-xpu`` JSON list (HAMi ``KunlunVDevices.GetNodeDevices``).

    No annotation ⇒ none; malformed JSON raises :class:`WireFormatError` naming the annotation.
    """
    key = backend.register_annotation or XPU_REGISTER
    raw = _annotations(node).get(key)
    if raw is None:
        return []
    return decode_node_devices_json(raw, key=key)


# ------------------------------------------------------------------------------------------ resources
def _resource(container: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """``(present, value)``: limits first, then requests (as HAMi's ``GenerateResourceRequests`` reads)."""
    res = container.get("resources") or {}
    for part in ("limits", "requests"):
        values = res.get(part) or {}
        if name in values:
            return True, values[name]
    return False, None


def _limits(container: Mapping[str, Any]) -> Mapping[str, Any]:
    return (container.get("resources") or {}).get("limits") or {}


def _as_int64(value: Any) -> int | None:
    """Go ``Quantity.AsInt64``: the exact integer, or ``None`` for fractions and unreadable values."""
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


def _count(container: Mapping[str, Any], resource: str) -> int | None:
    """The device count (limits, then requests); ``None`` unless an integer in 1..MaxInt32."""
    present, raw = _resource(container, resource)
    if not present:
        return None
    nums = _as_int64(raw)
    if nums is None or not 0 < nums <= INT32_MAX:
        return None
    return nums


def trim_memory(mib: int) -> int:
    """HAMi ``trimMemory``: round up to a slice, ≤ 24576 → 24576, ≤ 49152 → 49152, else 98304."""
    for size in SLICES:
        if mib <= size:
            return size
    return MAX_MEMORY


# ------------------------------------------------------------------------------------------ admission
def kunlun_mutate(backend: DeviceBackend, container: Mapping[str, Any]) -> bool:
    """HAMi ``KunlunDevices.MutateAdmission``: uses the backend iff the count is in **limits**; no change."""
    return backend.resource_names.count in _limits(container)


def xpu_mutate(backend: DeviceBackend, container: dict[str, Any]) -> bool:
    """HAMi ``KunlunVDevices.MutateAdmission``: with the vXPU count in limits, a memory limit is rounded up
    to its slice (:func:`trim_memory` of Go ``Quantity.Value``, i.e. the ceiling) and written back as both
    limit and request. Returns whether the container uses the backend.
    """
    names = backend.resource_names
    limits = _limits(container)
    if names.count not in limits:
        return False
    if names.memory not in limits:
        return True
    try:
        mib = math.ceil(parse_quantity(limits[names.memory]))
    except WireFormatError:
        return True  # unreadable: the API server rejects it before the webhook in a real cluster
    trimmed = str(trim_memory(mib))
    resources = container["resources"]
    resources["limits"][names.memory] = trimmed
    if not isinstance(resources.get("requests"), dict):
        resources["requests"] = {}
    resources["requests"][names.memory] = trimmed
    return True


# ------------------------------------------------------------------------------------------ requests
def kunlun_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``KunlunDevices.GenerateResourceRequests``: whole cards, ``{n, kunlun, 0 MiB, 100 %, 0 cores}``.

    The count must be an integer in 1..MaxInt32 (HAMi drops 0, negatives and overflow).
    """
    nums = _count(container, backend.resource_names.count)
    if nums is None:
        return None
    return DeviceRequest(KUNLUN, nums, 0, 100, 0)


def xpu_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``KunlunVDevices.GenerateResourceRequests``.

    Memory (limits, then requests) that is an integer is rounded up to a slice, cores = memory x 100 /
    98304 (25, 50 or 100) and the percentage 0. Without a usable memory value: 98304 MiB, 100 cores,
    100 %.
    """
    names = backend.resource_names
    nums = _count(container, names.count)
    if nums is None:
        return None
    memory = 0
    present, raw = _resource(container, names.memory)
    if present:
        value = _as_int64(raw)
        if value is not None:
            memory = trim_memory(value)
    if memory == 0:
        return DeviceRequest(XPU, nums, MAX_MEMORY, 100, 100)
    return DeviceRequest(XPU, nums, memory, 0, memory * 100 // MAX_MEMORY)


# ------------------------------------------------------------------------------------------ topology
def _fitting(devices: Sequence[DeviceUsage], ok: Predicate) -> list[int]:
    return [d.index for d in devices if ok(d)]


def _pick(devices: Sequence[DeviceUsage], start: int, count: int, ok: Predicate) -> list[int]:
    """HAMi ``devicepick``: the first ``count`` fitting devices from index ``start`` on."""
    out: list[int] = []
    for d in devices:
        if d.index >= start and ok(d):
            out.append(d.index)
            if len(out) == count:
                break
    return out


def _interconnect(devices: Sequence[DeviceUsage], count: int, ok: Predicate) -> list[int]:
    """HAMi ``interconnect``: a cross-wing pair for 2 devices, a connected quad for 4.

    With 6 free devices the first quad that leaves a connected pair (in-wing or cross-wing) wins; when
    none does, the last quad that fits.
    """
    free = _fitting(devices, ok)
    have = set(free)
    if count == 2:
        for a in free:
            for b in free:
                if a != b and ((a, b) in INTER_PAIRS or (b, a) in INTER_PAIRS):
                    return [a, b]
    if count == 4:
        if len(free) in (4, 5):
            for quad in QUADS:
                if have.issuperset(quad):
                    return list(quad)
        if len(free) == 6:
            chosen: list[int] = []
            for quad in QUADS:
                if have.issuperset(quad):
                    chosen = list(quad)
                    rest = have.difference(quad)
                    if any(rest.issuperset(pair) for pair in INTER_PAIRS + GROUP_PAIRS):
                        return chosen
            return chosen
    return []


def graph_select(devices: Sequence[DeviceUsage], count: int, ok: Predicate) -> list[int]:
    """HAMi ``graghSelect``: device indexes for ``count`` devices, or ``[]``.

    Indexes 0-3 are the left wing, 4-7 the right. 8 ⇒ all eight fit or nothing. 1, 2 or 4 ⇒ when a wing
    has at least ``count`` fitting devices, take the first fitting devices of the wing whose fitting
    count equals ``count``, ``count + 1`` ... 4 (1, 3, 2, 4 for one device), left before right;
    otherwise :func:`_interconnect`. Other counts never fit.
    """
    ordered = sorted(devices, key=lambda d: d.index)
    left = sum(1 for d in ordered if d.index < WING and ok(d))
    right = sum(1 for d in ordered if d.index >= WING and ok(d))
    if count == 8:
        return _fitting(ordered, ok) if left + right == count else []
    if count not in (1, 2, 4):
        return []
    if left >= count or right >= count:
        for slots in range(count, WING + 1):
            wanted = ODD_ORDER[slots - 1] if count % 2 == 1 else slots
            if left == wanted:
                return _pick(ordered, 0, count, ok)
            if right == wanted:
                return _pick(ordered, WING, count, ok)
    return _interconnect(ordered, count, ok)


# ------------------------------------------------------------------------------------------ fit
def uuid_predicate(pod: Mapping[str, Any]) -> Predicate | None:
    """HAMi ``CheckUUID`` (A.8) for both families: the device must pass the ``hami.io/use-xpu-uuid`` /
    ``no-use-xpu-uuid`` pair and the legacy ``baidu.com/use-gpuuuid`` / ``nouse-gpuuuid`` pair; ``None``
    when no constraint is set."""
    annos = _annotations(pod)
    use = [frozenset(split_list(annos.get(k))) for k in (USE_UUID, BAIDU_USE_UUID)]
    nouse = frozenset(split_list(annos.get(NOUSE_UUID))) | frozenset(split_list(annos.get(BAIDU_NOUSE_UUID)))
    use = [u for u in use if u]
    if not use and not nouse:
        return None
    return lambda d: all(d.id in u for u in use) and d.id not in nouse


def _whole_card_ok(d: DeviceUsage) -> bool:
    """HAMi ``FitXPU``: a healthy idle card."""
    return d.health and d.used == 0


def _vxpu_ok(request: DeviceRequest, mutex: bool) -> Predicate:
    """HAMi ``FitVXPU``: healthy, the slice fits the free memory, and the card is idle or hosts only
    slices of the requested size (average booked memory per task); ``mutex`` requires idle."""
    def ok(d: DeviceUsage) -> bool:
        if not d.health or request.memreq + d.usedmem > d.totalmem:
            return False
        if d.used == 0:
            return True
        return not mutex and d.usedmem // d.used == request.memreq
    return ok


def _failure(devices: Sequence[DeviceUsage], uuid_ok: Predicate | None, mutex: bool) -> FitResult:
    """HAMi's reasons when the selector finds nothing: ``CardUuidMismatch`` for devices the UUID
    annotations exclude, ``ExclusiveDeviceAllocateConflict`` for busy devices under ``mutex``, else
    one ``NumaNotFit``; totals are the number of devices offered (``"1/8 NumaNotFit"``)."""
    counts: dict[str, int] = {}
    allowed = list(devices)
    if uuid_ok is not None:
        allowed = [d for d in devices if uuid_ok(d)]
        if len(allowed) < len(devices):
            counts[Reason.CardUuidMismatch] = len(devices) - len(allowed)
    if mutex:
        busy = sum(1 for d in allowed if d.used > 0)
        if busy:
            counts[Reason.ExclusiveDeviceAllocateConflict] = busy
    if not counts:
        counts[Reason.NumaNotFit] = 1
    return FitResult.unschedulable(*gen_reason_items(counts, len(devices)))


def _fit_one(devices: Sequence[DeviceUsage], request: DeviceRequest, ok: Predicate,
             uuid_ok: Predicate | None, mutex: bool, whole: bool) -> FitResult:
    check = ok if uuid_ok is None else (lambda d: uuid_ok(d) and ok(d))
    chosen = graph_select(devices, request.nums, check)
    if not chosen:
        return _failure(devices, uuid_ok, mutex)
    by_index: dict[int, DeviceUsage] = {}
    for d in devices:
        by_index.setdefault(d.index, d)
    out = []
    for idx in chosen:
        d = by_index[idx]
        # Whole cards record (and, after a restart, book) the full card; vXPU the slice.
        mem, cores = (d.totalmem, d.totalcore) if whole else (request.memreq, request.coresreq)
        out.append(ContainerDevice(d.id, request.backend, mem, cores, d.index))
    return FitResult.success(out)


def kunlun_filter(pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                  policy: GpuPolicy) -> list[FitResult]:
    """HAMi ``KunlunDevices.Fit`` on every candidate: :func:`graph_select` over healthy idle cards that
    pass the UUID annotations; each chosen card records its whole memory and cores."""
    uuid_ok = uuid_predicate(pod)
    return [_fit_one(c.devices, request, _whole_card_ok, uuid_ok, False, True) for c in candidates]


def xpu_filter(pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
               policy: GpuPolicy) -> list[FitResult]:
    """HAMi ``KunlunVDevices.Fit`` on every candidate: :func:`graph_select` with the vXPU predicate;
    each chosen card records the request's slice (memory and cores)."""
    uuid_ok = uuid_predicate(pod)
    mutex = policy.has("mutex")
    ok = _vxpu_ok(request, mutex)
    return [_fit_one(c.devices, request, ok, uuid_ok, mutex, False) for c in candidates]


# ------------------------------------------------------------------------------------------ score
def count_bubbles(indexes: Iterable[int]) -> int:
    """HAMi ``countbubble``: per wing, 4 used → 0, 1 → 2, otherwise 1; no index at all → 1."""
    idx = list(indexes)
    left = sum(1 for i in idx if i < WING)
    right = len(idx) - left
    if left == 0 and right == 0:
        return 1

    def value(n: int) -> int:
        return 0 if n == 4 else 2 if n == 1 else 1
    return value(left) + value(right)


def calc_score(previous: Iterable[int], current: Iterable[int]) -> float:
    """HAMi ``calcscore``: bubble delta (current - previous) -1 → 3000, 0 → 2000, +1 → 1000, +2 → 0,
    anything else 1000."""
    delta = count_bubbles(current) - count_bubbles(previous)
    return {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}.get(delta, 1000.0)


def kunlun_score(candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None]:
    """HAMi ``KunlunDevices.ScoreNode`` (added raw, node policy ignored): :func:`calc_score` of the
    indexes of busy cards before the pod against the indexes the pod's containers got."""
    out: list[NodeScore | None] = []
    for cand in candidates:
        assigned = cand.assignment.get(KUNLUN)
        if not assigned or not any(assigned):
            out.append(None)
            continue
        previous = sorted({d.index for d in cand.previous.get(KUNLUN, ()) if d.used > 0})
        current = sorted({d.idx for ctr in assigned for d in ctr})
        out.append(NodeScore(calc_score(previous, current)))
    return out


# ------------------------------------------------------------------------------------------ annotations
def kunlun_annotations(devices: PodSingleDevice) -> dict[str, str]:
    """``BAIDU_COM_DEVICE_IDX`` = comma list of the indexes of the **last** container that got cards
    (HAMi overwrites the key per container); nothing when none did."""
    last = next((ctr for ctr in reversed(devices) if ctr), None)
    return {} if last is None else {DEVICE_IDX: ",".join(str(d.idx) for d in last)}
