"""HAMi's Vastai backend, scheduler side (``pkg/device/vastai/device.go``, HAMi v2.10.0).

:class:`VastaiBackend` is a :class:`~hami_core.plugins.StandardBackend`. HAMi's generic rules are Vastai's for the
handshake health rule on ``hami.io/node-handshake-va`` (``CheckHealth``, ``NodeCleanUp``), admission (the count in
limits, nothing changed: ``MutateAdmission``), the request (``GenerateResourceRequests``: the count only, so the
base's steps give ``{Nums n, Memreq 0, MemPercentagereq 100, Coresreq 0}``), the allocation annotations
``hami.io/Vastai-devices-to-allocate`` / ``-allocated`` (``PatchAnnotations``), the booking (``AddResourceUsage``)
and the shared node lock (``LockNode``). What is its own: JSON-only registration with every device's cores set
to 100, the fit (:func:`~hami_vastai.fit.vastai_fit`: slots only, die mode) and the AIC node score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami_core.plugins import (
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    NodeScore,
    ResourceNames,
    ScoreCandidate,
    StandardBackend,
    as_int64,
    resource,
)

# Not from hami_core.plugins: there the name ``annotations`` is the ``from __future__ import annotations`` feature.
from hami_core.plugins.objects import annotations
from hami_core.wire import keys
from hami_core.wire.common import wire_error
from hami_core.wire.nodes import decode_node_devices_json
from hami_vastai.config import VastaiConfig
from hami_vastai.fit import aic_score, vastai_fit

#: HAMi's ``VastaiCommonWord`` (= ``VastaiDevice``): the request ``Type``, the pod-devices key, the registered type.
COMMON_WORD = "Vastai"
VENDOR = "vastai"

REGISTER_ANNOTATION = "hami.io/node-va-register"
HANDSHAKE_ANNOTATION = "hami.io/node-handshake-va"
TO_ALLOCATE_ANNOTATION = f"hami.io/{COMMON_WORD}-devices-to-allocate"
ALLOCATED_ANNOTATION = f"hami.io/{COMMON_WORD}-devices-allocated"
USE_UUID_ANNOTATION = "vastaitech.com/use-gpuuuid"
NOUSE_UUID_ANNOTATION = "vastaitech.com/nouse-gpuuuid"
#: HAMi declares ``vastaitech.com/use-va`` / ``nouse-va`` (``VastaiInUse`` / ``VastaiNoUse``) but no rule reads
#: them: its ``checkType`` compares the request type only. They are kept here for reference, not honoured.
USE_TYPE_ANNOTATION = "vastaitech.com/use-va"
NOUSE_TYPE_ANNOTATION = "vastaitech.com/nouse-va"
#: Go's ``int32(n)`` keeps ``n`` modulo 2**32.
INT32_SPAN = 2**32
#: ``GetNodeDevices`` sets every device's ``Devcore`` to 100 ("only for calscore use": the node's default score).
DEVICE_CORES = 100


@dataclass(frozen=True, slots=True)
class VastaiBackend(StandardBackend):
    """The Vastai backend (HAMi ``VastaiDevices``)."""

    @classmethod
    def from_config(cls, cfg: VastaiConfig) -> VastaiBackend:
        """The backend for a validated ``vastai:`` section (HAMi ``InitVastaiDevice``).

        ``standard_capacity`` is False: the fit checks neither memory nor cores, so the engine's capacity
        prefilter, which assumes the standard checklist, must not judge its nodes.
        """
        return cls(name=COMMON_WORD, vendor=VENDOR, resource_names=ResourceNames(count=cfg.resource_count_name),
                   register_annotation=REGISTER_ANNOTATION, handshake_annotation=HANDSHAKE_ANNOTATION,
                   to_allocate_annotation=TO_ALLOCATE_ANNOTATION, allocated_annotation=ALLOCATED_ANNOTATION,
                   use_uuid_annotation=USE_UUID_ANNOTATION, nouse_uuid_annotation=NOUSE_UUID_ANNOTATION,
                   lock_annotation=keys.NODE_LOCK, standard_capacity=False, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """HAMi ``VastaiDevices.GetNodeDevices``: the JSON list on ``hami.io/node-va-register``, each device's cores
        set to 100; ``custominfo`` (``DeviceStrategy``, ``AIC``) is kept for the fit and the score.

        No annotation ⇒ no devices. A value that is not JSON (HAMi's colon form included, or ``""``) or holds no
        device (``[]``, ``null``) raises :class:`~hami_core.plugins.WireFormatError` naming the annotation, so the
        engine keeps the node's previous devices, as HAMi does on these errors.
        """
        key = REGISTER_ANNOTATION
        raw = annotations(node).get(key)
        if raw is None:
            return []
        devices = decode_node_devices_json(raw, key=key)
        if not devices:
            raise wire_error(key, "no gpu found on node")
        return [replace(d, devcore=DEVICE_CORES) for d in devices]

    # ----------------------------------------------------------------------------------- requests
    def request_count(self, container: Mapping[str, Any]) -> int | None:
        """HAMi ``GenerateResourceRequests``: ``Nums`` is ``int32(AsInt64())`` of the count (limits, else requests),
        never range-checked. Not an integer, or narrowed to 0 or below: no request (HAMi's ``Nums > 0`` rule); beyond
        int32 it keeps its low 32 bits (``4294967297`` asks for one device)."""
        value = as_int64(resource(container, self.resource_names.count))
        if value is None:
            return None
        nums = (value + INT32_SPAN // 2) % INT32_SPAN - INT32_SPAN // 2  # Go's int32(): two's complement low bits
        return nums if nums > 0 else None

    # ----------------------------------------------------------------------------------- fit
    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy) -> Sequence[FitResult]:
        """:func:`~hami_vastai.fit.vastai_fit` on every candidate: the pod's UUID selection, the ``mutex`` GPU
        policy; no type annotation and no ResourceQuota (HAMi's Vastai ``Fit`` reads neither)."""
        sel = self.selection(pod)
        uuid_ok = (lambda dev: sel.uuid_ok(dev.id)) if sel.filters_uuid else None
        mutex = policy.has("mutex")
        return [vastai_fit(cand.devices, request, backend=self.name, uuid_ok=uuid_ok, mutex=mutex)
                for cand in candidates]

    # ----------------------------------------------------------------------------------- score
    def hami_score_nodes(self, candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None]:
        """HAMi ``VastaiDevices.ScoreNode``, added raw (not policy neutral, so under ``spread``, which picks the
        lowest total, a compact die placement counts against the node): :func:`~hami_vastai.fit.aic_score` of the
        pod's Vastai devices on the node; ``None`` where the pod got none there."""
        out: list[NodeScore | None] = []
        for cand in candidates:
            assigned = cand.assignment.get(self.name)
            out.append(NodeScore(aic_score(assigned)) if assigned and any(assigned) else None)
        return out
