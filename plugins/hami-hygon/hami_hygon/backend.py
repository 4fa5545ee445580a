"""HAMi's Hygon DCU backend, scheduler side (vendors.md Part E, with A.3, A.5, A.7, A.8 and J).

Pure functions over plain Kubernetes JSON; :mod:`hami_hygon.plugin` wires them to the hooks. What the
core's built-in plugins already do for this backend, driven by the :class:`DeviceBackend` fields:
the generic handshake health rule on ``hami.io/node-handshake-dcu`` (A.5), the allocation
annotations ``hami.io/dcu-devices-to-allocate`` / ``-allocated`` in HAMi's encoding (A.4), the shared
node lock ``hami.io/mutex.lock`` for pods whose app containers use DCUs (A.6), and a node score of 0
(``ScoreNode`` returns 0, E.4).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.engine.fit import standard_fit
from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import (
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    ResourceNames,
)
from hami_core.wire import keys
from hami_core.wire.common import INT32_MAX, INT64_MAX, INT64_MIN, split_list, wire_error
from hami_core.wire.nodes import decode_node_devices
from hami_core.wire.quantity import quantity_to_int
from hami_hygon.config import HygonConfig

#: HAMi's common word: the request ``Type``, the pod-devices key, and what every registered type contains.
COMMON_WORD = "DCU"
VENDOR = "hygon"

REGISTER_ANNOTATION = "hami.io/node-dcu-register"
HANDSHAKE_ANNOTATION = "hami.io/node-handshake-dcu"
TO_ALLOCATE_ANNOTATION = "hami.io/dcu-devices-to-allocate"
ALLOCATED_ANNOTATION = "hami.io/dcu-devices-allocated"
USE_TYPE_ANNOTATION = "hygon.com/use-dcutype"
NOUSE_TYPE_ANNOTATION = "hygon.com/nouse-dcutype"
USE_UUID_ANNOTATION = "hygon.com/use-gpuuuid"
NOUSE_UUID_ANNOTATION = "hygon.com/nouse-gpuuuid"

#: Cores booked when ``hygon.com/dcucores`` is absent: a whole, exclusive card (E.4, J.2).
DEFAULT_CORES = 100
#: ``MemPercentagereq`` HAMi writes: 100 (whole card) without memory, else 0 (memory in MiB wins).
WHOLE_CARD_PERCENT = 100
MEMORY_GIVEN_PERCENT = 0


def make_backend(cfg: HygonConfig) -> DeviceBackend:
    """The DCU :class:`DeviceBackend` for a validated ``hygon:`` section (E.1-E.3)."""
    return DeviceBackend(
        name=COMMON_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(
            count=cfg.resource_count_name,
            memory=cfg.resource_memory_name,
            cores=cfg.resource_core_name,
            memory_factor=max(cfg.memory_factor, 1),
        ),
        register_annotation=REGISTER_ANNOTATION,
        handshake_annotation=HANDSHAKE_ANNOTATION,
        to_allocate_annotation=TO_ALLOCATE_ANNOTATION,
        allocated_annotation=ALLOCATED_ANNOTATION,
        use_type_annotation=USE_TYPE_ANNOTATION,
        nouse_type_annotation=NOUSE_TYPE_ANNOTATION,
        use_uuid_annotation=USE_UUID_ANNOTATION,
        nouse_uuid_annotation=NOUSE_UUID_ANNOTATION,
        lock_annotation=keys.NODE_LOCK,
        standard_capacity=True,
        config=cfg,
    )


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


# ------------------------------------------------------------------------------------------ inventory
def node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """HAMi ``GetNodeDevices`` for DCU: the devices of ``hami.io/node-dcu-register`` (E.2, A.3).

    The Hygon device plugin writes the legacy colon/comma form; a JSON list is read too. No annotation
    ⇒ no devices. A malformed value, and a value that decodes to no device (``":"``, HAMi's
    "no gpu found on node"), raise :class:`WireFormatError` naming the annotation: HAMi's registration
    loop then keeps the node's previous devices, and so does the engine.
    """
    key = backend.register_annotation or REGISTER_ANNOTATION
    raw = _annotations(node).get(key)
    if raw is None:
        return []
    devices = decode_node_devices(raw, key=key)
    if not devices:
        raise wire_error(key, "no gpu found on node")
    return devices


# ------------------------------------------------------------------------------------------ admission
def mutate_container(backend: DeviceBackend, container: Mapping[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for DCU (E.4): the container uses DCUs iff the count is in its limits.

    Nothing is changed: no defaults, no env, no runtime class.
    """
    limits = (container.get("resources") or {}).get("limits") or {}
    return backend.resource_names.count in limits


# ------------------------------------------------------------------------------------------ requests
def _resource(container: Mapping[str, Any], name: str) -> Any:
    """A container resource: limits first, then requests (HAMi reads limits, falling back to requests)."""
    if not name:
        return None
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get(name)
    if value is None:
        value = (res.get("requests") or {}).get(name)
    return value


def _as_int64(value: Any) -> int | None:
    """Kubernetes ``Quantity.AsInt64``: the integer value, or ``None`` if fractional or beyond int64."""
    try:
        number = quantity_to_int(value)
    except WireFormatError:
        return None
    if number is None or not INT64_MIN <= number <= INT64_MAX:
        return None
    return number


def container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for DCU (E.4, J.2, J.3); ``None`` is HAMi's empty request.

    - count (limits, else requests) must be an integer in 1..MaxInt32, else the request is dropped;
    - memory (MiB, limits else requests): an integer outside 0..MaxInt32, or one that overflows int32
      once multiplied by ``memoryFactor`` (> 1), drops the request; a non-integer quantity is ignored,
      so the container books the whole card's memory;
    - cores default to 100 (an exclusive card); an integer outside 0..MaxInt32 drops the request, a
      non-integer quantity keeps the default;
    - memory 0 (absent, ignored or explicit) books the whole card: ``MemPercentagereq`` 100; otherwise
      ``MemPercentagereq`` is 0 and ``Memreq`` wins.
    """
    names = backend.resource_names
    raw_count = _resource(container, names.count)
    if raw_count is None:
        return None
    nums = _as_int64(raw_count)
    if nums is None or not 1 <= nums <= INT32_MAX:
        return None
    memreq = 0
    raw_mem = _resource(container, names.memory)
    if raw_mem is not None:
        mem = _as_int64(raw_mem)
        if mem is not None:
            if not 0 <= mem <= INT32_MAX:
                return None
            if names.memory_factor > 1:
                mem *= names.memory_factor
                if mem > INT32_MAX:
                    return None
            memreq = mem
    cores = DEFAULT_CORES
    raw_cores = _resource(container, names.cores)
    if raw_cores is not None:
        value = _as_int64(raw_cores)
        if value is not None:
            if not 0 <= value <= INT32_MAX:
                return None
            cores = value
    pct = WHOLE_CARD_PERCENT if memreq == 0 else MEMORY_GIVEN_PERCENT
    return DeviceRequest(COMMON_WORD, nums, memreq, pct, cores)


# ------------------------------------------------------------------------------------------ fit
class Selection:
    """The pod's DCU selection annotations (E.3, A.8), parsed once per filter call.

    Type lists match when the upper-cased card type contains an upper-cased entry; UUID lists match
    exactly. Entries are trimmed and empty entries ignored, so an empty or blank value is no constraint.
    A device must match the use list (when set) and no entry of the no-use list (when set).
    """

    __slots__ = ("nouse_type", "nouse_uuid", "use_type", "use_uuid")

    def __init__(self, backend: DeviceBackend, annotations: Mapping[str, str]) -> None:
        self.use_type = tuple(t.upper() for t in split_list(annotations.get(backend.use_type_annotation or "")))
        self.nouse_type = tuple(t.upper() for t in split_list(annotations.get(backend.nouse_type_annotation or "")))
        self.use_uuid = frozenset(split_list(annotations.get(backend.use_uuid_annotation or "")))
        self.nouse_uuid = frozenset(split_list(annotations.get(backend.nouse_uuid_annotation or "")))

    def type_ok(self, card_type: str) -> bool:
        """``hygon.com/use-dcutype`` / ``nouse-dcutype`` against a card type such as ``DCU-K100_AI``."""
        card = card_type.upper()
        if self.use_type and not any(t in card for t in self.use_type):
            return False
        return not (self.nouse_type and any(t in card for t in self.nouse_type))

    def uuid_ok(self, uuid: str) -> bool:
        """``hygon.com/use-gpuuuid`` / ``nouse-gpuuuid`` against a device id."""
        if self.use_uuid and uuid not in self.use_uuid:
            return False
        return not (self.nouse_uuid and uuid in self.nouse_uuid)

    @property
    def filters_type(self) -> bool:
        return bool(self.use_type or self.nouse_type)

    @property
    def filters_uuid(self) -> bool:
        return bool(self.use_uuid or self.nouse_uuid)


def _never(dev: DeviceUsage) -> bool:
    return False


def filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                 candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult]:
    """HAMi's DCU ``Fit`` (E.4) on every candidate: the standard template (A.7) with the DCU type rule.

    The type step fails when the request Type is not ``DCU`` or the type annotations reject the card;
    UUID selection as A.8; the ``mutex`` GPU policy applies. No NUMA binding, no cordon, no quota.
    """
    sel = Selection(backend, _annotations(pod))
    type_ok = (lambda dev: sel.type_ok(dev.type)) if sel.filters_type else None
    if request.backend != COMMON_WORD:
        type_ok = _never
    uuid_ok = (lambda dev: sel.uuid_ok(dev.id)) if sel.filters_uuid else None
    mutex = policy.has("mutex")
    return [standard_fit(cand.devices, request, type_ok=type_ok, uuid_ok=uuid_ok, mutex=mutex)
            for cand in candidates]
