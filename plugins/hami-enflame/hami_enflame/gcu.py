"""HAMi's Enflame GCU backend, whole cards (``pkg/device/enflame/gcu.go``, vendors.md Part I).

Cards are synthesised from ``status.capacity``, one task per card, and only idle cards are accepted. HAMi's
generic rules are the GCU's for admission (the count in limits, nothing changed), the allocation annotations
``hami.io/enflame-gcu-devices-to-allocate`` / ``-allocated`` and their decoding; there is no node lock and no
node score (HAMi's ``ScoreNode`` is 0). What is its own: inventory, health, the request and the fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.plugins import (
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    QuotaView,
    ResourceNames,
    StandardBackend,
    capacity_count,
    capacity_health,
    metadata,
)
from hami_core.wire.reasons import Reason, gen_reason_items
from hami_enflame.config import VENDOR, EnflameConfig

GCU_WORD = "GCU"
GCU_TO_ALLOCATE = "hami.io/enflame-gcu-devices-to-allocate"
GCU_ALLOCATED = "hami.io/enflame-gcu-devices-allocated"
#: Every synthesised card: one task, "100" memory units and 100 % cores; a request books all of it.
GCU_DEVMEM = 100
GCU_DEVCORE = 100


@dataclass(frozen=True, slots=True)
class GcuBackend(StandardBackend):
    """Whole Enflame GCU cards."""

    @classmethod
    def from_config(cls, cfg: EnflameConfig) -> GcuBackend:
        """Count resource only, no registration annotation, no lock."""
        return cls(name=GCU_WORD, vendor=VENDOR, resource_names=ResourceNames(count=cfg.resource_name_gcu),
                   to_allocate_annotation=GCU_TO_ALLOCATE, allocated_annotation=GCU_ALLOCATED,
                   # Stricter than the standard template (idle cards only), so the numeric prefilter stays exact.
                   standard_capacity=True, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """Whole cards from ``status.capacity[<resourceNameGCU>]``: ``<node>-GCU-<i>``, Count 1, 100/100.

        No capacity means no GCU on the node. A capacity that is not a whole number raises
        :class:`WireFormatError` naming the field (the engine keeps the node's previous cards).
        """
        count = capacity_count(node, self.resource_names.count)
        if count is None:
            return []
        name = metadata(node).get("name", "")
        return [DeviceInfo(id=f"{name}-{GCU_WORD}-{i}", index=i, count=1, devmem=GCU_DEVMEM, devcore=GCU_DEVCORE,
                           type=GCU_WORD, numa=0, health=True) for i in range(max(count, 0))]

    def hami_node_health(self, node: Mapping[str, Any], devices: Sequence[DeviceInfo], now: float) -> HealthReport:
        """HAMi ``CheckHealth`` for GCU: healthy iff ``status.capacity[<resourceNameGCU>] > 0``; always refresh.

        A node without the capacity key is unhealthy too, as in HAMi: its cached GCUs are cleaned up even under
        ``scheduler.lostRegistration: keep``.
        """
        return capacity_health(node, self.resource_names.count)

    # ----------------------------------------------------------------------------------- requests
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        """Whole cards: ``{Nums n, Memreq 100, pct 100, cores 100}``; the count as HAMi's generic rule reads it
        (limits, else requests; a positive whole number within int32, else no request)."""
        nums = self.request_count(container)
        return None if nums is None else DeviceRequest(self.name, nums, GCU_DEVMEM, 100, GCU_DEVCORE)

    # ----------------------------------------------------------------------------------- fit
    def fit(self, devices: Sequence[DeviceUsage], request: DeviceRequest) -> FitResult:
        """GCU ``Fit``: walk from the preferred (last) device and take idle, healthy cards.

        Checks per device: health (``CardNotHealth``), request type (``CardTypeMismatch``), ``Used > 0``
        (``ExclusiveDeviceAllocateConflict``). Each card books the request's memory (100) and cores (100).
        """
        total = len(devices)
        need = request.nums
        counts: dict[str, int] = {}
        chosen: list[ContainerDevice] = []
        for i in range(total - 1, -1, -1):
            dev = devices[i]
            if not dev.health:
                reason = Reason.CardNotHealth
            elif request.backend != self.name:
                reason = Reason.CardTypeMismatch
            elif dev.used > 0:
                reason = Reason.ExclusiveDeviceAllocateConflict
            else:
                chosen.append(ContainerDevice(dev.id, self.name, request.memreq, request.coresreq, dev.index))
                need -= 1
                if need == 0:
                    return FitResult.success(chosen)
                continue
            counts[reason] = counts.get(reason, 0) + 1
        if chosen:
            counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
        if not counts:
            return FitResult.unschedulable(Reason.NodeInsufficientDevice)
        return FitResult.unschedulable(*gen_reason_items(counts, total))

    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        """:meth:`fit` on every candidate node (no selection annotation, no GPU policy, no quota)."""
        return [self.fit(c.devices, request) for c in candidates]
