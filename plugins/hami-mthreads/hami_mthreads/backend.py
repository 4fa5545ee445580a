"""HAMi's Moore Threads backend, scheduler side (vendors.md Part H; Part A for the shared contract).

:class:`MthreadsBackend` is a :class:`~hami_core.plugins.StandardBackend`: the standard fit with the
``mthreads.ai`` UUID selection and ``mutex``, the allocated pod key (``hami.io/mthreads-vgpu-devices-allocated``;
no to-allocate key, as HAMi never writes it) and its decoding, and no node lock (HAMi's ``LockNode`` is a no-op,
so the backend has no ``lock_annotation``) are HAMi's generic rules. What differs: devices synthesised from node
capacity, a backend that is always healthy, admission defaults, requests split per device, the case-sensitive
type check and the extra allocation annotations; the base's knobs give memory in MiB precedence over a percentage
and add the "whole pod on one device" rule (:func:`~hami_core.plugins.same_devices_rule`) to the fit.
``ScoreNode`` is 0 and ``NodeCleanUp`` does nothing, so neither is implemented.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from hami_core.plugins import (
    AdmissionFailed,
    DeviceInfo,
    DevicePredicate,
    DeviceRequest,
    DeviceUsage,
    HealthReport,
    Mutation,
    PodSingleDevice,
    ResourceNames,
    Selection,
    StandardBackend,
    WireFormatError,
    as_int64,
    as_whole,
    metadata,
    node_capacity,
    resource,
    standard_allocation_annotations,
    unix_nanos,
)
from hami_core.wire.common import INT32_MAX, check_device_count, go_quote
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


@dataclass(frozen=True, slots=True)
class MthreadsBackend(StandardBackend):
    """The ``Mthreads`` backend (H.1-H.6).

    No register or handshake annotation (registration comes from node capacity), only the allocated
    pod key, no node lock. Fit is the standard template, so the engine may prefilter nodes numerically.
    """

    #: ``MemPercentagereq``: 100 (the whole card) without memory, else 0 (``Memreq`` wins)
    memory_given_percentage: ClassVar[int] = 0
    #: HAMi's ``customFilterRule``: every device earlier containers of the pod got must be this device. Only
    #: earlier containers count, so one container may take several devices, but a later container can then fit
    #: nowhere (``CardNotFoundCustomFilterRule``).
    same_devices_as_earlier_containers: ClassVar[bool] = True

    @classmethod
    def from_config(cls, cfg: MthreadsConfig) -> MthreadsBackend:
        """The backend for a validated ``mthreads:`` section."""
        return cls(name=COMMON_WORD, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.resource_count_name, memory=cfg.resource_memory_name,
                                                cores=cfg.resource_core_name, memory_factor=MEMORY_FACTOR),
                   allocated_annotation=ALLOCATED, use_uuid_annotation=USE_UUID, nouse_uuid_annotation=NOUSE_UUID,
                   standard_capacity=True, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> list[DeviceInfo]:
        """Synthesise the node's GPUs from its capacity (HAMi ``GetNodeDevices``, H.2).

        With C = ``capacity[<core resource>]`` and M = ``capacity[<memory resource>]``: ceil(C/16) devices,
        each ``<node>-mthreads-<i>``, index i, split count 100, ``M x 512 x 16 / C`` MiB (integer division),
        16 cores, type ``Mthreads``, NUMA 0, healthy. No core capacity (absent or 0) means no devices;
        a missing memory capacity gives 0 MiB cards, as in HAMi. A value that is not a non-negative integer
        raises :class:`WireFormatError` naming the node and resource, so the engine keeps the previous devices.
        """
        names = self.resource_names
        name = str(metadata(node).get("name", ""))
        raw_cores = node_capacity(node, names.cores)
        if raw_cores is None:
            return []
        cores = _capacity_int(name, names.cores, raw_cores)
        if cores == 0:
            return []
        raw_mem = node_capacity(node, names.memory)
        memory = 0 if raw_mem is None else _capacity_int(name, names.memory, raw_mem)
        check_device_count(-(-cores // CORES_PER_GPU), f"node {name}: status.capacity[{names.cores}]")
        devmem = memory * MEMORY_FACTOR * CORES_PER_GPU // cores
        if devmem > INT32_MAX:
            raise WireFormatError(f"node {name}: status.capacity[{names.memory}]: {go_quote(raw_mem)} gives "
                                  f"{devmem} MiB per GPU, beyond int32")
        return [DeviceInfo(id=f"{name}-mthreads-{i}", index=i, count=DEVICE_COUNT, devmem=devmem,
                           devcore=CORES_PER_GPU, type=COMMON_WORD, numa=0, health=True)
                for i in range(-(-cores // CORES_PER_GPU))]

    def hami_node_health(self) -> HealthReport:
        """HAMi ``CheckHealth`` for Mthreads is always ``(true, true)``: healthy, refresh every time (even on a
        node without Moore Threads devices, where the generic rule would not refresh)."""
        return HealthReport(True, True)

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission`` for Mthreads (H.3): whether the container uses the backend.

        The count is read from limits, then requests; its value (rounded up, as Go ``Quantity.Value``) must
        be > 0. More than one GPU means whole cards: core limit = count x 16, memory limit = count x 96 and
        the pod annotation ``mthreads.com/request-gpu-num`` = count. One GPU without a memory limit is a
        whole card too (16 cores, 96 units); one GPU with a memory limit must ask for a legal sGPU size
        (2, 4, 8, 16, 32, 64 or 96 units). Violations raise :class:`AdmissionFailed`.
        """
        names = self.resource_names
        cname = container.get("name", "<unnamed>")
        raw = resource(container, names.count)
        if raw is None:
            return Mutation(False)
        try:
            count = math.ceil(parse_quantity(raw))
        except WireFormatError as exc:
            raise AdmissionFailed(f"container {cname}: {names.count}: {exc}") from None
        if count <= 0:
            raise AdmissionFailed(f"container {cname}: {names.count} must be greater than 0")
        limits = _dict_at(_dict_at(container, "resources"), "limits")
        if count > 1:
            limits[names.cores] = str(count * CORES_PER_GPU)
            limits[names.memory] = str(count * MEMORY_PER_GPU)
            _dict_at(_dict_at(pod, "metadata"), "annotations")[REQUEST_GPU_NUM] = str(count)
            return Mutation(True)
        if names.memory not in limits:
            # Only limits count here: a memory given in requests alone is overridden by the whole card.
            limits[names.cores] = str(count * CORES_PER_GPU)
            limits[names.memory] = str(count * MEMORY_PER_GPU)
            return Mutation(True)
        if as_int64(limits[names.memory]) not in LEGAL_MEMORY_SLICES:
            raise AdmissionFailed(f"container {cname}: {names.memory}={limits[names.memory]!r}: {INVALID_MEMORY}")
        return Mutation(True)

    # ----------------------------------------------------------------------------------- requests
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        """HAMi ``GenerateResourceRequests`` for Mthreads (H.4): the generic steps (count, memory x 512, cores
        defaulting to 0; limits, then requests), then memory and cores divided by the count (each device's
        share, integer division). The percentage is 100 (the whole card) when no memory is asked for, else 0."""
        # The base named explicitly: zero-argument super() fails in a slotted dataclass (Python < 3.14).
        req = StandardBackend.hami_container_request(self, container)
        if req is None:
            return None
        return DeviceRequest(self.name, req.nums, req.memreq // req.nums, req.mem_percentage,
                             req.coresreq // req.nums)

    def request_cores(self, container: Mapping[str, Any]) -> int | None:
        """Cores: 0 when absent or not a whole number; a whole number outside 0..MaxInt32 drops the request,
        even one beyond int64 (which the generic step ignores as unreadable)."""
        value = as_whole(resource(container, self.resource_names.cores))
        if value is None:
            return self.default_cores
        return value if 0 <= value <= INT32_MAX else None

    # ----------------------------------------------------------------------------------- filter
    def type_predicate(self, pod: Mapping[str, Any], request: DeviceRequest, sel: Selection) -> DevicePredicate:
        """HAMi's two type checks: the request is ``Mthreads`` and the device type contains it (case-sensitive)."""
        if request.backend != self.name:
            return _never
        return lambda dev: self.name in dev.type

    # ----------------------------------------------------------------------------------- reserve / bind
    def hami_allocation_annotations(self, devices: PodSingleDevice, node: str, now: float) -> dict[str, str]:
        """The allocated key (HAMi's codec) plus HAMi ``PatchAnnotations`` for Mthreads (H.6).

        For the **last** container that received devices: ``mthreads.com/gpu-index`` = comma list of their
        indexes, ``mthreads.com/predicate-time`` = the decision time in Unix nanoseconds (HAMi
        ``time.Now().UnixNano()``) and ``mthreads.com/predicate-node`` = the chosen node (HAMi copies
        ``hami.io/vgpu-node``). Only the allocated key when no container has a device.
        """
        out = dict(standard_allocation_annotations(self, devices) or {})
        last = next((ctr for ctr in reversed(devices) if ctr), None)
        if last is not None:
            out.update({GPU_INDEX: ",".join(str(d.idx) for d in last), PREDICATE_TIME: str(unix_nanos(now)),
                        PREDICATE_NODE: node})
        return out


def _dict_at(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]``, replaced by a new empty dict when it is absent or not a dict (admission edits in place)."""
    child = parent.get(key)
    if not isinstance(child, dict):
        child = parent[key] = {}
    return child


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


def _never(dev: DeviceUsage) -> bool:
    return False
