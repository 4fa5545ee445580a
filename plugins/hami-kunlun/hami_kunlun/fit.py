"""What the two Kunlunxin backends share: the vendor, the UUID selection and the fit over the wing selector.

HAMi's ``KunlunDevices.Fit`` and ``KunlunVDevices.Fit`` differ only in which card may host the request and in
what a chosen card records, so :class:`WingBackend` holds the fit and each backend says those two things.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hami_core.plugins import (
    ContainerDevice,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    QuotaView,
    StandardBackend,
)

# Not from hami_core.plugins: there the name ``annotations`` is the ``from __future__ import annotations`` feature.
from hami_core.plugins.objects import annotations
from hami_core.wire.common import split_list
from hami_core.wire.reasons import Reason, gen_reason_items
from hami_kunlun.topo import Predicate, graph_select

VENDOR = "kunlun"

#: UUID selection keys; both backends read both families (hami.io first, then the legacy baidu.com pair).
USE_UUID = "hami.io/use-xpu-uuid"
NOUSE_UUID = "hami.io/no-use-xpu-uuid"
BAIDU_USE_UUID = "baidu.com/use-gpuuuid"
BAIDU_NOUSE_UUID = "baidu.com/nouse-gpuuuid"


def uuid_predicate(pod: Mapping[str, Any]) -> Predicate | None:
    """HAMi ``CheckUUID`` (A.8) for both families: the device must pass the ``hami.io/use-xpu-uuid`` /
    ``no-use-xpu-uuid`` pair and the legacy ``baidu.com/use-gpuuuid`` / ``nouse-gpuuuid`` pair; ``None``
    when no constraint is set."""
    annos = annotations(pod)
    use = [frozenset(split_list(annos.get(k))) for k in (USE_UUID, BAIDU_USE_UUID)]
    nouse = frozenset(split_list(annos.get(NOUSE_UUID))) | frozenset(split_list(annos.get(BAIDU_NOUSE_UUID)))
    use = [u for u in use if u]
    if not use and not nouse:
        return None
    return lambda d: all(d.id in u for u in use) and d.id not in nouse


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


@dataclass(frozen=True, slots=True)
class WingBackend(StandardBackend):
    """A Kunlunxin backend: its fit is :func:`~hami_kunlun.topo.graph_select` over the cards that
    :meth:`card_predicate` accepts and that pass the UUID annotations of both families."""

    #: A chosen card records (and, after a restart, books) the whole card, not the request's share.
    books_whole_card: ClassVar[bool] = False

    def mutex(self, policy: GpuPolicy) -> bool:
        """Whether the ``mutex`` GPU policy applies (it makes the fit take idle cards only)."""
        return policy.has("mutex")

    def card_predicate(self, request: DeviceRequest, mutex: bool) -> Predicate:
        """Which cards may host ``request`` (the backend's ``Fit`` rule)."""
        raise NotImplementedError

    def fit(self, devices: Sequence[DeviceUsage], request: DeviceRequest, uuid_ok: Predicate | None,
            mutex: bool) -> FitResult:
        """One node: the selector's choice, or HAMi's failure reasons."""
        ok = self.card_predicate(request, mutex)
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
            mem, cores = (d.totalmem, d.totalcore) if self.books_whole_card else (request.memreq, request.coresreq)
            out.append(ContainerDevice(d.id, request.backend, mem, cores, d.index))
        return FitResult.success(out)

    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        uuid_ok = uuid_predicate(pod)
        mutex = self.mutex(policy)
        return [self.fit(c.devices, request, uuid_ok, mutex) for c in candidates]
