"""HAMi's Ascend ``Fit`` and ``ScoreNode`` on one node (vendors.md C.7), as pure functions.

The Ascend fit is not :func:`~hami_core.plugins.standard_fit`: in hami-core (soft split) mode the core checks use
a total of 100 whatever ``devcore`` the chip registers, every candidate is collected (instead of stopping at
``nums``) for HCCS topology and 910C module pairing, and HAMi's Ascend ``GenReason`` prints zero counts too.
:class:`~hami_ascend.backend.NpuBackend` calls :func:`fit_node` per candidate and :func:`topology_score` per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.plugins import ContainerDevice, DeviceRequest, DeviceUsage, FitResult, Selection, memory_to_book
from hami_core.wire.reasons import Reason

#: Common-word prefix of the chips with HCCS network topology (NetworkID in the registration).
ASCEND910_PREFIX = "Ascend910"
#: The 910C common word: NPUs come in modules of two (``index // 2``).
ASCEND910C = "Ascend910C"
NETWORK_ID = "NetworkID"
NETWORK_WEIGHT = 10
MODULE_NPUS = 2


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


def fit_node(name: str, devices: Sequence[DeviceUsage], request: DeviceRequest, *, hami_core: bool,
             node_hami_core: bool, selection: Selection, mutex: bool) -> FitResult:
    """HAMi's Ascend ``Fit`` for chip ``name`` on one node (C.7), walking ``devices`` from the last (preferred).

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
    topology = name.startswith(ASCEND910_PREFIX) and _has_network_id(devices)
    collect = topology or pair_910c
    cores = min(request.coresreq, 100)
    type_ok = request.backend == name
    uuid_ok = selection.uuid_ok if selection.filters_uuid else None
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
        if uuid_ok is not None and not uuid_ok(dev.id):
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


def topology_score(name: str, devices: Sequence[Sequence[ContainerDevice]]) -> float:
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
