"""HAMi's Vastai ``Fit``, ``computeBestCombination`` and ``ScoreNode`` (``pkg/device/vastai/device.go``).

A Vastai node registers either whole cards or, in *die mode*, the dies of its cards: each die's ``custominfo``
then carries ``"DeviceStrategy": "die"`` and ``"AIC"``, the id of the physical card (AIC) the die sits on. The
fit books no memory and no cores (a Vastai request has neither); it counts task slots only. In die mode it
collects every die that passes and then prefers dies on the same card, which the node score rewards too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.plugins import ContainerDevice, DeviceRequest, DeviceUsage, FitResult, PodSingleDevice
from hami_core.wire.reasons import Reason, gen_reason_items

#: ``custominfo`` keys the Vastai device plugin writes per die, and the strategy value of die mode.
STRATEGY_KEY = "DeviceStrategy"
AIC_KEY = "AIC"
DIE_STRATEGY = "die"


def aic_id(info: Mapping[str, Any] | None) -> str | None:
    """HAMi ``aicID``: the card id of a die, when ``custominfo`` holds it as a string (else ``None``)."""
    value = info.get(AIC_KEY) if info is not None else None
    return value if isinstance(value, str) else None


def is_die_mode(devices: Sequence[DeviceUsage]) -> bool:
    """HAMi ``isDieMode``: the node is in die mode when its **first** device (in the fit's order) says so.

    HAMi reads ``devices[0]`` only, so a node mixing strategies is judged by whichever device sorts first.
    """
    if not devices:
        return False
    info = devices[0].info.custom_info
    return info is not None and info.get(STRATEGY_KEY) == DIE_STRATEGY


def best_combination(nums: int, chosen: Sequence[ContainerDevice]) -> list[ContainerDevice]:
    """HAMi ``computeBestCombination``: up to ``nums`` dies, taken card by card, the cards with the most eligible
    dies first; dies without a string AIC are never taken, so the result may be shorter than ``nums``.

    HAMi groups the cards in a Go map, so cards with equally many dies come in a random order; here they come in
    the order their first die appears in ``chosen`` (the fit's preference order), which is one of HAMi's orders.
    """
    by_card: dict[str, list[ContainerDevice]] = {}
    for dev in chosen:
        aic = aic_id(dev.custom_info)
        if aic is not None:
            by_card.setdefault(aic, []).append(dev)
    # sorted() is stable, as Go's sort.SliceStable: the first-appearance order breaks ties.
    result: list[ContainerDevice] = []
    for dies in sorted(by_card.values(), key=len, reverse=True):
        for dev in dies:
            result.append(dev)
            if len(result) == nums:
                return result
    return result


def _occupied_cards(devices: Sequence[DeviceUsage]) -> set[str]:
    """The cards (AICs) that have a die in use, healthy or not: under ``mutex`` none of their dies may be taken."""
    return {aic for d in devices if d.used > 0 and (aic := aic_id(d.info.custom_info)) is not None}


def vastai_fit(devices: Sequence[DeviceUsage], request: DeviceRequest, *, backend: str,
               uuid_ok: Callable[[DeviceUsage], bool] | None, mutex: bool) -> FitResult:
    """HAMi ``VastaiDevices.Fit`` on one node; ``devices`` in the policy's order, the preferred one last.

    Per device, walking from the last, the first failing check is counted: health (``CardNotHealth``), the
    request's type (``CardTypeMismatch``; HAMi's ``checkType`` reads no annotation), the UUID selection
    (``CardUuidMismatch``), a free slot (``CardTimeSlicingExhausted``) and, under the ``mutex`` GPU policy, an idle
    device (and in die mode an idle card: ``ExclusiveDeviceAllocateConflict``). No memory or core check: a chosen
    device books 0 MiB and the request's cores (0).

    Whole cards: the first ``nums`` that pass. Die mode: every die that passes is collected; exactly ``nums`` is
    the answer, more is cut to the first one (``nums == 1``) or to :func:`best_combination`.
    """
    die = is_die_mode(devices)
    occupied = _occupied_cards(devices) if mutex and die else set()
    counts: dict[str, int] = {}
    chosen: list[ContainerDevice] = []
    need = request.nums
    for dev in reversed(devices):
        if not dev.health:
            reason = Reason.CardNotHealth
        elif request.backend != backend:
            reason = Reason.CardTypeMismatch
        elif uuid_ok is not None and not uuid_ok(dev):
            reason = Reason.CardUuidMismatch
        elif dev.count <= dev.used:
            reason = Reason.CardTimeSlicingExhausted
        elif mutex and (dev.used > 0 or aic_id(dev.info.custom_info) in occupied):
            reason = Reason.ExclusiveDeviceAllocateConflict
        else:
            chosen.append(ContainerDevice(dev.id, request.backend, 0, request.coresreq, dev.index,
                                          custom_info=dev.info.custom_info))
            if not die:  # in die mode HAMi never counts down: it collects every eligible die
                need -= 1
                if need == 0:
                    return FitResult.success(chosen)
            continue
        counts[reason] = counts.get(reason, 0) + 1
    if die and len(chosen) >= request.nums:
        picked = chosen if len(chosen) == request.nums else (
            chosen[:1] if request.nums == 1 else best_combination(request.nums, chosen))
        # HAMi "fits" with no device when no collected die has a string AIC; a FitResult cannot say that, so
        # such a node fails below with AllocatedCardsInsufficientRequest.
        if picked:
            return FitResult.success(picked)
    if chosen:
        counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
    if not counts:  # no device at all: the engine rejects such a node before the fit (NodeInsufficientDevice)
        return FitResult.unschedulable(Reason.NodeInsufficientDevice)
    return FitResult.unschedulable(*gen_reason_items(counts, len(devices)))


def aic_score(devices: PodSingleDevice) -> float:
    """HAMi ``VastaiDevices.ScoreNode``: per container, the share of its dies on its most used card, summed.

    Any device without ``custominfo``, with a strategy other than ``die`` or without an ``AIC`` key makes the whole
    score 0 (whole-card nodes score 0); an AIC that is not a string counts for nothing.
    """
    score = 0.0
    for ctr in devices:
        per_card: dict[str, int] = {}
        for dev in ctr:
            info = dev.custom_info
            if info is None or AIC_KEY not in info:
                return 0.0
            strategy = info.get(STRATEGY_KEY)
            if isinstance(strategy, str) and strategy != DIE_STRATEGY:
                return 0.0
            aic = aic_id(info)
            if aic is not None:
                per_card[aic] = per_card.get(aic, 0) + 1
        if per_card:
            score += max(per_card.values()) / sum(per_card.values())
    return score
