"""HAMi's vXPU Kunlunxin backend ``XPU`` (``pkg/device/kunlun/vdevice.go``, vendors.md Part I).

Quarter, half or full cards registered as JSON on ``hami.io/node-register-xpu``. HAMi's generic rules are the
vXPU's for health (the handshake on ``hami.io/node-handshake-xpu``), the allocation annotations and the shared
node lock; what is its own: JSON-only registration, admission rounding memory up to a slice, the request, and the
fit (the wing selector over cards that host only slices of the requested size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.plugins import (
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    Mutation,
    ResourceNames,
    WireFormatError,
    as_int64,
    resource,
)

# Not from hami_core.plugins: there the name ``annotations`` is the ``from __future__ import annotations`` feature.
from hami_core.plugins.objects import annotations
from hami_core.wire import keys
from hami_core.wire.common import wire_error
from hami_core.wire.nodes import decode_node_devices_json
from hami_core.wire.quantity import parse_quantity
from hami_kunlun.config import KunlunConfig
from hami_kunlun.fit import NOUSE_UUID, USE_UUID, VENDOR, WingBackend
from hami_kunlun.topo import Predicate

#: Common word of the vXPU backend.
XPU = "XPU"
XPU_REGISTER = "hami.io/node-register-xpu"
XPU_HANDSHAKE = "hami.io/node-handshake-xpu"
XPU_TO_ALLOCATE = "hami.io/xpu-devices-to-allocate"
XPU_ALLOCATED = "hami.io/xpu-devices-allocated"
#: The vXPU memory sizes (MiB): quarter and half card; anything larger is a full card.
SLICES: tuple[int, ...] = (24576, 49152)
MAX_MEMORY = 98304


def trim_memory(mib: int) -> int:
    """HAMi ``trimMemory``: round up to a slice, ≤ 24576 → 24576, ≤ 49152 → 49152, else 98304."""
    for size in SLICES:
        if mib <= size:
            return size
    return MAX_MEMORY


@dataclass(frozen=True, slots=True)
class XpuBackend(WingBackend):
    """vXPU slices of Kunlunxin cards (HAMi ``KunlunVDevices``)."""

    @classmethod
    def from_config(cls, cfg: KunlunConfig) -> XpuBackend:
        """JSON registration with the generic handshake, both pod keys, the shared node lock; its fit checks
        memory but not the split count (as HAMi), so the engine must not prefilter it as a standard fit."""
        return cls(name=XPU, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.resource_vcount_name, memory=cfg.resource_vmemory_name),
                   register_annotation=XPU_REGISTER, handshake_annotation=XPU_HANDSHAKE,
                   to_allocate_annotation=XPU_TO_ALLOCATE, allocated_annotation=XPU_ALLOCATED,
                   use_uuid_annotation=USE_UUID, nouse_uuid_annotation=NOUSE_UUID, lock_annotation=keys.NODE_LOCK,
                   standard_capacity=False, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """vXPU cards from the ``hami.io/node-register-xpu`` JSON list (HAMi ``KunlunVDevices.GetNodeDevices``).

        No annotation ⇒ none; malformed JSON, and a list without a device (``[]``, ``null``: HAMi's "no device
        found on node"), raise :class:`WireFormatError` naming the annotation, so the node keeps its cached cards
        while its handshake is fresh, as HAMi's scheduler does.
        """
        key = self.register_annotation or XPU_REGISTER
        raw = annotations(node).get(key)
        if raw is None:
            return []
        devices = decode_node_devices_json(raw, key=key)
        if not devices:
            raise wire_error(key, "no device found on node")
        return devices

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``KunlunVDevices.MutateAdmission``: with the vXPU count in limits, a memory limit is rounded up
        to its slice (:func:`trim_memory` of Go ``Quantity.Value``, i.e. the ceiling) and written back as both
        limit and request. Tells whether the container uses the backend.
        """
        names = self.resource_names
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.count not in limits:
            return Mutation(False)
        if names.memory not in limits:
            return Mutation(True)
        try:
            mib = math.ceil(parse_quantity(limits[names.memory]))
        except WireFormatError:
            return Mutation(True)  # unreadable: the API server rejects it before the webhook in a real cluster
        trimmed = str(trim_memory(mib))
        resources = container["resources"]
        resources["limits"][names.memory] = trimmed
        if not isinstance(resources.get("requests"), dict):
            resources["requests"] = {}
        resources["requests"][names.memory] = trimmed
        return Mutation(True)

    # ----------------------------------------------------------------------------------- requests
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        """HAMi ``KunlunVDevices.GenerateResourceRequests``.

        Memory (limits, then requests) that is an integer is rounded up to a slice, cores = memory x 100 /
        98304 (25, 50 or 100) and the percentage 0. Without a usable memory value: 98304 MiB, 100 cores,
        100 %. Not the generic steps: the percentage depends on whether memory was *given*, not on its value.
        """
        nums = self.request_count(container)
        if nums is None:
            return None
        value = as_int64(resource(container, self.resource_names.memory))
        if value is None:
            return DeviceRequest(self.name, nums, MAX_MEMORY, 100, 100)
        memory = trim_memory(value)
        return DeviceRequest(self.name, nums, memory, 0, memory * 100 // MAX_MEMORY)

    # ----------------------------------------------------------------------------------- fit
    def card_predicate(self, request: DeviceRequest, mutex: bool) -> Predicate:
        """HAMi ``FitVXPU``: healthy, the slice fits the free memory, and the card is idle or hosts only
        slices of the requested size (average booked memory per task); ``mutex`` requires idle."""
        def ok(d: DeviceUsage) -> bool:
            if not d.health or request.memreq + d.usedmem > d.totalmem:
                return False
            if d.used == 0:
                return True
            return not mutex and d.usedmem // d.used == request.memreq
        return ok
