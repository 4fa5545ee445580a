"""HAMi's NVIDIA backend (vendors.md Part B; scheduler.md §4.4, §6.2, §6.6, §6.8, §9.2; node.md §2).

:class:`NvidiaBackend` is a :class:`~hami_core.plugins.StandardBackend`. From the base, driven by its fields:
type/UUID selection on ``nvidia.com/use-gputype`` ... (A.8), the allocation codec on
``hami.io/vgpu-devices-to-allocate`` / ``-allocated`` (A.4) and the shared node lock ``hami.io/mutex.lock`` (A.6).
What NVIDIA does differently is overridden here: registration with topology pair scores, the handshake overlaid
with allocatable and registration tracking (B.2, B.8), admission defaults (B.4), its request rules (B.5), a fit
with ``nvidia.com/vgpu-mode``, ``hami.io/device-cordon``, NUMA binding, topology, ResourceQuota and dynamic MIG
(B.6, B.7), and ``hami.io/vgpu-mig-allocations`` (spec §3.5).

The node-side hooks (discovery, health watch, Allocate) import :mod:`hami_nvidia.node` inside the method, so a
scheduler that never calls them never loads NVML, gRPC or the MIG manager.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, ClassVar

from hami_core.plugins import (
    MEM_PERCENTAGE_UNSET,
    AdmissionFailed,
    ContainerAllocation,
    ContainerDevice,
    DeviceInfo,
    DevicePredicate,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    HealthWatch,
    MigProfile,
    Mutation,
    Placement,
    PodSingleDevice,
    QuotaView,
    ResourceNames,
    Selection,
    StandardBackend,
    allocatable_count,
    as_whole,
    generic_health,
    metadata,
    quota_predicate,
    resource,
    set_env,
    standard_allocation_annotations,
    standard_fit,
)
from hami_core.plugins.dra import CAP_MEMORY, CAP_SHARES, MIB, DraDevice

# not from hami_core.plugins: there the name ``annotations`` is the ``from __future__`` feature, not the helper
from hami_core.plugins.objects import annotations
from hami_core.plugins.standard import standard_dra_devices
from hami_core.wire import keys
from hami_core.wire.common import split_list, wire_error
from hami_core.wire.mig import (
    MIG_PLACEMENT_CUSTOM_INFO,
    MIG_PROFILE_CUSTOM_INFO,
    encode_mig_allocations,
    mig_allocations_from_devices,
)
from hami_core.wire.nodes import decode_node_devices, decode_pair_scores
from hami_core.wire.reasons import Reason
from hami_nvidia.config import NvidiaConfig

COMMON_WORD = "NVIDIA"
VENDOR = "nvidia"
#: ``DeviceInfo.mode`` of a GPU that HAMi partitions by dynamic MIG (per-node ``operatingmode: mig``).
MIG_MODE = "mig"
#: The mode a registration without one means (HAMi's device plugin before modes were registered).
DEFAULT_MODE = "hami-core"


def _has_mig(cand: FitCandidate) -> bool:
    """Whether the candidate offers a MIG-mode GPU, for a node view without the engine's summary (``mig``)."""
    return any(d.mode == MIG_MODE for d in cand.devices)


@dataclass(frozen=True, slots=True)
class NvidiaBackend(StandardBackend):
    """The NVIDIA backend (B.1-B.10); ``config`` is the validated ``nvidia:`` section."""

    #: HAMi's NVIDIA ``Fit`` checks the namespace's ResourceQuota (step 10, §11.2).
    enforce_quota: ClassVar[bool] = True
    # The override below is the base checklist outside MIG and cordon: the core may fit every other node at once
    # (a node with a MIG-mode GPU always goes through the override; so does one with a cordon annotation).
    vector_fit: ClassVar[bool | None] = True
    exact_fit_annotations: ClassVar[frozenset[str]] = frozenset({keys.DEVICE_CORDON})

    @classmethod
    def from_config(cls, cfg: NvidiaConfig) -> NvidiaBackend:
        """The backend for a validated ``nvidia:`` section."""
        return cls(name=COMMON_WORD, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.resource_count_name, memory=cfg.resource_memory_name,
                                                memory_percentage=cfg.resource_memory_percentage_name,
                                                cores=cfg.resource_core_name, priority=cfg.resource_priority_name,
                                                memory_factor=cfg.memory_factor),
                   register_annotation=keys.NODE_NVIDIA_REGISTER, handshake_annotation=keys.NODE_HANDSHAKE,
                   to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE,
                   allocated_annotation=keys.VGPU_DEVICES_ALLOCATED,
                   use_type_annotation=keys.NVIDIA_USE_GPUTYPE, nouse_type_annotation=keys.NVIDIA_NOUSE_GPUTYPE,
                   use_uuid_annotation=keys.NVIDIA_USE_GPUUUID, nouse_uuid_annotation=keys.NVIDIA_NOUSE_GPUUUID,
                   lock_annotation=keys.NODE_LOCK, standard_capacity=True, config=cfg)

    @property
    def settings(self) -> NvidiaConfig:
        """``config``, typed."""
        cfg: NvidiaConfig = self.config
        return cfg

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> list[DeviceInfo]:
        """Devices from ``hami.io/node-nvidia-register`` with topology pair scores attached.

        HAMi ≥ 2.8 writes JSON; the legacy colon/comma form of older device plugins is read too (HAMi
        itself rejects it, quirk §12.1.9). No annotation ⇒ no devices (a node without NVIDIA GPUs; after a
        registration the engine keeps the cached devices while the handshake is healthy). A blank value, or
        one listing no device (``[]``), is HAMi's ``GetNodeDevices`` error ("no gpu found on node"): it raises
        :class:`~hami_core.plugins.WireFormatError`, so the node keeps its cached devices (HAMi's scheduler
        skips the node's update on that error) instead of losing them while its device plugin restarts.
        """
        annos = annotations(node)
        key = self.register_annotation or keys.NODE_NVIDIA_REGISTER
        raw = annos.get(key)
        if raw is None:
            return []
        devices = decode_node_devices(raw, key=key)  # a blank value is malformed (WireFormatError), as in Go
        if not devices:
            raise wire_error(key, "no gpu found on node")
        scores_raw = annos.get(keys.NODE_NVIDIA_SCORE)
        if scores_raw and scores_raw.strip():
            scores = decode_pair_scores(scores_raw, key=keys.NODE_NVIDIA_SCORE)
            devices = [replace(d, pair_scores=scores[d.id]) if d.id in scores else d for d in devices]
        return devices

    def hami_node_health(self, node: Mapping[str, Any], now: float, state: MutableMapping[str, Any]) -> HealthReport:
        """The generic handshake rule overlaid with allocatable and registration tracking (Appendix B.2).

        ``state`` (the engine's per-backend scratch mapping) keeps, per node, the last allocatable count and
        register annotation; it stays the hook's argument rather than a field so that its lifetime is the
        engine's, exactly as before. Unlike the base, a node without NVIDIA devices is hand-shaken too (HAMi).
        """
        generic = generic_health(self, node, now)
        name = metadata(node).get("name", "")
        current = allocatable_count(node, self.resource_names.count)
        text = annotations(node).get(self.register_annotation or keys.NODE_NVIDIA_REGISTER)
        known = name in state
        reported, seen = state.get(name, (0, None))
        if current == 0 and reported == 0:
            state[name] = (0, text)
            if not generic.healthy and known and self.handshake_annotation:
                # NodeCleanUp of a node registered before deletes the handshake mark (spec §9.2 step 2, B.8).
                return replace(generic, annotations={**generic.annotations, self.handshake_annotation: None})
            return generic
        if current == 0:
            state[name] = (0, text)
            cleanup = {self.handshake_annotation: None} if self.handshake_annotation else {}
            return HealthReport(False, generic.need_update, cleanup,
                                reason=f"{self.resource_names.count} allocatable dropped from {reported} to 0")
        if current != reported:
            state[name] = (current, text)
            return HealthReport(True, True, generic.annotations)
        if text != seen:
            state[name] = (current, text)
            return HealthReport(generic.healthy, True, generic.annotations, generic.reason)
        return generic

    def hami_node_removed(self, node_name: str, state: MutableMapping[str, Any]) -> None:
        """HAMi ``NodeCleanUp``: forget the node's bookkeeping (idempotent)."""
        state.pop(node_name, None)

    # Quantities are read with as_whole, not as_int64: NVIDIA's rules never bounded a value by int64 (a count,
    # cores or percentage beyond it is taken as written), and the migration kept the behaviour byte for byte.

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission`` for NVIDIA (spec §4.4): whether the container uses NVIDIA.

        Idempotent: env vars are set, not appended twice.
        """
        cfg = self.settings
        names = self.resource_names
        cname = container.get("name", "<unnamed>")
        raw_pct = resource(container, names.memory_percentage)
        if raw_pct is not None:
            pct = as_whole(raw_pct)
            if pct is None or not 0 <= pct <= 100:
                raise AdmissionFailed(f"container {cname}: {names.memory_percentage}={raw_pct!r} "
                                      "must be an integer between 0 and 100")
        resources = container.setdefault("resources", {})
        limits = resources.get("limits")
        if limits is None:
            limits = resources["limits"] = {}
        priority = limits.get(names.priority) if names.priority else None
        if priority is not None:
            value = as_whole(priority)
            if value is None:
                raise AdmissionFailed(f"container {cname}: {names.priority}={priority!r} must be an integer")
            set_env(container, "CUDA_TASK_PRIORITY", str(value))
        if cfg.gpu_core_policy not in ("", "default"):
            # HAMi adds this to every container it processes, GPU or not (quirk §12.1.6).
            set_env(container, "GPU_CORE_UTILIZATION_POLICY", cfg.gpu_core_policy)
        has = names.count in limits
        if not has and cfg.default_gpu_num > 0 and any(
                n and n in limits for n in (names.cores, names.memory, names.memory_percentage)):
            limits[names.count] = str(cfg.default_gpu_num)
            has = True
        count_present = names.count in limits or names.count in (resources.get("requests") or {})
        if count_present and names.cores and resource(container, names.cores) is None:
            pct_value = resource(container, names.memory_percentage)
            exclusive = (as_whole(pct_value) == 100) if pct_value is not None else (
                not names.memory or resource(container, names.memory) is None)
            if exclusive:
                limits[names.cores] = "100"
                has = True
        if not limits:
            del resources["limits"]
        if not resources:
            del container["resources"]
        spec = pod.setdefault("spec", {})
        if has and not spec.get("runtimeClassName") and cfg.runtime_class_name:
            spec["runtimeClassName"] = cfg.runtime_class_name
        if not has and cfg.overwrite_env:
            set_env(container, "NVIDIA_VISIBLE_DEVICES", "none")
        return Mutation(has)

    # ----------------------------------------------------------------------------------- requests (§6.2)
    def request_count(self, container: Mapping[str, Any]) -> int | None:
        """Any positive integer count (NVIDIA's rule sets no MaxInt32 bound, unlike the base)."""
        nums = as_whole(resource(container, self.resource_names.count))
        return nums if nums is not None and nums > 0 else None

    def request_memory(self, container: Mapping[str, Any]) -> int | None:
        """The base rule (x ``memoryFactor``, dropped outside 0..MaxInt32); ``defaultMemory`` when the container
        asks for neither memory nor a usable percentage."""
        memreq = StandardBackend.request_memory(self, container)
        if memreq == 0 and self._percentage(container) is None:
            return self.settings.default_memory
        return memreq

    def request_percentage(self, container: Mapping[str, Any], memreq: int) -> int:
        """The given percentage (clamped to 100), else 100 without memory, else unset."""
        pct = self._percentage(container)
        if pct is not None:
            return pct
        return 100 if memreq == 0 else MEM_PERCENTAGE_UNSET

    def request_cores(self, container: Mapping[str, Any]) -> int:
        """``defaultCores`` when absent or not an integer; a negative quantity books 0 (never drops the request), or
        itself under ``negativeCores: keep`` (HAMi's behaviour)."""
        cores = as_whole(resource(container, self.resource_names.cores))
        if cores is None:
            return self.settings.default_cores
        if self.settings.negative_cores == "keep":
            return (cores + 2**31) % 2**32 - 2**31  # HAMi's int32(corenums): a value beyond int32 wraps as in Go
        return max(cores, 0)

    def _percentage(self, container: Mapping[str, Any]) -> int | None:
        """The memory percentage the container gives, clamped to 100; ``None`` when absent or not positive."""
        value = as_whole(resource(container, self.resource_names.memory_percentage))
        return min(value, 100) if value is not None and value > 0 else None

    # ----------------------------------------------------------------------------------- fit (§6.6-§6.8)
    def type_predicate(self, pod: Mapping[str, Any], request: DeviceRequest, sel: Selection) -> DevicePredicate | None:
        """The base type step, and ``nvidia.com/vgpu-mode``: the device's mode must be part of its value."""
        mode = annotations(pod).get(keys.NVIDIA_VGPU_MODE)
        if mode is None or request.backend != self.name:
            # The type check is step 3, after health and cordon (spec §6.6), so it is a predicate, not a shortcut.
            return StandardBackend.type_predicate(self, pod, request, sel)
        return lambda dev: sel.type_ok(dev.type) and dev.mode in mode

    def fit_options(self, pod: Mapping[str, Any], request: DeviceRequest, policy: GpuPolicy) -> dict[str, Any]:
        """``mutex``, ``topology-aware`` and NUMA binding from the pod's GPU policy."""
        return {"numa_bind": policy.numa_bind, "mutex": policy.has("mutex"), "topology": policy.has("topology-aware")}

    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> list[FitResult]:
        """HAMi's NVIDIA ``Fit`` (spec §6.6) on every candidate node: the base fit plus, per node, the cordoned
        devices (``hami.io/device-cordon``) and dynamic MIG.

        On a node with MIG-mode GPUs the fit also places MIG instances (spec §6.8): :func:`mig_rule` is step 15
        (refused with ``CardMigTopologyInfeasible``), a MIG GPU is examined again after each accepted instance, and
        :func:`place_mig` gives the chosen MIG devices their profile and placement. Other nodes pay for none of it.

        ``quota``: the pod's namespace ResourceQuota; a device that would take the pod's hypothetical usage past a
        limit is refused with ``ResourceQuotaNotFit`` (step 10, before the memory and core checks; §11.2).
        """
        sel = self.selection(pod)
        type_ok = self.type_predicate(pod, request, sel)
        uuid_ok = (lambda dev: sel.uuid_ok(dev.id)) if sel.filters_uuid else None
        options = self.fit_options(pod, request, policy)
        out: list[FitResult] = []
        for cand in candidates:
            cordon_raw = cand.node.annotations.get(keys.DEVICE_CORDON)
            cordoned = frozenset(split_list(cordon_raw)) if cordon_raw else frozenset()
            summary = getattr(cand.node, "mig", None)  # the engine's node state: backends with a MIG-mode GPU
            mig = (self.name in summary) if summary is not None else _has_mig(cand)
            result = standard_fit(cand.devices, request, type_ok=type_ok, uuid_ok=uuid_ok, cordoned=cordoned,
                                  quota=quota_predicate(quota if self.enforce_quota else None, self, cand),
                                  custom_rule=mig_rule if mig else None, custom_reason=Reason.CardMigTopologyInfeasible,
                                  revisit=is_mig if mig else None, **options)
            out.append(place_mig(result, cand.devices) if mig and result.ok else result)
        return out

    # ----------------------------------------------------------------------------------- reserve / bind
    def hami_allocation_annotations(self, devices: PodSingleDevice) -> dict[str, str] | None:
        """The base's to-allocate/allocated pair, then ``hami.io/vgpu-mig-allocations`` when MIG devices were
        chosen (spec §3.5); the key order is the one the engine wrote when the two came from separate plugins."""
        out = dict(standard_allocation_annotations(self, devices) or {})
        allocations = mig_allocations_from_devices(devices)
        if allocations:
            out[keys.VGPU_MIG_ALLOCATIONS] = encode_mig_allocations(allocations)
        return out or None

    # ----------------------------------------------------------------------------------- node side (node.md §2)
    def hami_discover_devices(self) -> list[DeviceInfo]:
        """hami-core/mps: every GPU with deviceSplitCount replicas; mig (per-node config.json): the GPUs with
        allowlisted MIG profiles, each registered with its profiles (spec node.md §2.5, §2.12 b)."""
        from hami_nvidia import node

        return node.discover_devices(self.settings)

    def hami_watch_health(self, devices: Sequence[DeviceInfo],
                          on_health: Callable[[str, bool], None]) -> HealthWatch | None:
        """NVML XID events (spec node.md §2.11); none with DP_DISABLE_HEALTHCHECKS=all/xids or fake GPUs.

        In ``operatingmode: mig`` the watch also runs the MIG startup pass and reconciles every 5 s (§2.12 b);
        its ``stop()`` ends both threads.
        """
        from hami_nvidia import node

        return node.start_watch(self.settings, devices, on_health)

    def hami_allocate(self, pod: Mapping[str, Any], container_index: int,
                      devices: Sequence[ContainerDevice]) -> ContainerAllocation:
        """``Allocate`` for one container: HAMi-core env vars and mounts, or the MIG instances in mig mode."""
        from hami_nvidia import node

        return node.allocate(self.settings, pod, container_index, devices)


    # ----------------------------------------------------------------------------------- DRA
    def hami_dra_devices(self, devices: Sequence[DeviceInfo]) -> list[DraDevice]:
        """The standard description with NVIDIA's rules: every device says its ``mode`` (``hami-core``, ``mps`` or
        ``mig``; a registration without one is ``hami-core``), a claim naming no cores consumes ``defaultCores``
        and one naming no memory ``defaultMemory`` MiB when that is set (else the whole card, as HAMi books a
        request without memory), and a MIG-mode card is published whole-card-only (not shared, no ``shares``): its
        share is a MIG instance that the kubelet plugin must create, which DRA's consumable capacity cannot
        describe, so a claim takes the card."""
        cfg = self.settings
        out = []
        for dev in standard_dra_devices(self, devices, default_cores=cfg.default_cores):
            mode = dev.mode or DEFAULT_MODE
            capacity = dict(dev.capacity)
            memory = capacity.get(CAP_MEMORY)
            if memory is not None and cfg.default_memory > 0:
                capacity[CAP_MEMORY] = replace(memory, default=min(cfg.default_memory * MIB, memory.value))
            if mode == MIG_MODE:
                capacity.pop(CAP_SHARES, None)
                out.append(replace(dev, mode=mode, shared=False, capacity=capacity))
            else:
                out.append(replace(dev, mode=mode, capacity=capacity))
        return out

# ------------------------------------------------------------------------------------------ MIG (spec §6.8)
@lru_cache(maxsize=256)
def _profiles_by_memory(profiles: tuple[MigProfile, ...]) -> tuple[tuple[MigProfile, tuple[Placement, ...]], ...]:
    """A GPU's profiles by (memoryMB, sliceCount), each with its placements in the order they are tried: ``1g.*``
    and ``3g.*`` from the highest start, the others from the lowest (HAMi ``mig_topology.go``; both sorts are
    stable). Placements of size 0 are left out: they name no slice, so they can be neither realized nor booked."""
    out = []
    for profile in sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)):
        high = profile.name.startswith(("1g.", "3g."))
        placements = sorted((p for p in profile.placements if p.size > 0), key=lambda p: p.start, reverse=high)
        out.append((profile, tuple(placements)))
    return tuple(out)


def select_mig(profiles: tuple[MigProfile, ...], occupied: Sequence[Placement],
               memory: int) -> tuple[MigProfile, Placement] | None:
    """HAMi ``selectMigCandidate``: the smallest profile with ``memoryMB >= memory`` that has a placement overlapping
    none of ``occupied``, and that placement; ``None`` when there is none."""
    for profile, placements in _profiles_by_memory(profiles):
        if profile.memory_mb < memory:
            continue
        for placement in placements:
            if not any(placement.overlaps(o) for o in occupied):
                return profile, placement
    return None


def is_mig(dev: DeviceUsage) -> bool:
    """A MIG-mode GPU: the fit examines it again after accepting it (several instances from one GPU)."""
    return dev.mode == MIG_MODE


def mig_rule(dev: DeviceUsage, mem: int, cores: int, chosen: Sequence[ContainerDevice]) -> bool:
    """HAMi's NVIDIA ``CustomFilterRule`` (spec §6.6 step 15): on a MIG GPU, the instances already chosen for this
    container on it (replayed in order) and one more for ``mem`` must all find free placements."""
    if dev.mode != MIG_MODE:
        return True
    profiles = dev.info.mig_profiles
    occupied = [inst.placement for inst in dev.mig_in_use]
    for earlier in chosen:
        if earlier.uuid == dev.id:
            got = select_mig(profiles, occupied, earlier.usedmem)
            if got is None:
                return False
            occupied.append(got[1])
    return select_mig(profiles, occupied, mem) is not None


def place_mig(result: FitResult, devices: Sequence[DeviceUsage]) -> FitResult:
    """HAMi's NVIDIA ``AddResourceUsage`` for MIG GPUs: each chosen MIG device gets its profile and placement (the
    same rule, in order) and books the profile's ``memoryMB``/``core`` instead of the request's memory and cores;
    the profile and placement go in ``custom_info`` (they become ``hami.io/vgpu-mig-allocations``)."""
    by_id = {d.id: d for d in devices if d.mode == MIG_MODE}
    if not by_id:
        return result
    occupied: dict[str, list[Placement]] = {}
    out = []
    for chosen in result.devices:
        dev = by_id.get(chosen.uuid)
        if dev is None:
            out.append(chosen)
            continue
        taken = occupied.setdefault(dev.id, [inst.placement for inst in dev.mig_in_use])
        got = select_mig(dev.info.mig_profiles, taken, chosen.usedmem)
        if got is None:  # the fit's rule held for this order, so only a topology re-pick can get here
            return FitResult.unschedulable(f"1/{len(devices)} {Reason.CardMigTopologyInfeasible}")
        profile, placement = got
        taken.append(placement)
        out.append(ContainerDevice(chosen.uuid, chosen.type, profile.memory_mb, profile.core, chosen.idx,
                                   custom_info={MIG_PROFILE_CUSTOM_INFO: profile.name,
                                                MIG_PLACEMENT_CUSTOM_INFO: placement}))
    return FitResult.success(out)
