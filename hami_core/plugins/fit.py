"""HAMi's standard per-device fit checklist (spec §6.6, vendors.md A.7), shared by vendor plugins.

A vendor calls :func:`standard_fit` with its own predicates (type check, UUID selection, custom rule)
and gets HAMi's exact check order, reason counting and reason string.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from itertools import combinations

from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceBackend,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    PodDevices,
    QuotaView,
)
from hami_core.wire.reasons import Reason, gen_reason_items

DevicePredicate = Callable[[DeviceUsage], bool]
#: ``custom_rule(device, mem, cores, chosen_so_far) -> bool``; False ⇒ ``CardNotFoundCustomFilterRule``.
CustomRule = Callable[[DeviceUsage, int, int, Sequence[ContainerDevice]], bool]
#: ``quota(device, mem, cores, chosen_so_far) -> bool``; False ⇒ ``ResourceQuotaNotFit``.
QuotaCheck = Callable[[DeviceUsage, int, int, Sequence[ContainerDevice]], bool]


def collapse(devices: PodDevices, init_count: int, *, app_only: bool = False) -> dict[str, tuple[ContainerDevice, ...]]:
    """Effective usage of a pod per backend and device (spec §6.3 "Collapse").

    Init containers run one after another, so they count as their peak; app containers run together,
    so they add up. With ``app_only`` (every init container has exited 0) only app containers count.
    Result: per backend one tuple of devices sorted by UUID, each with ``slots`` set.
    """
    out: dict[str, tuple[ContainerDevice, ...]] = {}
    for backend, containers in devices.items():
        init: dict[str, list[int]] = {}
        app: dict[str, list[int]] = {}
        idx: dict[str, int] = {}
        for pos, ctr in enumerate(containers):
            is_init = pos < init_count
            if is_init and app_only:
                continue
            for d in ctr:
                idx.setdefault(d.uuid, d.idx)
                if is_init:
                    peak = init.setdefault(d.uuid, [d.usedmem, d.usedcores])
                    peak[0] = max(peak[0], d.usedmem)
                    peak[1] = max(peak[1], d.usedcores)
                else:
                    acc = app.setdefault(d.uuid, [0, 0, 0])
                    acc[0] += d.usedmem
                    acc[1] += d.usedcores
                    acc[2] += 1
        merged = []
        for uuid in sorted(set(init) | set(app)):
            # the larger of the init peak and the app sum, of those present (an app-only negative core booking,
            # which HAMi keeps, stays negative rather than maxed against an absent init container's 0)
            held = [tuple(init[uuid])] if uuid in init else []
            a_slots = 0
            if uuid in app:
                a_mem, a_cores, a_slots = app[uuid]
                held.append((a_mem, a_cores))
            slots = max(a_slots, 1)
            merged.append(ContainerDevice(uuid, backend, max(m for m, _ in held), max(c for _, c in held), idx[uuid],
                                          slots))
        if merged:
            out[backend] = tuple(merged)
    return out


def quota_predicate(quota: QuotaView | None, backend: DeviceBackend, candidate: FitCandidate) -> QuotaCheck | None:
    """The ``quota`` predicate of :func:`standard_fit` for one node (spec §11.2), or ``None`` when ``quota`` does
    not limit ``backend``'s resources.

    A device fits when the pod's hypothetical usage stays within the namespace's limits: the devices its earlier
    containers got on this node, those chosen so far for this container and the device itself, collapsed as
    booked (init containers as a peak, app containers as a sum) and summed over the backend's entries.
    """
    if quota is None or not quota.limited(backend.resource_names):
        return None
    name, names, position = backend.name, backend.resource_names, quota.position
    slots = [tuple(c) for c in candidate.allocated.get(name, ())]
    slots.extend([()] * (position + 1 - len(slots)))
    init_count = quota.init_count

    def check(dev: DeviceUsage, mem: int, cores: int, chosen: Sequence[ContainerDevice]) -> bool:
        slots[position] = (*chosen, ContainerDevice(dev.id, name, mem, cores, dev.index))
        booked = collapse({name: tuple(slots)}, init_count).get(name, ())
        return quota.fits(names, sum(d.usedmem for d in booked), sum(d.usedcores for d in booked))

    return check


def memory_to_book(dev: DeviceUsage, request: DeviceRequest) -> int:
    """MiB a request books on ``dev``: ``memreq`` if set, else the percentage of the card, else 0."""
    if request.memreq > 0:
        return request.memreq
    if request.mem_percentage != MEM_PERCENTAGE_UNSET:
        return dev.totalmem * request.mem_percentage // 100
    return 0


def standard_fit(
    devices: Sequence[DeviceUsage],
    request: DeviceRequest,
    *,
    type_ok: DevicePredicate | None = None,
    uuid_ok: DevicePredicate | None = None,
    cordoned: Collection[str] = (),
    numa_bind: bool = False,
    mutex: bool = False,
    topology: bool = False,
    quota: QuotaCheck | None = None,
    custom_rule: CustomRule | None = None,
    custom_reason: str = Reason.CardNotFoundCustomFilterRule,
    revisit: DevicePredicate | None = None,
) -> FitResult:
    """Choose ``request.nums`` devices, walking ``devices`` from the last (preferred) to the first.

    Checks, in HAMi's order, recording the first failing reason per device: health, cordon, type,
    NUMA grouping (``numa_bind``), UUID selection, split count, ``mutex``, quota, memory, cores,
    exclusive whole card, compute exhausted, the vendor's custom rule. ``topology`` collects every
    eligible device and picks by pair scores (spec §6.7). A device accepted while ``revisit(device)`` holds is
    examined again before the walk moves on, so it can be chosen several times (NVIDIA MIG: several instances
    from one GPU; the custom rule sees the earlier choices in ``chosen_so_far``).
    """
    total = len(devices)
    need = origin = request.nums
    cores = min(request.coresreq, 100)
    counts: dict[str, int] = {}
    chosen: list[ContainerDevice] = []
    chosen_devs: list[DeviceUsage] = []
    current_numa: int | None = None
    backend = request.backend

    def fail(reason: str) -> None:
        counts[reason] = counts.get(reason, 0) + 1

    # a plain range unless a device may be chosen twice: other requests pay nothing for the revisit
    again = [False] if revisit is not None else None
    for i in range(total - 1, -1, -1) if again is None else _walk(total, again):
        dev = devices[i]
        if not dev.health:
            fail(Reason.CardNotHealth)
            continue
        if cordoned and dev.id in cordoned:
            fail(Reason.CardCordoned)
            continue
        if type_ok is not None and not type_ok(dev):
            fail(Reason.CardTypeMismatch)
            continue
        if numa_bind and dev.numa != current_numa:
            if chosen and need != origin:
                counts[Reason.NumaNotFit] = counts.get(Reason.NumaNotFit, 0) + len(chosen)
            need = origin
            chosen.clear()
            chosen_devs.clear()
            current_numa = dev.numa
        if uuid_ok is not None and not uuid_ok(dev):
            fail(Reason.CardUuidMismatch)
            continue
        if dev.count <= dev.used:
            fail(Reason.CardTimeSlicingExhausted)
            continue
        if mutex and dev.used > 0:
            fail(Reason.ExclusiveDeviceAllocateConflict)
            continue
        mem = memory_to_book(dev, request)
        if quota is not None and not quota(dev, mem, cores, chosen):
            fail(Reason.ResourceQuotaNotFit)
            continue
        if dev.totalmem - dev.usedmem < mem:
            fail(Reason.CardInsufficientMemory)
            continue
        if dev.totalcore - dev.usedcores < cores:
            fail(Reason.CardInsufficientCore)
            continue
        if dev.totalcore == 100 and cores == 100 and dev.used > 0:
            fail(Reason.ExclusiveDeviceAllocateConflict)
            continue
        if dev.totalcore != 0 and dev.usedcores == dev.totalcore and cores == 0:
            fail(Reason.CardComputeUnitsExhausted)
            continue
        if custom_rule is not None and not custom_rule(dev, mem, cores, chosen):
            fail(custom_reason)
            continue
        chosen.append(ContainerDevice(dev.id, backend, mem, cores, dev.index))
        chosen_devs.append(dev)
        if not topology:
            need -= 1
            if need == 0:
                return FitResult.success(chosen)
        if again is not None and revisit is not None and revisit(dev):
            again[0] = True

    if topology:
        if len(chosen) == origin:
            return FitResult.success(chosen)
        if len(chosen) > origin:
            return FitResult.success(_pick_by_topology(chosen, chosen_devs, origin))
    if chosen:
        counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
    if not counts:  # no device at all: the engine normally rejects this before calling a fit
        return FitResult.unschedulable(Reason.NodeInsufficientDevice)
    return FitResult.unschedulable(*gen_reason_items(counts, total))


def _walk(total: int, again: list[bool]) -> Iterator[int]:
    """Device positions from the last to the first; setting ``again[0]`` repeats the position just yielded."""
    i = total - 1
    while i >= 0:
        yield i
        if again[0]:
            again[0] = False
        else:
            i -= 1


def _pair(devs: Sequence[DeviceUsage], a: int, b: int) -> int:
    scores = devs[a].info.pair_scores
    return scores.get(devs[b].id, 0) if scores else 0


def _pick_by_topology(chosen: list[ContainerDevice], devs: list[DeviceUsage], origin: int) -> list[ContainerDevice]:
    """Spec §6.7: one device ⇒ the least connected; several ⇒ the best-connected combination."""
    n = len(chosen)
    if origin == 1:
        totals = [sum(_pair(devs, i, j) for j in range(n) if j != i) for i in range(n)]
        best = min(range(n), key=lambda i: totals[i])
        return [chosen[best]]
    best_combo: tuple[int, ...] = ()
    best_score: int | None = None
    for combo in combinations(range(n), origin):
        score = sum(_pair(devs, a, b) for a, b in combinations(combo, 2))
        if best_score is None or score > best_score:
            best_score, best_combo = score, combo
    return [chosen[i] for i in best_combo]
