"""HAMi's Biren GPU backend, scheduler side (``pkg/device/biren/device.go``, HAMi v2.10.0, PR #1711).

:class:`BirenBackend` is a :class:`~hami_core.plugins.StandardBackend`. HAMi's generic rules are Biren's for the
handshake health rule on ``hami.io/node-handshake-biren`` (``CheckHealth``), admission (``MutateAdmission``: the
count in limits, nothing changed), the allocation annotations ``hami.io/Biren-devices-to-allocate`` /
``-allocated`` (``PatchAnnotations``), their decoding and usage booking (``AddResourceUsage``), the shared node lock
``hami.io/mutex.lock`` (``LockNode`` / ``ReleaseNodeLock``), the handshake cleanup (``NodeCleanUp``) and a node score
of 0 (``ScoreNode``). The request is the base's too: with only a count resource it is HAMi's ``{Nums n, Memreq 0,
MemPercentagereq 100, Coresreq 0}``. What is Biren's own:

* registration is JSON only, and every device's cores read as 100 (:meth:`BirenBackend.hami_node_devices`);
* the count is narrowed to int32 as Go's ``int32(n)`` does (:meth:`BirenBackend.request_count`);
* the fit counts task slots only, never memory or cores (:meth:`BirenBackend.fit`).

A Biren card in SVI mode is split by the device plugin into 2 or 4 instances; each instance is registered as a
device of its own (count 1, its own memory), so the scheduler places whole devices either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami_biren.config import BirenConfig
from hami_core.plugins import (
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    QuotaView,
    ResourceNames,
    Selection,
    StandardBackend,
    annotations,
    as_int64,
    resource,
)
from hami_core.wire import keys
from hami_core.wire.common import wire_error
from hami_core.wire.nodes import decode_node_devices_json
from hami_core.wire.reasons import Reason, gen_reason_items

#: HAMi's common word (``BirenCommonWord``, also ``BirenDevice``): the request ``Type``, the pod-devices key, and
#: the word every registered device type must contain.
COMMON_WORD = "Biren"
VENDOR = "biren"

REGISTER_ANNOTATION = "hami.io/node-biren-register"
HANDSHAKE_ANNOTATION = "hami.io/node-handshake-biren"
#: ``hami.io/%s-devices-to-allocate`` / ``-allocated`` of the common word, capital B included.
TO_ALLOCATE_ANNOTATION = "hami.io/Biren-devices-to-allocate"
ALLOCATED_ANNOTATION = "hami.io/Biren-devices-allocated"
USE_UUID_ANNOTATION = "birentech.com/use-gpuuuid"
NOUSE_UUID_ANNOTATION = "birentech.com/nouse-gpuuuid"
#: Declared by HAMi (``BirenInUse`` / ``BirenNoUse``) but never read: Biren has no card-type selection.
USE_BIREN_ANNOTATION = "birentech.com/use-biren"
NOUSE_BIREN_ANNOTATION = "birentech.com/nouse-biren"
#: ``GetNodeDevices`` overwrites every device's cores with 100, "only for calscore use" (the node score).
SCORE_DEVCORE = 100

_INT32_SPAN = 2**32


def go_int32(value: int) -> int:
    """Go's ``int32(value)`` conversion of an int64: the low 32 bits, two's complement (``2**32 + 1`` → 1)."""
    return (value + 2**31) % _INT32_SPAN - 2**31


@dataclass(frozen=True, slots=True)
class BirenBackend(StandardBackend):
    """The Biren GPU backend (HAMi ``BirenDevices``)."""

    @classmethod
    def from_config(cls, cfg: BirenConfig) -> BirenBackend:
        """The backend for a validated ``biren:`` section (HAMi ``InitBirenDevice``).

        ``standard_capacity`` is False: the fit compares neither memory nor cores with what is free, so the engine's
        capacity prefilter, which assumes the standard checklist, must not judge its nodes.
        """
        return cls(name=COMMON_WORD, vendor=VENDOR, resource_names=ResourceNames(count=cfg.resource_count_name),
                   register_annotation=REGISTER_ANNOTATION, handshake_annotation=HANDSHAKE_ANNOTATION,
                   to_allocate_annotation=TO_ALLOCATE_ANNOTATION, allocated_annotation=ALLOCATED_ANNOTATION,
                   use_uuid_annotation=USE_UUID_ANNOTATION, nouse_uuid_annotation=NOUSE_UUID_ANNOTATION,
                   lock_annotation=keys.NODE_LOCK, standard_capacity=False, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """HAMi ``GetNodeDevices``: the JSON list in ``hami.io/node-biren-register``, each device's cores set to 100.

        No annotation means no Biren devices (HAMi logs "annos not found"; the core treats every vendor's missing
        annotation as "none"). Anything but a JSON list (HAMi's colon form, ``":"``, ``""``) and a list without a
        device (``[]``, ``null``: "no gpu found on node") raise :class:`WireFormatError` naming the annotation, so
        the engine keeps the node's previous devices.
        """
        key = REGISTER_ANNOTATION
        raw = annotations(node).get(key)
        if raw is None:
            return []
        devices = decode_node_devices_json(raw, key=key)
        if not devices:
            raise wire_error(key, "no gpu found on node")
        return [replace(d, devcore=SCORE_DEVCORE) for d in devices]

    # ----------------------------------------------------------------------------------- requests
    def request_count(self, container: Mapping[str, Any]) -> int | None:
        """HAMi ``GenerateResourceRequests``: the count (limits, else requests) as ``int32(AsInt64())``.

        HAMi never range-checks it: a count that is not an integer, or that narrows to 0 or below, asks nothing
        (its ``Nums`` is not > 0); one beyond int32 keeps its low 32 bits (``4294967297`` asks for 1 device).
        """
        value = as_int64(resource(container, self.resource_names.count))
        if value is None:
            return None
        nums = go_int32(value)
        return nums if nums > 0 else None

    # ----------------------------------------------------------------------------------- fit
    def refusal(self, dev: DeviceUsage, request: DeviceRequest, sel: Selection, mutex: bool) -> str | None:
        """Why HAMi's Biren ``Fit`` skips ``dev`` (``None``: it takes it), checks in HAMi's order.

        Health, the request type (``checkType``: the request must be Biren's; the device type is not read), the
        ``use-gpuuuid`` / ``nouse-gpuuuid`` lists (``CheckUUID``), a free task slot, and under ``mutex`` an idle
        device. Memory and cores are never checked.
        """
        if not dev.health:
            return Reason.CardNotHealth
        if request.backend != self.name:
            return Reason.CardTypeMismatch
        if not sel.uuid_ok(dev.id):
            return Reason.CardUuidMismatch
        if dev.count <= dev.used:
            return Reason.CardTimeSlicingExhausted
        if mutex and dev.used > 0:
            return Reason.ExclusiveDeviceAllocateConflict
        return None

    def fit(self, devices: Sequence[DeviceUsage], request: DeviceRequest, sel: Selection, mutex: bool) -> FitResult:
        """HAMi ``BirenDevices.Fit`` on one node: walk from the preferred (last) device, take ``request.nums``.

        Each device taken books no memory and the request's cores (0 for Biren requests), as HAMi's
        ``ContainerDevice{Usedcores: Coresreq}`` without ``Usedmem``. A node that cannot give them all reports
        ``AllocatedCardsInsufficientRequest`` for the devices it could give, besides each skipped device's reason.
        """
        counts: dict[str, int] = {}
        chosen: list[ContainerDevice] = []
        for dev in reversed(devices):
            reason = self.refusal(dev, request, sel, mutex)
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
                continue
            chosen.append(ContainerDevice(dev.id, self.name, 0, request.coresreq, dev.index,
                                          custom_info=dev.info.custom_info))
            if len(chosen) == request.nums:
                return FitResult.success(chosen)
        if chosen:
            counts[Reason.AllocatedCardsInsufficientRequest] = len(chosen)
        if not counts:  # no device at all: the engine rejects such a node before asking
            return FitResult.unschedulable(Reason.NodeInsufficientDevice)
        return FitResult.unschedulable(*gen_reason_items(counts, len(devices)))

    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        """:meth:`fit` on every candidate node, with the pod's UUID lists and the ``mutex`` GPU policy
        (``hami.io/gpu-scheduler-policy``); HAMi's Biren fit reads no quota, NUMA or topology."""
        sel, mutex = self.selection(pod), policy.has("mutex")
        return [self.fit(c.devices, request, sel, mutex) for c in candidates]
