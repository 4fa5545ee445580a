"""HAMi's Moore Threads backend, scheduler side (vendors.md Part H; Part A for the shared contract).

Pure functions over plain Kubernetes JSON; :mod:`hami_mthreads.plugin` wires them to the hooks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.plugins.errors import AdmissionFailed, WireFormatError
from hami_core.plugins.fit import CustomRule, standard_fit
from hami_core.plugins.types import (
    ContainerDevice,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    PodSingleDevice,
    ResourceNames,
)
from hami_core.wire.common import INT32_MAX, check_device_count, go_quote, split_list
from hami_core.wire.quantity import parse_quantity, quantity_to_int
from hami_mthreads.config import MthreadsConfig

COMMON_WORD = "Mthreads"
VENDOR = "mthreads"

#: Memory resource unit in MiB (HAMi ``MemoryFactor``): one ``sgpu-memory`` unit is 512 MiB.
MEMORY_FACTOR = 512
#: ``sgpu-core`` units per GPU (the registered ``devcore``).
CORES_PER_GPU = 16
#: ``sgpu-memory`` units per GPU (48 GiB), written for whole cards at admission.
MEMORY_PER_GPU = 96
#: Split count of every synthesised device.
DEVICE_COUNT = 100
#: Memory sizes (units) a single sGPU may request (H.1, H.3).
LEGAL_MEMORY_SLICES: tuple[int, ...] = (2, 4, 8, 16, 32, 64, 96)

# Pod annotations (H.5, H.6). The to-allocate key is registered by HAMi but never written.
TO_ALLOCATE = "hami.io/mthreads-vgpu-devices-to-allocate"
ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
USE_UUID = "mthreads.ai/use-gpuuuid"
NOUSE_UUID = "mthreads.ai/nouse-gpuuuid"
GPU_INDEX = "mthreads.com/gpu-index"
PREDICATE_TIME = "mthreads.com/predicate-time"
PREDICATE_NODE = "mthreads.com/predicate-node"
REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"

INVALID_MEMORY = "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"



def make_backend(cfg: MthreadsConfig) -> DeviceBackend:
    """The ``Mthreads`` :class:`DeviceBackend` for a validated ``mthreads:`` section.

    No register or handshake annotation (registration comes from node capacity), only the allocated
    pod key, no node lock (HAMi's ``LockNode`` is a no-op). Fit is the standard template, so the
    engine may prefilter nodes numerically.
    """
    return DeviceBackend(
        name=COMMON_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(
            count=cfg.resource_count_name,
            memory=cfg.resource_memory_name,
            cores=cfg.resource_core_name,
            memory_factor=MEMORY_FACTOR,
        ),
        to_allocate_annotation=None,
        allocated_annotation=ALLOCATED,
        use_uuid_annotation=USE_UUID,
        nouse_uuid_annotation=NOUSE_UUID,
        lock_annotation=None,
        standard_capacity=True,
        config=cfg,
    )


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _metadata(obj).get("annotations") or {}


# ------------------------------------------------------------------------------------------ inventory
def _capacity_int(node_name: str, resource: str, value: Any) -> int:
    """A node capacity quantity as a non-negative integer; anything else is a registration error."""
    where = f"node {node_name}: status.capacity[{resource}]"
    try:
        number = quantity_to_int(value)
    except WireFormatError as exc:
        raise WireFormatError(f"{where}: {exc}") from None
    if number is None or number < 0:
        raise WireFormatError(f"{where}: {go_quote(value)} is not a non-negative integer")
    return number


def node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """Synthesise the node's GPUs from its capacity (HAMi ``GetNodeDevices``, H.2).

    With C = ``capacity[<core resource>]`` and M = ``capacity[<memory resource>]``: ceil(C/16) devices,
    each ``<node>-mthreads-<i>``, index i, split count 100, ``M x 512 x 16 / C`` MiB (integer division),
    16 cores, type ``Mthreads``, NUMA 0, healthy. No core capacity (absent or 0) means no devices;
    a missing memory capacity gives 0 MiB cards, as in HAMi. A value that is not a non-negative integer
    raises :class:`WireFormatError` naming the node and resource, so the engine keeps the previous devices.
    """
    names = backend.resource_names
    name = str(_metadata(node).get("name", ""))
    capacity = (node.get("status") or {}).get("capacity") or {}
    raw_cores = capacity.get(names.cores)
    if raw_cores is None:
        return []
    cores = _capacity_int(name, names.cores, raw_cores)
    if cores == 0:
        return []
    raw_mem = capacity.get(names.memory)
    memory = 0 if raw_mem is None else _capacity_int(name, names.memory, raw_mem)
    check_device_count(-(-cores // CORES_PER_GPU), f"node {name}: status.capacity[{names.cores}]")
    devmem = memory * MEMORY_FACTOR * CORES_PER_GPU // cores
    if devmem > INT32_MAX:
        raise WireFormatError(f"node {name}: status.capacity[{names.memory}]: {go_quote(raw_mem)} gives "
                              f"{devmem} MiB per GPU, beyond int32")
    return [DeviceInfo(id=f"{name}-mthreads-{i}", index=i, count=DEVICE_COUNT, devmem=devmem,
                       devcore=CORES_PER_GPU, type=COMMON_WORD, numa=0, health=True)
            for i in range(-(-cores // CORES_PER_GPU))]


# ------------------------------------------------------------------------------------------ resources
def _resource(container: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    """``(present, value)`` of a container resource: limits first, then requests (as HAMi reads them)."""
    res = container.get("resources") or {}
    limits = res.get("limits") or {}
    if name in limits:
        return True, limits[name]
    requests = res.get("requests") or {}
    if name in requests:
        return True, requests[name]
    return False, None


def _as_int64(value: Any) -> int | None:
    """Go ``Quantity.AsInt64``: the exact integer, or ``None`` for fractions and unreadable values."""
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


# ------------------------------------------------------------------------------------------ admission
def mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> bool:
    """HAMi ``MutateAdmission`` for Mthreads (H.3); returns whether the container uses the backend.

    The count is read from limits, then requests; its value (rounded up, as Go ``Quantity.Value``) must
    be > 0. More than one GPU means whole cards: core limit = count x 16, memory limit = count x 96 and
    the pod annotation ``mthreads.com/request-gpu-num`` = count. One GPU without a memory limit is a
    whole card too (16 cores, 96 units); one GPU with a memory limit must ask for a legal sGPU size
    (2, 4, 8, 16, 32, 64 or 96 units). Violations raise :class:`AdmissionFailed`.
    """
    names = backend.resource_names
    cname = container.get("name", "<unnamed>")
    present, raw = _resource(container, names.count)
    if not present:
        return False
    try:
        count = math.ceil(parse_quantity(raw))
    except WireFormatError as exc:
        raise AdmissionFailed(f"container {cname}: {names.count}: {exc}") from None
    if count <= 0:
        raise AdmissionFailed(f"container {cname}: {names.count} must be greater than 0")
    resources = container.get("resources")
    if not isinstance(resources, dict):
        resources = container["resources"] = {}
    limits = resources.get("limits")
    if not isinstance(limits, dict):
        limits = resources["limits"] = {}
    if count > 1:
        limits[names.cores] = str(count * CORES_PER_GPU)
        limits[names.memory] = str(count * MEMORY_PER_GPU)
        meta = pod.get("metadata")
        if not isinstance(meta, dict):
            meta = pod["metadata"] = {}
        annos = meta.get("annotations")
        if not isinstance(annos, dict):
            annos = meta["annotations"] = {}
        annos[REQUEST_GPU_NUM] = str(count)
        return True
    if names.memory not in limits:
        # Only limits count here: a memory given in requests alone is overridden by the whole card.
        limits[names.cores] = str(count * CORES_PER_GPU)
        limits[names.memory] = str(count * MEMORY_PER_GPU)
        return True
    if _as_int64(limits[names.memory]) not in LEGAL_MEMORY_SLICES:
        raise AdmissionFailed(f"container {cname}: {names.memory}={limits[names.memory]!r}: {INVALID_MEMORY}")
    return True


# ------------------------------------------------------------------------------------------ requests
def container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """HAMi ``GenerateResourceRequests`` for Mthreads (H.4).

    Count (limits, then requests) must be an integer in 1..MaxInt32. Memory (same lookup) must be an
    integer in 0..MaxInt32/512 units, else the whole request is dropped; it is booked as units x 512 MiB.
    Cores default to 0; a fractional core value is ignored, a negative or over-int32 one drops the
    request. Memory and cores are divided by the count (each device's share, integer division). The
    memory percentage is 100 (the whole card) when no memory is asked for, 0 otherwise.
    """
    names = backend.resource_names
    present, raw = _resource(container, names.count)
    if not present:
        return None
    nums = _as_int64(raw)
    if nums is None or not 0 < nums <= INT32_MAX:
        return None
    memory = 0
    present, raw = _resource(container, names.memory)
    if present:
        units = _as_int64(raw)
        if units is None or not 0 <= units <= INT32_MAX // MEMORY_FACTOR:
            return None
        memory = units * MEMORY_FACTOR
    cores = 0
    present, raw = _resource(container, names.cores)
    if present:
        value = _as_int64(raw)
        if value is not None:
            if not 0 <= value <= INT32_MAX:
                return None
            cores = value
    return DeviceRequest(COMMON_WORD, nums, memory // nums, 100 if memory == 0 else 0, cores // nums)


# ------------------------------------------------------------------------------------------ fit
def _type_ok(request_type: str) -> Callable[[DeviceUsage], bool]:
    """HAMi's two type checks: the device type contains the request type (case-sensitive), which is ``Mthreads``."""
    if request_type != COMMON_WORD:
        return lambda dev: False
    return lambda dev: request_type in dev.type


def _uuid_ok(use: frozenset[str], nouse: frozenset[str]) -> Callable[[DeviceUsage], bool]:
    """HAMi ``CheckUUID`` with the ``mthreads.ai`` keys: in the use list (if set), not in the no-use list."""
    return lambda dev: (not use or dev.id in use) and dev.id not in nouse


def _same_device_rule(allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]]) -> CustomRule | None:
    """HAMi ``customFilterRule``: every device earlier containers of the pod got must be this device.

    Only earlier containers count, so one container may take several devices, but a later container
    can then fit nowhere (``CardNotFoundCustomFilterRule``).
    """
    earlier = {d.uuid for ctr in allocated.get(COMMON_WORD, ()) for d in ctr}
    if not earlier:
        return None
    return lambda dev, mem, cores, chosen: all(uuid == dev.id for uuid in earlier)


def filter_nodes(pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                 policy: GpuPolicy) -> list[FitResult]:
    """HAMi's Mthreads ``Fit`` (H.5) on every candidate node: the standard template (A.7) with the
    type check, ``mthreads.ai/use-gpuuuid`` / ``nouse-gpuuuid`` selection, ``mutex`` when the GPU policy
    contains it, no NUMA grouping, no quota, and the one-device-per-pod custom rule.
    """
    annos = _annotations(pod)
    use = frozenset(split_list(annos.get(USE_UUID)))
    nouse = frozenset(split_list(annos.get(NOUSE_UUID)))
    type_ok = _type_ok(request.backend)
    uuid_ok = _uuid_ok(use, nouse) if (use or nouse) else None
    mutex = policy.has("mutex")
    return [standard_fit(cand.devices, request, type_ok=type_ok, uuid_ok=uuid_ok, mutex=mutex,
                         custom_rule=_same_device_rule(cand.allocated))
            for cand in candidates]


# ------------------------------------------------------------------------------------------ annotations
def _unix_nanos(now: float) -> int:
    # Split first: a float cannot hold today's Unix time in nanoseconds exactly.
    whole = int(now)
    return whole * 1_000_000_000 + round((now - whole) * 1_000_000_000)


def allocation_annotations(devices: PodSingleDevice, node: str, now: float) -> dict[str, str]:
    """HAMi ``PatchAnnotations`` for Mthreads beyond the allocated key (H.6).

    For the **last** container that received devices: ``mthreads.com/gpu-index`` = comma list of their
    indexes, ``mthreads.com/predicate-time`` = the decision time in Unix nanoseconds (HAMi
    ``time.Now().UnixNano()``) and ``mthreads.com/predicate-node`` = the chosen node (HAMi copies
    ``hami.io/vgpu-node``). Nothing when no container has a device.
    """
    last = next((ctr for ctr in reversed(devices) if ctr), None)
    if last is None:
        return {}
    return {GPU_INDEX: ",".join(str(d.idx) for d in last), PREDICATE_TIME: str(_unix_nanos(now)),
            PREDICATE_NODE: node}
