"""Filter failure reason strings (spec §6.9): ``"<c>/<total> <Reason>"`` items and their parsing."""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["NODE_UNREGISTERED", "NODE_USAGE_UNAVAILABLE", "Reason", "gen_reason", "gen_reason_items",
           "parse_reasons"]

#: ``FailedNodes`` text for a node without registered devices.
NODE_UNREGISTERED = "node unregistered"
#: ``FailedNodes`` text when a node's usage cannot be computed.
NODE_USAGE_UNAVAILABLE = "node usage unavailable"

#: Go's ``fmt.Sscanf(item, "%d/%d %s", ...)``: each ``%d`` skips leading blanks and takes a sign, the format's
#: space matches any run of blanks (none too), ``%s`` takes the next word; text after it is ignored.
_ITEM = re.compile(r"[ \t]*([+-]?[0-9]+)/[ \t]*([+-]?[0-9]+)[ \t]*([^\s]+)")
_GO_INT = range(-(2**63), 2**63)


class Reason:
    """HAMi reason names (``pkg/device/common``; Metax adds the last three). UPPER_SNAKE names are aliases."""

    CardTypeMismatch = "CardTypeMismatch"
    CardUuidMismatch = "CardUuidMismatch"
    CardTimeSlicingExhausted = "CardTimeSlicingExhausted"
    CardComputeUnitsExhausted = "CardComputeUnitsExhausted"
    CardInsufficientMemory = "CardInsufficientMemory"
    CardInsufficientCore = "CardInsufficientCore"
    CardNotHealth = "CardNotHealth"
    CardCordoned = "CardCordoned"
    NumaNotFit = "NumaNotFit"
    ExclusiveDeviceAllocateConflict = "ExclusiveDeviceAllocateConflict"
    CardNotFoundCustomFilterRule = "CardNotFoundCustomFilterRule"
    CardMigTopologyInfeasible = "CardMigTopologyInfeasible"
    NodeInsufficientDevice = "NodeInsufficientDevice"
    AllocatedCardsInsufficientRequest = "AllocatedCardsInsufficientRequest"
    NodeUnfitPod = "NodeUnfitPod"
    NodeFitPod = "NodeFitPod"
    ResourceQuotaNotFit = "ResourceQuotaNotFit"
    ModeNotFit = "ModeNotFit"
    CardUnhealthy = "CardUnhealthy"
    CardQosPolicyMismatch = "CardQosPolicyMismatch"
    CardAppClassMismatch = "CardAppClassMismatch"

    CARD_TYPE_MISMATCH = CardTypeMismatch
    CARD_UUID_MISMATCH = CardUuidMismatch
    CARD_TIME_SLICING_EXHAUSTED = CardTimeSlicingExhausted
    CARD_COMPUTE_UNITS_EXHAUSTED = CardComputeUnitsExhausted
    CARD_INSUFFICIENT_MEMORY = CardInsufficientMemory
    CARD_INSUFFICIENT_CORE = CardInsufficientCore
    CARD_NOT_HEALTH = CardNotHealth
    CARD_CORDONED = CardCordoned
    NUMA_NOT_FIT = NumaNotFit
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = ExclusiveDeviceAllocateConflict
    CARD_NOT_FOUND_CUSTOM_FILTER_RULE = CardNotFoundCustomFilterRule
    CARD_MIG_TOPOLOGY_INFEASIBLE = CardMigTopologyInfeasible
    NODE_INSUFFICIENT_DEVICE = NodeInsufficientDevice
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST = AllocatedCardsInsufficientRequest
    NODE_UNFIT_POD = NodeUnfitPod
    NODE_FIT_POD = NodeFitPod
    RESOURCE_QUOTA_NOT_FIT = ResourceQuotaNotFit
    MODE_NOT_FIT = ModeNotFit
    CARD_UNHEALTHY = CardUnhealthy
    CARD_QOS_POLICY_MISMATCH = CardQosPolicyMismatch
    CARD_APP_CLASS_MISMATCH = CardAppClassMismatch

    #: Every reason name, in the order above.
    ALL: tuple[str, ...] = (
        CardTypeMismatch, CardUuidMismatch, CardTimeSlicingExhausted, CardComputeUnitsExhausted,
        CardInsufficientMemory, CardInsufficientCore, CardNotHealth, CardCordoned, NumaNotFit,
        ExclusiveDeviceAllocateConflict, CardNotFoundCustomFilterRule, CardMigTopologyInfeasible,
        NodeInsufficientDevice, AllocatedCardsInsufficientRequest, NodeUnfitPod, NodeFitPod,
        ResourceQuotaNotFit, ModeNotFit, CardUnhealthy, CardQosPolicyMismatch, CardAppClassMismatch,
    )


def gen_reason_items(counts: Mapping[str, int], total: int) -> tuple[str, ...]:
    """Reason items like HAMi ``GenReason``: ``"<c>/<total> <Reason>"`` per non-zero count, sorted.

    Format: ``{"CardUuidMismatch": 1, "CardInsufficientMemory": 1}``, 2 →
    ``("1/2 CardInsufficientMemory", "1/2 CardUuidMismatch")`` (items sorted as strings).
    """
    return tuple(sorted(f"{count}/{total} {reason}" for reason, count in counts.items() if count))


def gen_reason(counts: Mapping[str, int], total: int) -> str:
    """The ``FailedNodes`` reason text: :func:`gen_reason_items` joined with ``", "``."""
    return ", ".join(gen_reason_items(counts, total))


def parse_reasons(text: str) -> dict[str, int]:
    """The counts of a reason text by reason name, as HAMi's ``ParseReason`` reads it (its event code, the MIG
    tests): items split on ``", "``, each read as ``"%d/%d %s"``; an item that does not read so is skipped, and a
    name given twice keeps its last count.

    ``"1/2 CardInsufficientMemory, 1/2 CardUuidMismatch"`` → ``{"CardInsufficientMemory": 1,
    "CardUuidMismatch": 1}``; ``NodeInsufficientDevice`` and ``node unregistered`` give ``{}``.
    """
    counts: dict[str, int] = {}
    for item in text.split(", "):
        match = _ITEM.match(item)
        if match and int(match[1]) in _GO_INT and int(match[2]) in _GO_INT:  # Go's int: an overflow fails
            counts[match[3]] = int(match[1])
    return counts
