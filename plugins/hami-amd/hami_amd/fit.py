"""HAMi's AMD fit (``AMDDevices.Fit`` and ``checkAMDType``, ``pkg/device/amd/device.go`` v2.10.0).

It is not the standard checklist: an AMD device books *compute units*, not percent, so a request's core
percentage becomes ``floor(devcore x percent / 100)`` CUs on each device (at least 1, at most ``devcore``); a
request without memory books the whole card's memory (and then, without a core percentage, all its CUs); and
there is no "exclusive 100-core card" or "compute exhausted" step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hami_core.plugins import ContainerDevice, DeviceBackend, DeviceRequest, DeviceUsage, FitResult
from hami_core.wire.reasons import Reason, gen_reason_items

#: HAMi's common word (``AMDDevice``): the request ``Type`` its ``checkType`` compares case-insensitively.
COMMON_WORD = "AMD"
_INT32 = 2**32


def _go_int32(value: int) -> int:
    """Go's int32 arithmetic wraps: ``Totalcore * Coresreq`` beyond 2^31-1 keeps its low 32 bits."""
    return (value + 2**31) % _INT32 - 2**31


def _allowed(annotations: Mapping[str, str], use_key: str, nouse_key: str, match: Callable[[str], bool]) -> bool:
    """HAMi's use / no-use rule on two comma-list annotations: a non-blank use list must have an entry that
    ``match``es, a non-blank no-use list none. Entries are trimmed; blank entries never match. Unlike the core's
    :class:`~hami_core.plugins.Selection`, a list made only of blank entries (``", "``) is still a constraint."""

    def listed(value: str) -> bool:
        return any(entry.strip() and match(entry.strip()) for entry in value.split(","))

    use = annotations.get(use_key, "")
    if use.strip() and not listed(use):
        return False
    nouse = annotations.get(nouse_key, "")
    return not (nouse.strip() and listed(nouse))


def check_amd_type(annotations: Mapping[str, str], card_type: str, use_key: str, nouse_key: str) -> bool:
    """HAMi ``checkAMDType``: the card passes the pod's ``amd.com/use-gputype`` / ``nouse-gputype`` lists, whose
    entries match as upper-cased substrings of the upper-cased card type (``MI300`` matches ``AMD-MI300X``)."""
    card = card_type.upper()
    return _allowed(annotations, use_key, nouse_key, lambda entry: entry.upper() in card)


def check_uuid(annotations: Mapping[str, str], device_id: str, use_key: str, nouse_key: str) -> bool:
    """HAMi ``CheckUUID``: the device passes the pod's ``amd.com/use-gpu-uuid`` / ``nouse-gpu-uuid`` lists, whose
    entries match the device id exactly."""
    return _allowed(annotations, use_key, nouse_key, lambda entry: entry == device_id)


def book(dev: DeviceUsage, request: DeviceRequest) -> tuple[int, int | None]:
    """MiB and CUs ``request`` books on ``dev``; CUs ``None`` when a core percentage meets a device with no CUs.

    Memory: ``Memreq``, or the whole card's memory when 0. CUs: ``devcore x Coresreq / 100`` clamped to
    ``[1, devcore]`` when a percentage is given; else all of them when the whole memory is booked; else 0.
    """
    mem = dev.totalmem if request.memreq <= 0 and dev.totalmem > 0 else request.memreq
    if request.coresreq > 0:
        if dev.totalcore <= 0:
            return mem, None
        return mem, min(max(_go_int32(dev.totalcore * request.coresreq) // 100, 1), dev.totalcore)
    if dev.totalmem > 0 and mem >= dev.totalmem:
        return mem, dev.totalcore
    return mem, 0


def refusal(dev: DeviceUsage, request: DeviceRequest, annotations: Mapping[str, str], keys: DeviceBackend,
            mutex: bool) -> str | None:
    """Why HAMi's AMD ``Fit`` skips ``dev`` before booking (``None``: go on), in HAMi's order: health, type
    (``checkType``: the request must be AMD's, case-insensitively, and the card must pass ``checkAMDType``),
    the UUID lists (``CheckUUID``), a free task slot, and under ``mutex`` an idle device. ``keys`` names the
    selection annotations (the backend's ``use_*`` / ``nouse_*`` fields)."""
    if not dev.health:
        return Reason.CardNotHealth
    if request.backend.upper() != COMMON_WORD or not check_amd_type(
            annotations, dev.type, keys.use_type_annotation or "", keys.nouse_type_annotation or ""):
        return Reason.CardTypeMismatch
    if not check_uuid(annotations, dev.id, keys.use_uuid_annotation or "", keys.nouse_uuid_annotation or ""):
        return Reason.CardUuidMismatch
    if dev.count <= dev.used:
        return Reason.CardTimeSlicingExhausted
    if mutex and dev.used > 0:
        return Reason.ExclusiveDeviceAllocateConflict
    return None


def fit(devices: Sequence[DeviceUsage], request: DeviceRequest, annotations: Mapping[str, str],
        keys: DeviceBackend, mutex: bool) -> FitResult:
    """HAMi ``AMDDevices.Fit`` on one node: walk from the last (preferred) device and take ``request.nums``.

    Each device taken is written with its *registered* type (``AMD Instinct MI300X VF``), not the common word, as
    HAMi keeps the product name in the allocation annotation; usage is booked in MiB and CUs. A node that cannot
    give them all reports ``AllocatedCardsInsufficientRequest`` besides each skipped device's reason.
    """
    counts: dict[str, int] = {}
    chosen: list[ContainerDevice] = []
    for dev in reversed(devices):
        reason = refusal(dev, request, annotations, keys, mutex)
        if reason is None:
            mem, cus = book(dev, request)
            if dev.totalmem - dev.usedmem < mem:
                reason = Reason.CardInsufficientMemory
            elif cus is None or dev.totalcore - dev.usedcores < cus:
                reason = Reason.CardInsufficientCore
            else:
                chosen.append(ContainerDevice(dev.id, dev.type, mem, cus, dev.index))
                if len(chosen) == request.nums:
                    return FitResult.success(chosen)
                continue
        counts[reason] = counts.get(reason, 0) + 1
    if chosen:
        counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
    if not counts:  # no device at all: the engine rejects such a node before asking
        return FitResult.unschedulable(Reason.NodeInsufficientDevice)
    return FitResult.unschedulable(*gen_reason_items(counts, len(devices)))
