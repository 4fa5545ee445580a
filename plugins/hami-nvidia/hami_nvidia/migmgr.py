"""HAMi dynamic MIG on the node: GPU and compute instances made to the scheduler's order (spec node.md §2.12 b).

The scheduler picks a MIG profile and a placement per device and writes them to the pod annotation
``hami.io/vgpu-mig-allocations``; Allocate asks :meth:`MigManager.ensure` for exactly that instance. The manager
owns the GPU instances (GI) and compute instances (CI) it created or adopted, keyed by
``(gpu UUID, profile, placement)``, and destroys the ones no live pod references any more (:meth:`reconcile`).

Safety rules:

* Startup (once, only if every GPU's name matches a ``migProfileAllowlist`` entry): a GPU that a live pod's
  annotation names, or that runs processes (on the GPU or on its MIG devices), is left alone. Every idle GPU gets
  MIG mode on (a change still pending, i.e. a GPU reset needed, is an error) and all its GI/CI destroyed. The
  realised entries of live pods are then adopted. If the pod list fails every GPU counts as in use.
* Reconcile is fail-closed: when the pod list fails, or any live pod's annotation cannot be decoded, nothing
  is destroyed. An instance tracked after the pod list was taken is never destroyed by that pass (the list
  may predate the pod that asked for it).
* :meth:`ensure` destroys what it created itself when a later step fails; the caller rolls back the
  instances of a whole Allocate call with :meth:`destroy` if it fails after ``ensure`` returned.

Profile names map to NVML by their slice prefix (``1g.10gb`` → ``NVML_GPU_INSTANCE_PROFILE_1_SLICE``, the CI
uses ``NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE`` with the shared engine profile), as HAMi does. All NVML calls go
through the ``pynvml`` module given (tests pass a fake driver); every public method holds one lock.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.wire import keys
from hami_core.wire.mig import MigAllocation, decode_mig_allocations

log = logging.getLogger("hami.nvidia.mig")

#: Slice prefixes HAMi maps to NVML's ``*_<N>_SLICE`` profiles.
SLICES = (1, 2, 3, 4, 6, 7, 8)
TERMINAL_PHASES = ("Succeeded", "Failed")


class MigError(Exception):
    """A MIG instance cannot be made, found or destroyed; the message names the GPU, profile and placement."""


def profile_slices(profile: str) -> int:
    """``"3g.20gb"`` → 3; raises :class:`MigError` for a name without a known ``<N>g`` prefix."""
    head = profile.partition(".")[0]
    try:
        slices = int(head[:-1]) if head.endswith("g") else -1
    except ValueError:
        slices = -1
    if slices not in SLICES:
        raise MigError(f"MIG profile {profile!r} has no known <N>g prefix ({', '.join(f'{n}g' for n in SLICES)})")
    return slices


@dataclass(frozen=True, slots=True)
class InstanceKey:
    """What the scheduler asks for: one profile at one placement on one GPU."""

    gpu_uuid: str
    profile: str
    start: int
    size: int

    @classmethod
    def of(cls, a: MigAllocation) -> InstanceKey:
        return cls(a.gpu_uuid, a.profile, a.placement.start, a.placement.size)

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}+{self.size} on {self.gpu_uuid}"


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A realised instance: its GI and CI ids and the MIG device UUID a container is given."""

    key: InstanceKey
    gpu_instance_id: int
    compute_instance_id: int
    mig_uuid: str


def live_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods that still hold their devices: not being deleted, not Succeeded or Failed."""
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES]


def pod_allocations(pod: Mapping[str, Any]) -> tuple[MigAllocation, ...]:
    """The pod's ``hami.io/vgpu-mig-allocations`` entries; a bad value raises ``WireFormatError``."""
    meta = pod.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(keys.VGPU_MIG_ALLOCATIONS, "")
    where = f"pod {meta.get('namespace') or 'default'}/{meta.get('name') or ''} annotation"
    return decode_mig_allocations(raw, key=f"{where} {keys.VGPU_MIG_ALLOCATIONS}")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class MigManager:
    """The GI/CI instances of one node's MIG GPUs (see the module docstring)."""

    def __init__(self, nvml: Any, gpus: Sequence[tuple[str, str]], list_pods: Callable[[], list[dict[str, Any]]],
                 *, allowlisted: Callable[[str], bool], other_models: Sequence[str] = ()) -> None:
        """``gpus``: ``(uuid, model)`` of the node's MIG-capable GPUs; ``other_models``: the models of its other
        GPUs (startup needs every model allowlisted); ``list_pods``: this node's pods (raises on API errors);
        ``allowlisted(model)``: whether a model has a ``migProfileAllowlist`` entry."""
        self.nvml = nvml
        self.gpus = list(gpus)
        self.other_models = list(other_models)
        self.list_pods = list_pods
        self.allowlisted = allowlisted
        self.error = getattr(nvml, "NVMLError", Exception)
        self._lock = threading.RLock()
        self._tracked: dict[InstanceKey, tuple[MigInstance, int]] = {}  # key -> (instance, sequence number)
        self._seq = 0
        self._started = False
        self._closed = False

    # ------------------------------------------------------------------------------------------ state
    @property
    def instances(self) -> dict[InstanceKey, MigInstance]:
        with self._lock:
            return {k: v for k, (v, _) in self._tracked.items()}

    def _track(self, inst: MigInstance) -> None:
        self._seq += 1
        self._tracked[inst.key] = (inst, self._seq)

    def _handle(self, uuid: str) -> Any:
        try:
            return self.nvml.nvmlDeviceGetHandleByUUID(uuid)
        except self.error as exc:
            raise MigError(f"GPU {uuid}: not found by NVML: {exc}") from None

    # ---------------------------------------------------------------------------------------- startup
    def start(self) -> None:
        """Initialise NVML and run the startup pass once (later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self.nvml.nvmlInit()
            self._started = True
            self._startup()

    def close(self) -> None:
        """Balance ``nvmlInit``; instances are left as they are (pods keep running across plugin restarts)."""
        with self._lock:
            if self._started and not self._closed:
                self._closed = True
                try:
                    self.nvml.nvmlShutdown()
                except self.error as exc:
                    log.warning("nvmlShutdown failed: %s", exc)

    def _startup(self) -> None:
        unlisted = [m for m in [model for _, model in self.gpus] + self.other_models if not self.allowlisted(m)]
        if unlisted:
            log.warning("dynamic MIG startup skipped: GPU model(s) %s match no migProfileAllowlist entry; GPU and "
                        "compute instances are left as they are", ", ".join(sorted(set(unlisted))))
            return
        try:
            pods = live_pods(self.list_pods())
            allocations = [a for p in pods for a in pod_allocations(p)]
        except Exception as exc:
            log.error("dynamic MIG startup: cannot read the node's pods (%s); every GPU counts as in use", exc)
            return
        named = {a.gpu_uuid for a in allocations}
        for uuid, _model in self.gpus:
            if uuid in named:
                log.info("GPU %s: in use by a live pod's MIG allocation; left alone", uuid)
                continue
            try:
                handle = self._handle(uuid)
                if self._busy(handle):
                    log.info("GPU %s: processes running; left alone", uuid)
                    continue
                self._enable_mig(uuid, handle)
                destroyed = self._destroy_all(handle)
                log.info("GPU %s: MIG mode on, %d stale instance(s) destroyed", uuid, destroyed)
            except (MigError, self.error) as exc:
                log.error("GPU %s: dynamic MIG startup failed: %s", uuid, exc)
        for a in allocations:
            if a.realized and a.mig_uuid and a.gpu_instance_id is not None and a.compute_instance_id is not None:
                key = InstanceKey.of(a)
                self._track(MigInstance(key, a.gpu_instance_id, a.compute_instance_id, a.mig_uuid))
                log.info("adopted MIG instance %s (GI %d, CI %d, %s)", key, a.gpu_instance_id,
                         a.compute_instance_id, a.mig_uuid)

    def _busy(self, handle: Any) -> bool:
        """Compute or graphics processes on the GPU or on any of its MIG devices."""
        nv = self.nvml
        handles = [handle]
        try:
            for i in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))):
                try:
                    handles.append(nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i))
                except self.error:
                    continue  # no MIG device at this index
        except self.error:
            pass  # MIG not supported or not enabled: only the GPU itself
        for h in handles:
            if nv.nvmlDeviceGetComputeRunningProcesses(h) or nv.nvmlDeviceGetGraphicsRunningProcesses(h):
                return True
        return False

    def _enable_mig(self, uuid: str, handle: Any) -> None:
        nv = self.nvml
        enable = nv.NVML_DEVICE_MIG_ENABLE
        current, pending = nv.nvmlDeviceGetMigMode(handle)
        if current != enable:
            nv.nvmlDeviceSetMigMode(handle, enable)
            current, pending = nv.nvmlDeviceGetMigMode(handle)
        if current != enable:
            raise MigError(f"GPU {uuid}: MIG mode is pending-enable (current {current}, pending {pending}); "
                           "the GPU needs a reset")

    def _gpu_instances(self, handle: Any) -> list[Any]:
        nv = self.nvml
        return self._instances(int(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 10)),
                               lambda index: nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, index),
                               nv.c_nvmlGpuInstance_t,
                               lambda profile, array, count: nv.nvmlDeviceGetGpuInstances(
                                   handle, profile, array, count))

    def _compute_instances(self, gi: Any) -> list[Any]:
        nv = self.nvml
        return self._instances(int(getattr(nv, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 8)),
                               lambda index: nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                                   gi, index, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED),
                               nv.c_nvmlComputeInstance_t,
                               lambda profile, array, count: nv.nvmlGpuInstanceGetComputeInstances(
                                   gi, profile, array, count))

    def _instances(self, profiles: int, profile_info: Callable[[int], Any], handle_type: Any,
                   fetch: Callable[[int, Any, Any], Any]) -> list[Any]:
        """Every instance of every profile index below ``profiles`` (GPU or compute instances: NVML lists them the
        same way); a profile the card does not have raises and is skipped."""
        out: list[Any] = []
        for index in range(profiles):
            try:
                info = profile_info(index)
            except self.error:
                continue
            array = (handle_type * max(int(info.instanceCount), 1))()
            count = ctypes.c_uint(0)
            fetch(info.id, array, ctypes.byref(count))
            out.extend(array[k] for k in range(count.value))
        return out

    def _destroy_all(self, handle: Any) -> int:
        nv = self.nvml
        gis = self._gpu_instances(handle)
        for gi in gis:
            for ci in self._compute_instances(gi):
                nv.nvmlComputeInstanceDestroy(ci)
            nv.nvmlGpuInstanceDestroy(gi)
        return len(gis)

    # ----------------------------------------------------------------------------------------- ensure
    def ensure(self, key: InstanceKey) -> tuple[MigInstance, bool]:
        """The instance for ``key``: the tracked one, else a new GI at that placement with its CI.

        Returns ``(instance, created)``. A placement the GPU does not offer for the profile, or any NVML
        failure, raises :class:`MigError`; a GI made before the failure is destroyed first.
        """
        with self._lock:
            self.start()
            tracked = self._tracked.get(key)
            if tracked is not None:
                return tracked[0], False
            inst = self._create(key)
            self._track(inst)
            log.info("created MIG instance %s: GI %d, CI %d, %s", key, inst.gpu_instance_id,
                     inst.compute_instance_id, inst.mig_uuid)
            return inst, True

    def _create(self, key: InstanceKey) -> MigInstance:
        nv = self.nvml
        slices = profile_slices(key.profile)
        handle = self._handle(key.gpu_uuid)
        try:
            info = nv.nvmlDeviceGetGpuInstanceProfileInfo(
                handle, getattr(nv, f"NVML_GPU_INSTANCE_PROFILE_{slices}_SLICE"))
        except self.error as exc:
            raise MigError(f"{key}: the GPU has no {slices}-slice GPU-instance profile: {exc}") from None
        possible = self._placements(handle, info.id)
        if (key.start, key.size) not in possible:
            raise MigError(f"{key}: placement not among the possible placements "
                           f"{', '.join(f'{s}+{n}' for s, n in possible) or 'none'}")
        placement = nv.c_nvmlGpuInstancePlacement_t(key.start, key.size)
        try:
            gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(handle, info.id, ctypes.byref(placement))
        except self.error as exc:
            raise MigError(f"{key}: cannot create the GPU instance: {exc}") from None
        try:
            gi_id = int(nv.nvmlGpuInstanceGetInfo(gi).id)
            ci_info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, getattr(nv, f"NVML_COMPUTE_INSTANCE_PROFILE_{slices}_SLICE"),
                nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
            ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
        except self.error as exc:
            self._quietly(lambda: nv.nvmlGpuInstanceDestroy(gi), f"{key}: destroying the new GPU instance")
            raise MigError(f"{key}: cannot create the compute instance: {exc}") from None
        try:
            ci_id = int(nv.nvmlComputeInstanceGetInfo(ci).id)
            mig_uuid = self._mig_uuid(handle, gi_id, ci_id)
        except (self.error, MigError) as exc:
            self._quietly(lambda: nv.nvmlComputeInstanceDestroy(ci), f"{key}: destroying the new compute instance")
            self._quietly(lambda: nv.nvmlGpuInstanceDestroy(gi), f"{key}: destroying the new GPU instance")
            raise MigError(f"{key}: cannot find the new MIG device: {exc}") from None
        return MigInstance(key, gi_id, ci_id, mig_uuid)

    def _placements(self, handle: Any, profile_id: int) -> list[tuple[int, int]]:
        nv = self.nvml
        count = ctypes.c_uint(0)
        try:
            nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
            array = (nv.c_nvmlGpuInstancePlacement_t * count.value)()
            nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
        except self.error as exc:
            raise MigError(f"GPU-instance profile {profile_id}: possible placements unavailable: {exc}") from None
        return [(int(array[k].start), int(array[k].size)) for k in range(count.value)]

    def _mig_uuid(self, handle: Any, gi_id: int, ci_id: int) -> str:
        """Scan the GPU's MIG device handles for the one with these GI and CI ids."""
        nv = self.nvml
        for i in range(int(nv.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except self.error:
                continue
            ids = int(nv.nvmlDeviceGetGpuInstanceId(mig)), int(nv.nvmlDeviceGetComputeInstanceId(mig))
            if ids == (gi_id, ci_id):
                return _text(nv.nvmlDeviceGetUUID(mig))
        raise MigError(f"no MIG device with GPU instance {gi_id} and compute instance {ci_id}")

    def _quietly(self, call: Callable[[], Any], what: str) -> None:
        try:
            call()
        except self.error as exc:
            log.error("%s failed: %s", what, exc)

    # ---------------------------------------------------------------------------------------- destroy
    def destroy(self, inst: MigInstance) -> None:
        """Destroy ``inst``'s CI and GI and stop tracking it; an instance already gone counts as destroyed."""
        with self._lock:
            nv = self.nvml
            handle = self._handle(inst.key.gpu_uuid)
            not_found = getattr(nv, "NVMLError_NotFound", ())
            try:
                gi = nv.nvmlDeviceGetGpuInstanceById(handle, inst.gpu_instance_id)
            except not_found:
                gi = None
            except self.error as exc:
                raise MigError(f"{inst.key}: cannot look up GPU instance {inst.gpu_instance_id}: {exc}") from None
            try:
                if gi is not None:
                    try:
                        ci = nv.nvmlGpuInstanceGetComputeInstanceById(gi, inst.compute_instance_id)
                    except not_found:
                        ci = None
                    if ci is not None:
                        nv.nvmlComputeInstanceDestroy(ci)
                    nv.nvmlGpuInstanceDestroy(gi)
            except self.error as exc:
                raise MigError(f"{inst.key}: cannot destroy GI {inst.gpu_instance_id}/CI "
                               f"{inst.compute_instance_id}: {exc}") from None
            if self._tracked.get(inst.key, (None, 0))[0] == inst:
                del self._tracked[inst.key]
            log.info("destroyed MIG instance %s (GI %d, CI %d, %s)", inst.key, inst.gpu_instance_id,
                     inst.compute_instance_id, inst.mig_uuid)

    def reconcile(self) -> list[MigInstance]:
        """Destroy every tracked instance no live pod references; returns them. Fail-closed (see module doc)."""
        with self._lock:
            if not self._started:
                return []
            horizon = self._seq  # instances tracked after the list below was taken are never candidates
        try:
            referenced = {InstanceKey.of(a) for p in live_pods(self.list_pods()) for a in pod_allocations(p)}
        except Exception as exc:
            log.warning("MIG reconcile skipped, nothing destroyed: %s", exc)
            return []
        destroyed = []
        with self._lock:
            stale = [inst for key, (inst, seq) in self._tracked.items() if seq <= horizon and key not in referenced]
            for inst in stale:
                try:
                    self.destroy(inst)
                    destroyed.append(inst)
                except MigError as exc:
                    log.error("MIG reconcile: %s", exc)
        return destroyed


class Reconciler:
    """Runs :meth:`MigManager.reconcile` every ``interval_s`` on a daemon thread; ``stop()`` joins it and
    closes the manager. Shaped as a ``HealthWatch`` so the device plugin stops it with the plugin."""

    def __init__(self, manager: MigManager, interval_s: float = 5.0) -> None:
        self.manager = manager
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Reconciler:
        self._thread = threading.Thread(target=self._run, name="hami-nvidia-mig-reconcile", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self.manager.start()
        except Exception as exc:  # NVML missing or broken: Allocate reports it per pod
            log.error("dynamic MIG startup failed: %s", exc)
        while not self._stop.wait(self.interval_s):
            try:
                self.manager.reconcile()
            except Exception as exc:  # never let one bad pass end the loop
                log.error("MIG reconcile pass failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30.0)
        self.manager.close()
