"""HAMi's whole-card Kunlunxin backend ``kunlun`` (``pkg/device/kunlun/device.go``, vendors.md Part I).

Cards are synthesised from node capacity (no registration or handshake annotation), always healthy; the request
is HAMi's generic one (whole cards: no memory, 100 %, no cores), admission the generic count-in-limits rule and
there is no node lock. What is its own: the fit takes idle cards by the wing selector and records whole cards,
the pod gets ``BAIDU_COM_DEVICE_IDX`` beside the allocated key, and the node score counts wing "bubbles".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hami_core.plugins import (
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    GpuPolicy,
    HealthReport,
    NodeScore,
    PodSingleDevice,
    ResourceNames,
    ScoreCandidate,
    WireFormatError,
    metadata,
    node_capacity,
    standard_allocation_annotations,
)
from hami_core.wire.common import INT32_MAX, check_device_count, go_quote
from hami_core.wire.quantity import quantity_to_int
from hami_kunlun.config import KunlunConfig
from hami_kunlun.fit import NOUSE_UUID, USE_UUID, VENDOR, WingBackend
from hami_kunlun.topo import Predicate, calc_score

#: Common word of the whole-card backend (also the registered device type).
KUNLUN = "kunlun"
KUNLUN_ALLOCATED = "hami.io/kunlun-allocated"
DEVICE_IDX = "BAIDU_COM_DEVICE_IDX"
CARD_MEMORY = 98304
CARD_COUNT = 100
CARD_CORES = 100


def _idle_card(d: DeviceUsage) -> bool:
    """HAMi ``FitXPU``: a healthy idle card."""
    return d.health and d.used == 0


@dataclass(frozen=True, slots=True)
class KunlunBackend(WingBackend):
    """Whole Kunlunxin XPU cards (HAMi ``KunlunDevices``)."""

    books_whole_card: ClassVar[bool] = True

    @classmethod
    def from_config(cls, cfg: KunlunConfig) -> KunlunBackend:
        """Capacity based (no register/handshake annotation), only the allocated pod key, no lock; its fit
        takes idle cards only, so ``standard_capacity`` holds."""
        return cls(name=KUNLUN, vendor=VENDOR, resource_names=ResourceNames(count=cfg.resource_count_name),
                   allocated_annotation=KUNLUN_ALLOCATED, use_uuid_annotation=USE_UUID,
                   nouse_uuid_annotation=NOUSE_UUID, standard_capacity=True, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """Whole cards from ``status.capacity[<count resource>]`` (HAMi ``KunlunDevices.GetNodeDevices``).

        n cards ⇒ devices ``<node>-kunlun-<i>``, index i, split count 100, 98304 MiB, 100 cores, type
        ``kunlun``, healthy, NUMA 1 for ``i >= n / 2`` (integer division) and 0 below. Absent or 0 ⇒ none;
        a value that is not a non-negative integer raises :class:`WireFormatError` naming the resource.
        """
        resource = self.resource_names.count
        name = str(metadata(node).get("name", ""))
        raw = node_capacity(node, resource)
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
        return [DeviceInfo(id=f"{name}-kunlun-{i}", index=i, count=CARD_COUNT, devmem=CARD_MEMORY,
                           devcore=CARD_CORES, type=KUNLUN, numa=1 if i >= cards // 2 else 0, health=True)
                for i in range(cards)]

    def hami_node_health(self, node: Mapping[str, Any], devices: Sequence[DeviceInfo], now: float) -> HealthReport:
        """HAMi ``KunlunDevices.CheckHealth`` is always ``(true, true)``."""
        return HealthReport(True, True)

    # ----------------------------------------------------------------------------------- fit
    def mutex(self, policy: GpuPolicy) -> bool:
        return False  # idle cards only anyway; HAMi's whole-card Fit reads no GPU policy

    def card_predicate(self, request: DeviceRequest, mutex: bool) -> Predicate:
        return _idle_card

    # ----------------------------------------------------------------------------------- score
    def hami_score_nodes(self, candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None]:
        """HAMi ``KunlunDevices.ScoreNode`` (added raw, node policy ignored): :func:`~hami_kunlun.topo.calc_score`
        of the indexes of busy cards before the pod against the indexes the pod's containers got."""
        out: list[NodeScore | None] = []
        for cand in candidates:
            assigned = cand.assignment.get(self.name)
            if not assigned or not any(assigned):
                out.append(None)
                continue
            previous = sorted({d.index for d in cand.previous.get(self.name, ()) if d.used > 0})
            current = sorted({d.idx for ctr in assigned for d in ctr})
            out.append(NodeScore(calc_score(previous, current)))
        return out

    # ----------------------------------------------------------------------------------- annotations
    def hami_allocation_annotations(self, devices: PodSingleDevice) -> Mapping[str, str] | None:
        """The allocated key plus ``BAIDU_COM_DEVICE_IDX`` = comma list of the indexes of the **last** container
        that got cards (HAMi overwrites the key per container); only the allocated key when none did."""
        out = dict(standard_allocation_annotations(self, devices) or {})
        last = next((ctr for ctr in reversed(devices) if ctr), None)
        if last is not None:
            out[DEVICE_IDX] = ",".join(str(d.idx) for d in last)
        return out
