"""HAMi's Iluvatar backends, scheduler side (vendors.md Part F; Part A.3-A.8; J.1-J.3).

One backend per configured chip; its common word (``MR-V100``, ``BI-V150``, ...) is the request Type.
Pure functions over plain Kubernetes JSON; :mod:`hami_iluvatar.plugin` wires them to the hooks.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hami_core.plugins.errors import AdmissionFailed, WireFormatError
from hami_core.plugins.fit import standard_fit
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
from hami_core.wire.common import split_list, wire_error
from hami_core.wire.nodes import decode_node_devices_legacy
from hami_core.wire.quantity import parse_quantity, quantity_to_int
from hami_iluvatar.config import IluvatarChipConfig

VENDOR = "iluvatar"
#: One ``.vMem`` unit is 256 MiB (HAMi ``MemoryFactor``; also scales quota limits).
MEMORY_FACTOR = 256
MAX_INT32 = 2**31 - 1
#: Env var naming the container for the Iluvatar runtime. The misspelling is HAMi's, kept for compatibility.
CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"


def register_annotation(common_word: str) -> str:
    """Node registration key: ``hami.io/node-<commonWord>-register`` (legacy colon/comma form)."""
    return f"hami.io/node-{common_word}-register"


def handshake_annotation(common_word: str) -> str:
    """Node handshake key: ``hami.io/node-handshake-<commonWord>``."""
    return f"hami.io/node-handshake-{common_word}"


def to_allocate_annotation(common_word: str) -> str:
    """Pod key consumed by the device plugin: ``hami.io/<commonWord>-devices-to-allocate``."""
    return f"hami.io/{common_word}-devices-to-allocate"


def allocated_annotation(common_word: str) -> str:
    """Pod key kept for usage reconstruction: ``hami.io/<commonWord>-devices-allocated``."""
    return f"hami.io/{common_word}-devices-allocated"


def use_uuid_annotation(common_word: str) -> str:
    """Pod allow-list of device UUIDs: ``hami.io/use-<commonWord>-uuid``."""
    return f"hami.io/use-{common_word}-uuid"


def nouse_uuid_annotation(common_word: str) -> str:
    """Pod deny-list of device UUIDs: ``hami.io/no-use-<commonWord>-uuid``."""
    return f"hami.io/no-use-{common_word}-uuid"


def make_backend(chip: IluvatarChipConfig) -> DeviceBackend:
    """The :class:`DeviceBackend` of one ``iluvatars:`` entry (HAMi ``InitIluvatarDevice``, F.1-F.2).

    ``standard_capacity`` holds because the fit is :func:`~hami_core.plugins.fit.standard_fit` unchanged.
    """
    word = chip.common_word
    return DeviceBackend(
        name=word,
        vendor=VENDOR,
        resource_names=ResourceNames(
            count=chip.resource_count_name,
            memory=chip.resource_memory_name,
            cores=chip.resource_core_name,
            memory_factor=MEMORY_FACTOR,
        ),
        register_annotation=register_annotation(word),
        handshake_annotation=handshake_annotation(word),
        to_allocate_annotation=to_allocate_annotation(word),
        allocated_annotation=allocated_annotation(word),
        use_uuid_annotation=use_uuid_annotation(word),
        nouse_uuid_annotation=nouse_uuid_annotation(word),
        lock_annotation=keys.NODE_LOCK,
        standard_capacity=True,
        cleanup_handshake=False,  # HAMi's Iluvatar NodeCleanUp leaves the handshake alone (vendors F.3)
        config=chip,
    )


def make_backends(chips: Iterable[IluvatarChipConfig]) -> list[DeviceBackend]:
    """One backend per chip, in configuration order."""
    return [make_backend(chip) for chip in chips]


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


# ------------------------------------------------------------------------------------------ inventory
def node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Devices from ``hami.io/node-<commonWord>-register`` (HAMi ``GetNodeDevices``, F.2, A.3 form 2).

    Format: the legacy colon/comma list, e.g. ``GPU-bad5...,10,8192,100,MR-V100,0,true:``. No annotation
    means no devices. A value that decodes to no device (``":"``) is HAMi's "no gpu found on node" error,
    so, like a malformed value, it raises :class:`WireFormatError` and the engine keeps the node's
    previous devices.
    """
    key = backend.register_annotation or register_annotation(backend.name)
    raw = _annotations(node).get(key)
    if raw is None:
        return []
    if not isinstance(raw, str):
        raise wire_error(key, f"expected a string, got {type(raw).__name__}")
    devices = decode_node_devices_legacy(raw, key=key)
    if not devices:
        raise wire_error(key, "no gpu found on node")
    return devices


# ------------------------------------------------------------------------------------------ requests
def _resource(container: Mapping[str, Any], name: str) -> Any:
    """A container resource: limits first, then requests (HAMi's lookup for every Iluvatar resource)."""
    if not name:
        return None
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get(name)
    return value if value is not None else (res.get("requests") or {}).get(name)


def _int(value: Any) -> int | None:
    """The quantity as an exact integer (Go ``Quantity.AsInt64``), or ``None`` when it is not one."""
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


def container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for one chip (F.3; memory validated as Cambricon D.3).

    - count (limits → requests) must be an integer in 1..MaxInt32, else the container does not use the chip;
    - memory (limits → requests) must be an integer in [0, MaxInt32/256], else the **whole request is
      dropped**; ``Memreq = vMem x 256`` MiB;
    - cores (limits → requests) default to 0; a non-integer core quantity leaves 0;
    - ``MemPercentagereq`` is 100 when no memory is booked (whole card memory), else 0.
    """
    names = backend.resource_names
    nums = _int(_resource(container, names.count))
    if nums is None or not 0 < nums <= MAX_INT32:
        return None
    memreq = 0
    raw_mem = _resource(container, names.memory)
    if raw_mem is not None:
        mem = _int(raw_mem)
        if mem is None or not 0 <= mem <= MAX_INT32 // MEMORY_FACTOR:
            return None
        memreq = mem * MEMORY_FACTOR
    cores = 0
    raw_cores = _resource(container, names.cores)
    if raw_cores is not None:
        value = _int(raw_cores)
        if value is not None:
            # HAMi keeps a negative number, which would *free* cores when booked; treat it as 0.
            cores = max(value, 0)
    return DeviceRequest(backend.name, nums, memreq, 100 if memreq == 0 else 0, cores)


# ------------------------------------------------------------------------------------------ admission
def _count_value(raw: Any, container: Mapping[str, Any], resource: str) -> int:
    """Go ``Quantity.Value()``: the quantity rounded up to an integer."""
    try:
        return math.ceil(parse_quantity(raw))
    except WireFormatError as exc:
        raise AdmissionFailed(f"container {container.get('name') or '<unnamed>'}: {resource}={raw!r} "
                              f"is not a quantity: {exc}") from None


def mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for one chip (F.3); returns whether the count is in the container's limits.

    When it is: a count above 1 sets the core limit to ``count x 100`` (several cards are whole cards),
    and ``SOL_CONTINER_NAME=<container name>`` is added unless the env var exists or the container is
    unnamed. Nothing else is changed; a count only in requests is not a request here (as in HAMi).
    """
    names = backend.resource_names
    limits = (container.get("resources") or {}).get("limits") or {}
    if names.count not in limits:
        return False
    count = _count_value(limits[names.count], container, names.count)
    if count > 1 and names.cores:
        limits[names.cores] = str(count * 100)
    env = container.get("env")
    name = container.get("name")
    if name and not any(item.get("name") == CONTAINER_NAME_ENV for item in env or ()):
        if env is None:
            env = container["env"] = []
        env.append({"name": CONTAINER_NAME_ENV, "value": name})
    return True


# ------------------------------------------------------------------------------------------ fit
class _UuidSelection:
    """``hami.io/use-<cw>-uuid`` / ``hami.io/no-use-<cw>-uuid`` (HAMi ``CheckUUID``, A.8).

    Comma lists, entries trimmed, exact match; an empty or blank value imposes nothing.
    """

    __slots__ = ("nouse", "use")

    def __init__(self, backend: DeviceBackend, pod: Mapping[str, Any]) -> None:
        annos = _annotations(pod)
        self.use = frozenset(split_list(annos.get(backend.use_uuid_annotation or "")))
        self.nouse = frozenset(split_list(annos.get(backend.nouse_uuid_annotation or "")))

    def __bool__(self) -> bool:
        return bool(self.use or self.nouse)

    def ok(self, dev: DeviceUsage) -> bool:
        if self.use and dev.id not in self.use:
            return False
        return not (self.nouse and dev.id in self.nouse)


def _never(dev: DeviceUsage) -> bool:
    return False


def filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                 candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult]:
    """HAMi's Iluvatar ``Fit`` (F.3): the standard template (A.7) on every candidate node.

    Type check = the request Type equals this chip's common word; UUID allow/deny lists; ``mutex`` in the
    GPU policy takes only idle cards. No NUMA binding, no quota check, no custom rule.
    """
    selection = _UuidSelection(backend, pod)
    # Step 3 of the template comes after the health check, so a foreign Type is a predicate, not a shortcut.
    type_ok = None if request.backend == backend.name else _never
    uuid_ok = selection.ok if selection else None
    mutex = policy.has("mutex")
    return [standard_fit(cand.devices, request, type_ok=type_ok, uuid_ok=uuid_ok, mutex=mutex)
            for cand in candidates]
