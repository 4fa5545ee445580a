"""HAMi's AMD GPU backend (``pkg/device/amd/device.go``, HAMi v2.10.0, PR #2290: MI300X vGPU).

:class:`AmdBackend` is a :class:`~hami_core.plugins.StandardBackend`. HAMi's generic rules are AMD's for the
allocation annotations ``hami.io/amd-devices-to-allocate`` / ``-allocated`` (``PatchAnnotations``), their decoding
and usage booking (``AddResourceUsage``: a slot, the MiB and the CUs), the shared node lock ``hami.io/mutex.lock``
when an app container asks for a GPU (``LockNode`` / ``ReleaseNodeLock``) and a node score of 0 (``ScoreNode``).
What is AMD's own:

* registration is JSON only (``GetNodeDevices``); there is no handshake annotation;
* health is the node's ``amd.com/gpu`` capacity, and an unhealthy node loses its registration (``CheckHealth``,
  ``NodeCleanUp``);
* admission also counts memory-only or core-only containers and rejects a core percentage outside 1..100
  (``MutateAdmission``);
* requests read limits only, in MiB and percent, the cores 100 when absent (``GenerateResourceRequests``);
* the fit books compute units, not percent (:mod:`hami_amd.fit`);
* ``Allocate`` (node side) gives each container its CU mask, memory limit and ``libamvgpu.so``
  (:mod:`hami_amd.allocate`).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_amd import allocate, fit
from hami_amd.config import AmdConfig
from hami_core.plugins import (
    AdmissionFailed,
    ContainerAllocation,
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    Mutation,
    QuotaView,
    ResourceNames,
    StandardBackend,
    annotations,
    as_int64,
    metadata,
    node_capacity,
    resource,
)
from hami_core.plugins.dra import CAP_CORES, DraCapacity, DraDevice
from hami_core.plugins.standard import standard_dra_devices
from hami_core.wire import keys
from hami_core.wire.common import INT32_MAX, wire_error
from hami_core.wire.nodes import decode_node_devices_json

COMMON_WORD = fit.COMMON_WORD
VENDOR = "amd"

REGISTER_ANNOTATION = "hami.io/node-amd-register"
TO_ALLOCATE_ANNOTATION = "hami.io/amd-devices-to-allocate"
ALLOCATED_ANNOTATION = "hami.io/amd-devices-allocated"
USE_TYPE_ANNOTATION = "amd.com/use-gputype"
NOUSE_TYPE_ANNOTATION = "amd.com/nouse-gputype"
USE_UUID_ANNOTATION = "amd.com/use-gpu-uuid"
NOUSE_UUID_ANNOTATION = "amd.com/nouse-gpu-uuid"
#: Declared by HAMi (``AMDDeviceSelection``, ``AMDAssignedNode``) but never read or written by its AMD backend.
GPU_INDEX_ANNOTATION = "amd.com/gpu-index"
PREDICATE_NODE_ANNOTATION = "amd.com/predicate-node"
#: ``amd.com/gpucores`` is a percentage of the card's compute units.
MAX_CORE_PERCENT = 100
#: The DRA attribute with a card's compute units (``devcore``): its ``cores`` capacity is in percent of them.
ATTR_COMPUTE_UNITS = "computeUnits"


@dataclass(frozen=True, slots=True)
class AmdBackend(StandardBackend):
    """The AMD GPU backend (HAMi ``AMDDevices``)."""

    @classmethod
    def from_config(cls, cfg: AmdConfig) -> AmdBackend:
        """The backend for a validated ``amd:`` section (HAMi ``InitAMDGPUDevice``).

        ``standard_capacity`` is False: the fit books CUs (``devcore x percent / 100``) and a whole card's memory
        for a request without memory, so the engine's prefilter, which assumes the standard checklist, must not
        judge its nodes.
        """
        return cls(name=COMMON_WORD, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.resource_count_name, memory=cfg.resource_memory_name,
                                                cores=cfg.resource_core_name),
                   register_annotation=REGISTER_ANNOTATION, to_allocate_annotation=TO_ALLOCATE_ANNOTATION,
                   allocated_annotation=ALLOCATED_ANNOTATION, use_type_annotation=USE_TYPE_ANNOTATION,
                   nouse_type_annotation=NOUSE_TYPE_ANNOTATION, use_uuid_annotation=USE_UUID_ANNOTATION,
                   nouse_uuid_annotation=NOUSE_UUID_ANNOTATION, lock_annotation=keys.NODE_LOCK,
                   standard_capacity=False, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """HAMi ``GetNodeDevices``: the JSON list in ``hami.io/node-amd-register``.

        No annotation means no AMD GPU (HAMi: "annos not found"; the core treats a missing annotation as "none").
        Anything but a JSON list (the legacy colon form included) and a list without a device ("no gpu found on
        node") raise :class:`WireFormatError` naming the annotation, so the engine keeps the node's previous GPUs.
        """
        raw = annotations(node).get(REGISTER_ANNOTATION)
        if raw is None:
            return []
        devices = decode_node_devices_json(raw, key=REGISTER_ANNOTATION)
        if not devices:
            raise wire_error(REGISTER_ANNOTATION, "no gpu found on node")
        return devices

    def hami_node_health(self, node: Mapping[str, Any], devices: Sequence[DeviceInfo],
                         state: MutableMapping[str, Any]) -> HealthReport:
        """HAMi ``CheckHealth``: healthy iff ``status.capacity[amd.com/gpu]`` is a whole number above 0
        (``(true, true)``), else ``(false, false)``.

        Unhealthy, HAMi's scheduler runs ``NodeCleanUp`` (delete ``hami.io/node-amd-register``) only for a node
        whose AMD GPUs it had cached, i.e. one this hook last found healthy: ``state`` remembers those node names.
        A node without AMD GPUs has nothing to be unhealthy about (as the core's generic rule treats it).
        """
        name = metadata(node).get("name", "")
        if not devices:
            state.pop(name, None)
            return HealthReport(True, False)
        count_name = self.resource_names.count
        raw = node_capacity(node, count_name)
        if (as_int64(raw) or 0) > 0:
            state[name] = True
            return HealthReport(True, True)
        cleanup = {REGISTER_ANNOTATION: None} if state.pop(name, False) else {}
        return HealthReport(False, False, cleanup, reason=f"status.capacity[{count_name}] is {raw!r}")

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission``: the container uses AMD GPUs when its limits name the count, the memory or the
        core resource (requests alone do not count). With the count present, a core limit that is not an integer
        percentage in 1..100 fails the review (:class:`AdmissionFailed`, HAMi's errored response). Nothing changes.
        """
        names = self.resource_names
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.count in limits:
            if names.cores in limits:
                percent = as_int64(limits[names.cores])
                if percent is None or not 1 <= percent <= MAX_CORE_PERCENT:
                    raise AdmissionFailed(f"container {container.get('name', '')}: {names.cores} must be an "
                                          "integer percentage between 1 and 100")
            return Mutation(True)
        return Mutation(any(name and name in limits for name in (names.memory, names.cores)))

    # ----------------------------------------------------------------------------------- requests
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        """HAMi ``GenerateResourceRequests``, from limits only: the count (an integer in 1..MaxInt32), the memory in
        MiB (an integer in 0..MaxInt32; 0 when absent) and the core percentage (an integer in 1..100; 100 when
        absent). Any value out of its range, or not an integer, drops the whole request. ``MemPercentagereq`` is 0.
        """
        names = self.resource_names
        nums = as_int64(resource(container, names.count, limits_only=True))
        if nums is None or not 1 <= nums <= INT32_MAX:
            return None
        mem_raw = resource(container, names.memory, limits_only=True)
        mem = 0 if mem_raw is None else as_int64(mem_raw)
        if mem is None or not 0 <= mem <= INT32_MAX:
            return None
        cores_raw = resource(container, names.cores, limits_only=True)
        cores = MAX_CORE_PERCENT if cores_raw is None else as_int64(cores_raw)
        if cores is None or not 1 <= cores <= MAX_CORE_PERCENT:
            return None
        return DeviceRequest(self.name, nums, mem, 0, cores)

    # ----------------------------------------------------------------------------------- fit
    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        """:func:`hami_amd.fit.fit` on every candidate node with the pod's type and UUID lists and the ``mutex``
        GPU policy; HAMi's AMD fit reads no quota, NUMA or topology."""
        annos, mutex = annotations(pod), policy.has("mutex")
        return [fit.fit(c.devices, request, annos, self, mutex) for c in candidates]

    # ----------------------------------------------------------------------------------- node side
    def hami_allocate(self, pod: Mapping[str, Any], container_index: int,
                      devices: Sequence[ContainerDevice]) -> ContainerAllocation:
        """``Allocate`` for one container (HAMi ``docs/develop/amd-vgpu.md`` §4.2): see :mod:`hami_amd.allocate`."""
        return allocate.allocate(pod, devices)

    # ----------------------------------------------------------------------------------- DRA
    def hami_dra_devices(self, devices: Sequence[DeviceInfo]) -> list[DraDevice]:
        """The standard description in AMD's units: ``cores`` is a percentage of the card's compute units (value
        100, as ``amd.com/gpucores``; a claim naming none takes the whole card's CUs, as HAMi's AMD request does
        without a core percentage), the CU count is the ``computeUnits`` attribute, and a claim naming no memory
        takes the whole card's memory (the standard default, HAMi's AMD rule). A card with no CUs registered gets
        no ``cores`` capacity (HAMi cannot book a percentage of it)."""
        out = []
        for dev, info in zip(standard_dra_devices(self, devices), sorted(devices, key=lambda d: (d.index, d.id)),
                             strict=True):
            capacity = dict(dev.capacity)
            if info.devcore > 0:
                capacity[CAP_CORES] = DraCapacity(MAX_CORE_PERCENT, default=MAX_CORE_PERCENT, minimum=1)
            else:
                capacity.pop(CAP_CORES, None)
            out.append(DraDevice(backend=dev.backend, index=dev.index, uuid=dev.uuid, type=dev.type, numa=dev.numa,
                                 mode=dev.mode, shared=dev.shared, healthy=dev.healthy, capacity=capacity,
                                 attributes={ATTR_COMPUTE_UNITS: info.devcore}))
        return out
