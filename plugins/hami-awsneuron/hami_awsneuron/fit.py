"""HAMi's AWS Neuron ``Fit`` for one node: a contiguous device group for several devices, else one device with
enough free cores (``pkg/device/awsneuron/device.go``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hami_awsneuron.topology import add_core_usage, count_mask_available, graph_select
from hami_core.plugins import ContainerDevice, DeviceRequest, DeviceUsage, FitResult
from hami_core.wire.reasons import Reason, gen_reason_items

Predicate = Callable[[DeviceUsage], bool]


def fit_group(devices: Sequence[DeviceUsage], request: DeviceRequest) -> FitResult:
    """``Fit`` with ``Nums > 1``: :func:`~hami_awsneuron.topology.graph_select` over the node's devices in index
    order; each device of the group books its whole core mask (``Usedcores = Totalcore``, memory 0).

    Only health and idleness count here: HAMi checks neither the type, the UUID annotations nor ``mutex`` for a
    group. No group: one ``NumaNotFit`` over the node's devices (``"1/2 NumaNotFit"``).
    """
    by_index = sorted(devices, key=lambda d: d.index)
    group = graph_select(by_index, request.nums)
    if not group:
        return FitResult.unschedulable(*gen_reason_items({Reason.NumaNotFit: 1}, len(devices)))
    chosen = [by_index[i] for i in group]
    return FitResult.success([ContainerDevice(d.id, request.backend, d.totalmem, d.totalcore, d.index)
                              for d in chosen])


def fit_single(devices: Sequence[DeviceUsage], request: DeviceRequest, *, name: str, uuid_ok: Predicate | None,
               mutex: bool) -> FitResult:
    """``Fit`` with one device: walk from the preferred (last) device and take the first that passes, in HAMi's
    order, health (``CardNotHealth``), type (``CardTypeMismatch``: the device type contains the request's and the
    request is ``AWSNeuron``), UUID selection (``CardUuidMismatch``), a free slot (``CardTimeSlicingExhausted``),
    ``mutex`` (``ExclusiveDeviceAllocateConflict``) and free cores counted as mask bits (``CardInsufficientCore``).

    The device books memory 0 and the core mask :func:`~hami_awsneuron.topology.add_core_usage` gives from its
    booked mask (HAMi's ``awsusageinfo``, which equals the booked cores).
    """
    counts: dict[str, int] = {}
    for dev in reversed(devices):
        if not dev.health:
            reason = Reason.CardNotHealth
        elif request.backend not in dev.type or request.backend != name:
            reason = Reason.CardTypeMismatch
        elif uuid_ok is not None and not uuid_ok(dev):
            reason = Reason.CardUuidMismatch
        elif dev.count <= dev.used:
            reason = Reason.CardTimeSlicingExhausted
        elif mutex and dev.used > 0:
            reason = Reason.ExclusiveDeviceAllocateConflict
        elif count_mask_available(dev.totalcore) - count_mask_available(dev.usedcores) < request.coresreq:
            reason = Reason.CardInsufficientCore
        else:
            mask = add_core_usage(dev.usedcores, request.coresreq)
            return FitResult.success([ContainerDevice(dev.id, request.backend, 0, mask, dev.index)])
        counts[reason] = counts.get(reason, 0) + 1
    if not counts:  # no device at all: the engine normally rejects the node before the fit
        return FitResult.unschedulable(Reason.NodeInsufficientDevice)
    return FitResult.unschedulable(*gen_reason_items(counts, len(devices)))
