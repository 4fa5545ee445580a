"""NVIDIA node side: what is registered and advertised, and what Allocate gives a container (spec node.md §2.4-§2.11).

Host layout (HOOK = ``$HOOK_PATH``, default ``/usr/local``; the DaemonSet mounts the host's ``/usr/local/vgpu``
at the same path in the plugin container, so paths created here are host paths):

* ``HOOK/vgpu/libvgpu.so`` (or ``libvgpu.so.<version>`` when present): HAMi-core, preloaded via
  ``HOOK/vgpu/ld.so.preload`` mounted at ``/etc/ld.so.preload`` unless the container sets
  ``CUDA_DISABLE_CONTROL=true``;
* ``HOOK/vgpu/containers/<podUID>_<container>``: the per-container cache dir, mounted over ``HOOK/vgpu``;
* ``/tmp/vgpulock``: HAMi-core's cross-process lock dir.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hami_core.plugins.types import (
    ContainerAllocation,
    ContainerDevice,
    DeviceInfo,
    HealthWatch,
    MigProfile,
    Mount,
    Placement,
)
from hami_core.wire.common import parse_go_bool
from hami_nvidia.config import MIG_STRATEGY_ENV, NodeConfig, NvidiaConfig
from hami_nvidia.detect import OVERRIDE_ENV, Gpu
from hami_nvidia.version import __version__

log = logging.getLogger("hami.nvidia.node")

DEFAULT_HOOK_PATH = "/usr/local"
VGPU_LOCK_DIR = "/tmp/vgpulock"
MODE = "hami-core"
#: XIDs caused by applications, never a reason to mark a GPU unhealthy (spec §2.11).
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
XID_CRITICAL_ERROR = 0x8
DOUBLE_BIT_ECC = 0x2
SINGLE_BIT_ECC = 0x1


def hook_path() -> str:
    return os.environ.get("HOOK_PATH") or DEFAULT_HOOK_PATH


def device_infos(cfg: NvidiaConfig, gpus: Iterable[Gpu], *, mode: str = MODE) -> list[DeviceInfo]:
    """Register/advertise view of discovered GPUs: count = split count, scaled memory, cores = 100 x scaling.

    ``mode`` is the node's ``operatingmode`` (``hami-core`` or ``mps``); mig mode is :func:`mig_device_infos`.
    """
    out = []
    for g in gpus:
        mem = g.memory_mib
        if cfg.device_memory_scaling != 1:
            mem = int(mem * cfg.device_memory_scaling)
        out.append(DeviceInfo(id=g.uuid, index=g.index, count=cfg.device_split_count, devmem=mem,
                              devcore=int(cfg.device_core_scaling * 100), type=g.model, numa=g.numa, mode=mode,
                              health=True, vendor="nvidia"))
    return out


def container_at(pod: Mapping[str, Any], index: int) -> Mapping[str, Any]:
    """The container at annotation position ``index`` (init containers first); ``{}`` if out of range."""
    spec = pod.get("spec") or {}
    ctrs = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    return ctrs[index] if 0 <= index < len(ctrs) else {}


def _control_disabled(container: Mapping[str, Any]) -> bool:
    for env in container.get("env") or []:
        if env.get("name") == "CUDA_DISABLE_CONTROL":
            try:
                return parse_go_bool(str(env.get("value", "")))
            except Exception:
                return False
    return False


def _run_as(pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(uid, gid) the container runs as, from its and the pod's securityContext (``None`` when not set)."""
    pod_sc = (pod.get("spec") or {}).get("securityContext") or {}
    ctr_sc = container.get("securityContext") or {}

    def pick(*values: Any) -> int | None:
        for v in values:
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                return v
        return None

    uid = pick(ctr_sc.get("runAsUser"), pod_sc.get("runAsUser"))
    gid = pick(ctr_sc.get("runAsGroup"), pod_sc.get("runAsGroup"), pod_sc.get("fsGroup"))
    return uid, gid


def _fresh_dir(path: Path, uid: int | None = None, gid: int | None = None) -> None:
    """Delete and re-create the container's cache dir; failures are logged.

    Only the container writes there. When its user (or group) is known the dir is owned by it with mode
    0700 (0770 for a group); otherwise 0777, as HAMi always does, since any user may run in the container.
    """
    try:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        mode = 0o777
        if uid is not None or gid is not None:
            try:
                os.chown(path, -1 if uid is None else uid, -1 if gid is None else gid)
                mode = 0o700 if gid is None else 0o770
            except OSError as exc:  # not root (tests, dev): stay usable for anyone
                log.warning("cannot give %s to %s:%s, leaving it open: %s", path, uid, gid, exc)
        os.chmod(path, mode)
    except OSError as exc:
        log.warning("cannot prepare %s: %s", path, exc)


def allocation(cfg: NvidiaConfig, pod: Mapping[str, Any], container_index: int,
               devices: Sequence[ContainerDevice], *, hook: str | None = None,
               lock_dir: str = VGPU_LOCK_DIR, cache_name: str | None = None) -> ContainerAllocation:
    """Env and mounts for one container (spec §2.8); creates the cache and lock dirs on the host."""
    h = (hook or hook_path()).rstrip("/") or "/"
    vgpu = f"{h}/vgpu"
    container = container_at(pod, container_index)
    uuids = list(dict.fromkeys(d.uuid for d in devices))
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}
    for i, d in enumerate(devices):
        env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{d.usedmem}m"
    env["CUDA_DEVICE_SM_LIMIT"] = str(devices[0].usedcores if devices else 0)
    env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{vgpu}/{cache_name or uuidlib.uuid4()}.cache"
    if cfg.device_memory_scaling > 1:
        env["CUDA_OVERSUBSCRIBE"] = "true"
    if cfg.lib_cuda_log_level is not None:
        env["LIBCUDA_LOG_LEVEL"] = str(cfg.lib_cuda_log_level)
    if cfg.disable_core_limit:
        env["GPU_CORE_UTILIZATION_POLICY"] = "disable"

    versioned = f"{vgpu}/libvgpu.so.{__version__}"
    meta = pod.get("metadata") or {}
    cache_dir = f"{vgpu}/containers/{meta.get('uid', '')}_{container.get('name', '')}"
    _fresh_dir(Path(cache_dir), *_run_as(pod, container))
    try:
        Path(lock_dir).mkdir(parents=True, exist_ok=True)
        os.chmod(lock_dir, 0o1777)  # shared by every container: sticky, so none can remove another's lock
    except OSError as exc:
        log.warning("cannot prepare %s: %s", lock_dir, exc)
    mounts = [
        Mount(f"{vgpu}/libvgpu.so", versioned if os.path.exists(versioned) else f"{vgpu}/libvgpu.so", True),
        Mount(vgpu, cache_dir, False),
        Mount("/tmp/vgpulock", lock_dir, False),
    ]
    if not _control_disabled(container):
        mounts.append(Mount("/etc/ld.so.preload", f"{vgpu}/ld.so.preload", True))
    if os.path.exists(f"{vgpu}/license"):
        mounts.append(Mount("/tmp/license", f"{vgpu}/license", True))
        mounts.append(Mount("/usr/bin/vgpuvalidator", f"{vgpu}/vgpuvalidator", True))
    return ContainerAllocation(env=env, mounts=tuple(mounts))


# ---------------------------------------------------------------------------------------------- health
def ignored_xids(environ: Mapping[str, str] | None = None) -> frozenset[int] | None:
    """XIDs to ignore, or ``None`` when XID health checks are disabled (``DP_DISABLE_HEALTHCHECKS``)."""
    environ = os.environ if environ is None else environ
    disabled = {s.strip().lower() for s in environ.get("DP_DISABLE_HEALTHCHECKS", "").split(",") if s.strip()}
    enabled = {int(s) for s in environ.get("DP_ENABLE_HEALTHCHECKS", "").split(",") if s.strip().isdigit()}
    if disabled & {"all", "xids"} and not enabled:
        return None
    ignored = set(IGNORED_XIDS) | {int(s) for s in disabled if s.isdigit()}
    return frozenset(ignored - enabled)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class XidHealthWatcher:
    """Watches NVML XID events and calls ``on_unhealthy(uuid)`` (spec node.md §2.11; no recovery).

    A critical XID not in ``ignored`` marks its GPU unhealthy; a failing event wait, or an event whose GPU
    cannot be named, marks every GPU unhealthy (as NVIDIA's plugin does). The event's GPU is matched by
    UUID, never by handle: pynvml handles are ctypes pointers, unhashable and compared by identity, and the
    event carries a new pointer object.
    """

    def __init__(self, nvml: Any, uuids: Sequence[str], on_unhealthy: Callable[[str], None], *,
                 ignored: frozenset[int] = IGNORED_XIDS, wait_ms: int = 5000) -> None:
        self.nvml = nvml
        self.uuids = list(uuids)
        self.on_unhealthy = on_unhealthy
        self.ignored = ignored
        self.wait_ms = wait_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _register(self) -> Any:
        """Create the event set and register every GPU's XID/ECC events on it; returns the event set."""
        nv = self.nvml
        error = getattr(nv, "NVMLError", Exception)
        events = nv.nvmlEventSetCreate()
        for uuid in self.uuids:
            try:
                handle = nv.nvmlDeviceGetHandleByUUID(uuid)
                mask = (XID_CRITICAL_ERROR | DOUBLE_BIT_ECC | SINGLE_BIT_ECC) & nv.nvmlDeviceGetSupportedEventTypes(
                    handle)
                nv.nvmlDeviceRegisterEvents(handle, mask, events)
            except error as exc:
                if "Not Supported" in str(exc) or "NOT_SUPPORTED" in str(exc).upper():
                    log.info("GPU %s is too old for health events: %s", uuid, exc)
                    continue
                log.warning("GPU %s: cannot register health events (%s); marking it unhealthy", uuid, exc)
                self.on_unhealthy(uuid)
        return events

    def _all_unhealthy(self) -> None:
        for uuid in self.uuids:
            self.on_unhealthy(uuid)

    def run_once(self, events: Any) -> None:
        """Wait for one event (at most ``wait_ms``) and act on it."""
        nv = self.nvml
        error = getattr(nv, "NVMLError", Exception)
        timeout = getattr(nv, "NVMLError_Timeout", None)
        try:
            data = nv.nvmlEventSetWait(events, self.wait_ms)
        except error as exc:
            if timeout is not None and isinstance(exc, timeout):
                return
            log.error("NVML event wait failed (%s); marking every GPU unhealthy", exc)
            self._all_unhealthy()
            return
        xid = int(data.eventData)
        if int(data.eventType) != XID_CRITICAL_ERROR or xid in self.ignored:
            return
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(data.device))
        except error as exc:
            log.error("XID %d on a GPU whose UUID cannot be read (%s); marking every GPU unhealthy", xid, exc)
            self._all_unhealthy()
            return
        if uuid not in self.uuids:
            log.warning("XID %d on %s, a GPU this plugin does not serve; ignored", xid, uuid)
            return
        log.warning("XID %d on %s: marking it unhealthy", xid, uuid)
        self.on_unhealthy(uuid)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hami-nvidia-xid", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        nv = self.nvml
        try:
            nv.nvmlInit()
        except Exception as exc:
            log.error("NVML health checks unavailable, every GPU stays Healthy: %s", exc)
            return
        events = None
        try:
            events = self._register()
            while not self._stop.is_set():
                self.run_once(events)
        except Exception as exc:  # a driver or binding surprise ends the checks, never the plugin
            log.error("NVML health checks stopped, GPUs keep their last health: %s", exc)
        finally:
            # Balance nvmlInit (NVML counts them) and free the event set, as NVIDIA's plugin does on stop.
            if events is not None:
                with contextlib.suppress(Exception):
                    nv.nvmlEventSetFree(events)
            with contextlib.suppress(Exception):
                nv.nvmlShutdown()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        """Stop and join the thread (returns within one event wait); safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.wait_ms / 1000 + 1)
            if self._thread.is_alive():
                log.warning("the NVML health thread did not stop within %.0f s (a hung driver call?)",
                            self.wait_ms / 1000 + 1)


def watch_health(devices: Sequence[DeviceInfo], on_health: Callable[[str, bool], None], *,
                 environ: Mapping[str, str] | None = None, nvml: Any = None) -> XidHealthWatcher | None:
    """``hami_watch_health`` for NVIDIA: a started :class:`XidHealthWatcher` over ``devices``, or ``None``.

    GPUs from the override devices file (fake GPUs: there is no NVML to ask) get a
    :class:`~hami_nvidia.filehealth.DevicesFileHealth` instead, which follows the file's ``health`` fields.
    ``None`` (with one log line saying why) when XID checks are disabled (``DP_DISABLE_HEALTHCHECKS=all`` or
    ``xids``) or when ``pynvml`` is not installed. ``nvml`` replaces ``import pynvml`` (tests pass a fake driver).
    """
    environ = os.environ if environ is None else environ
    fake = environ.get(OVERRIDE_ENV)
    if fake:
        from hami_nvidia.filehealth import DevicesFileHealth

        log.info("GPUs come from the devices file %s (fake GPUs, no NVML): health from its 'health' fields", fake)
        return DevicesFileHealth(fake, devices, on_health).start()
    ignored = ignored_xids(environ)
    if ignored is None:
        log.info("XID health checks disabled (DP_DISABLE_HEALTHCHECKS=%s)", environ.get("DP_DISABLE_HEALTHCHECKS"))
        return None
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            log.warning("pynvml (nvidia-ml-py) is not installed: no XID health checks")
            return None
    uuids = [d.id for d in devices]
    watcher = XidHealthWatcher(nvml, uuids, lambda uuid: on_health(uuid, False), ignored=ignored)
    watcher.start()
    log.info("XID health checks on %d GPUs (ignored XIDs: %s)", len(uuids), ",".join(map(str, sorted(ignored))))
    return watcher


# ------------------------------------------------------------------------------------------ dynamic MIG
def mig_device_infos(cfg: NvidiaConfig, gpus: Iterable[Gpu]) -> list[DeviceInfo]:
    """Registration in ``operatingmode: mig`` (spec §2.5, §2.12 b): per GPU the allowlisted profiles of its model.

    Each profile records NVML's ``memorySizeMB``, ``sliceCount`` and possible placements, and ``core`` =
    ceil(SMs x 100 / the most SMs of any GPU-instance profile of the GPU). ``count`` = the largest
    ``instanceCount`` of those profiles, ``devmem`` = the GPU's memory (never scaled), ``devcore`` = 100,
    ``mode`` = ``mig``. A GPU with no allowlisted profile it supports is left out.
    """
    from hami_nvidia.config import allowlisted_profiles
    from hami_nvidia.migmgr import MigError, profile_slices

    out = []
    for g in gpus:
        names = allowlisted_profiles(cfg, g.model)
        if names is None:
            log.warning("GPU %s (%s): no migProfileAllowlist entry matches; not registered", g.uuid, g.model)
            continue
        by_slices = {p.nvml_index: p for p in g.mig_profiles}
        max_sm = max((p.multiprocessor_count for p in g.mig_profiles), default=0)
        profiles, instances = [], []
        for name in names:
            try:
                slices = profile_slices(name)
            except MigError as exc:
                log.warning("GPU %s: %s; skipped", g.uuid, exc)
                continue
            info = by_slices.get(_NVML_SLICE_INDEX[slices])
            if info is None or max_sm <= 0:
                log.warning("GPU %s (%s): no %d-slice GPU-instance profile for %s; skipped", g.uuid, g.model,
                            slices, name)
                continue
            profiles.append(MigProfile(name=name, memory_mb=info.memory_mb,
                                       core=-(-info.multiprocessor_count * 100 // max_sm),
                                       slice_count=info.slice_count,
                                       placements=tuple(Placement(start=s, size=n) for s, n in info.placements)))
            instances.append(info.instance_count)
        if not profiles:
            log.warning("GPU %s (%s): no usable MIG profile; not registered", g.uuid, g.model)
            continue
        out.append(DeviceInfo(id=g.uuid, index=g.index, count=max(instances), devmem=g.memory_mib, devcore=100,
                              type=g.model, numa=g.numa, mode="mig", health=True, mig_profiles=tuple(profiles),
                              vendor="nvidia"))
    return out


#: NVML_GPU_INSTANCE_PROFILE_<N>_SLICE values (stable in NVML's ABI), by slice count.
_NVML_SLICE_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class MigAllocateError(Exception):
    """Allocate in mig mode cannot serve a container; the message names the annotation and the entry."""


def mig_allocation(manager: Any, pod: Mapping[str, Any], container_index: int,
                   devices: Sequence[ContainerDevice]) -> ContainerAllocation:
    """Allocate in ``operatingmode: mig`` (spec §2.12 b steps 1-7) for one container.

    The container's ``hami.io/vgpu-mig-allocations`` entries (by ``containerIndex``, init containers first,
    sorted by ``deviceIndex``) must match the popped devices one to one by GPU UUID. Unreferenced instances
    are reconciled away, then each entry's exact profile and placement is ensured (reused when tracked). The
    answer is ``NVIDIA_VISIBLE_DEVICES`` = the MIG UUIDs and nothing else; the annotation with the runtime ids
    filled in is returned as a pod annotation, and ``rollback`` destroys the instances made by this call.
    """
    from dataclasses import replace

    from hami_core.plugins.errors import WireFormatError
    from hami_core.wire import keys
    from hami_core.wire.mig import encode_mig_allocations
    from hami_nvidia.migmgr import InstanceKey, MigError, pod_allocations, profile_slices

    key = keys.VGPU_MIG_ALLOCATIONS
    meta = pod.get("metadata") or {}
    if not (meta.get("annotations") or {}).get(key):
        raise MigAllocateError(f"annotation {key} is missing: the node is in dynamic MIG mode, so the scheduler "
                               "must choose a MIG profile and placement for every device")
    try:
        entries = pod_allocations(pod)
    except WireFormatError as exc:
        raise MigAllocateError(str(exc)) from None
    mine = sorted((a for a in entries if a.container_index == container_index), key=lambda a: a.device_index)
    where = f"annotation {key}, containerIndex {container_index}"
    if len(mine) != len(devices):
        raise MigAllocateError(f"{where}: {len(mine)} MIG entries for {len(devices)} allocated devices")
    for a, d in zip(mine, devices, strict=True):
        if a.gpu_uuid != d.uuid:
            raise MigAllocateError(f"{where}, deviceIndex {a.device_index}: gpuUUID {a.gpu_uuid} is not the "
                                   f"allocated GPU {d.uuid}")
        try:
            profile_slices(a.profile)
        except MigError as exc:
            raise MigAllocateError(f"{where}, deviceIndex {a.device_index}: profile: {exc}") from None
    _refuse_double_use(manager, pod, mine, where)
    manager.reconcile()
    created: list[Any] = []
    realised = {}
    try:
        for a in mine:
            inst, new = manager.ensure(InstanceKey.of(a))
            if new:
                created.append(inst)
            realised[(a.container_index, a.device_index)] = replace(
                a, mig_uuid=inst.mig_uuid, gpu_instance_id=inst.gpu_instance_id,
                compute_instance_id=inst.compute_instance_id)
    except Exception as exc:
        _destroy_all(manager, created)
        raise MigAllocateError(f"{where}: {exc}") from None
    updated = [realised.get((a.container_index, a.device_index), a) for a in entries]
    uuids = [realised[(a.container_index, a.device_index)].mig_uuid for a in mine]
    log.info("container %d: MIG devices %s (%d created)", container_index, ",".join(map(str, uuids)), len(created))
    return ContainerAllocation(env={"NVIDIA_VISIBLE_DEVICES": ",".join(dict.fromkeys(map(str, uuids)))},
                               pod_annotations={key: encode_mig_allocations(updated)},
                               rollback=lambda: _destroy_all(manager, created))


def _refuse_double_use(manager: Any, pod: Mapping[str, Any], mine: Sequence[Any], where: str) -> None:
    """Refuse an instance another live pod already realised: a tracked instance is reused by key, so a
    scheduler mistake would otherwise hand one MIG device to two pods. Skipped (logged) when the pods
    cannot be listed: the scheduler's booking is then the only guard, as in HAMi."""
    from hami_nvidia.migmgr import InstanceKey, live_pods, pod_allocations

    uid = (pod.get("metadata") or {}).get("uid")
    wanted = {InstanceKey.of(a): a for a in mine}
    try:
        others = [p for p in live_pods(manager.list_pods()) if (p.get("metadata") or {}).get("uid") != uid]
    except Exception as exc:
        log.warning("cannot list the node's pods to check MIG double use: %s", exc)
        return
    for other in others:
        try:
            taken = [a for a in pod_allocations(other) if a.realized and InstanceKey.of(a) in wanted]
        except Exception:
            continue  # another pod's bad annotation is its own problem (and stops reconcile, fail-closed)
        if taken:
            meta = other.get("metadata") or {}
            a = wanted[InstanceKey.of(taken[0])]
            raise MigAllocateError(f"{where}, deviceIndex {a.device_index}: {InstanceKey.of(a)} is already in use "
                                   f"by pod {meta.get('namespace') or 'default'}/{meta.get('name')}")


def _destroy_all(manager: Any, instances: Sequence[Any]) -> None:
    """Roll back: destroy ``instances`` newest first; a failure is logged and the rest still go."""
    for inst in reversed(instances):
        try:
            manager.destroy(inst)
            log.info("rolled back MIG instance %s", inst.key)
        except Exception as exc:
            log.error("rolling back MIG instance %s failed: %s", inst.key, exc)


class MigWatch:
    """The node-side watch in mig mode: the XID watcher (if any) and the MIG reconciler, stopped together."""

    def __init__(self, *parts: Any) -> None:
        self.parts = [p for p in parts if p is not None]

    def stop(self) -> None:
        for part in self.parts:
            part.stop()


# ------------------------------------------------------------------------------------------ hook entry points
# What NvidiaBackend's node-side hooks run (it imports this module inside those methods). The device plugin's
# NodeContext.state (hami_core.plugins.node_context) keeps what one device plugin process learns once.
_NODE_STATE, _GPUS_STATE, _MIG_STATE = "nvidia.nodeconfig", "nvidia.gpus", "nvidia.mig"
#: Keys of NodeContext.state that ``hami device-plugin`` (hami_core.node.app) reads after discovery: this node's
#: ``enablenumatopology`` and ``enablegetpreferredallocation`` from config.json (kubelet-facing, so the core's).
NUMA_TOPOLOGY_STATE = "node.numa_topology"
PREFERRED_ALLOCATION_STATE = "node.preferred_allocation"


def node_config(ctx: Any) -> NodeConfig:
    """This node's entries of the per-node config.json, read once per device plugin (HAMi reads it at start)."""
    from hami_nvidia.config import load_node_config

    if ctx is not None and _NODE_STATE in ctx.state:
        cached: NodeConfig = ctx.state[_NODE_STATE]
        return cached
    name = ctx.node_name if ctx is not None else os.environ.get("NODE_NAME", "")
    nc = load_node_config(name)
    if nc.entries:
        log.info("%s: node %s (nodeconfig%s): operatingmode %s, overrides %s, filterdevices %s", nc.source, name,
                 "".join(f"[{i}]" for i in nc.entries), nc.operating_mode, dict(nc.overrides) or "none",
                 nc.filter_devices or "none")
    if nc.mig_strategy:
        # HAMi v2.10.0 parses the key and never reads it; its strategy is --mig-strategy ($MIG_STRATEGY) alone.
        log.warning("%s: node %s: migstrategy %r is not applied (as in HAMi); set $%s for the device plugin",
                    nc.source, name, nc.mig_strategy, MIG_STRATEGY_ENV)
    if ctx is not None:
        ctx.state[_NODE_STATE] = nc
    return nc


def _operating_mode(ctx: Any) -> str:
    """This node's ``operatingmode`` (per-node config.json)."""
    return node_config(ctx).operating_mode


def node_settings(cfg: NvidiaConfig, ctx: Any) -> NvidiaConfig:
    """The ``nvidia:`` section with this node's config.json overrides (split count, scaling, ...)."""
    return node_config(ctx).apply(cfg)


def select_gpus(gpus: Sequence[Gpu], nc: NodeConfig, strategy: str) -> list[Gpu]:
    """The GPUs this node's device plugin serves, in discovery order.

    ``filterdevices`` leaves out every GPU named by UUID or index (HAMi removes them from its device map, so
    they are neither advertised to kubelet nor registered). With MIG strategy ``single`` or ``mixed``, HAMi's
    device map (NVIDIA's ``buildGPUDeviceMap``) has no MIG-enabled GPU as a GPU: they are left out here too, and
    their MIG devices, which HAMi serves as ``nvidia.com/gpu`` (single) or ``nvidia.com/mig-<profile>``
    (mixed), are not served (not built). ``single`` with MIG and non-MIG GPUs on one node is HAMi's error
    "all devices on the node must be configured with the same migEnabled value" (raises :class:`ConfigError`).
    """
    from hami_core.plugins import ConfigError

    out = []
    for g in gpus:
        if nc.excludes(g.uuid, g.index):
            log.info("GPU %s (index %d): in filterdevices of %s; not served", g.uuid, g.index, nc.source)
            continue
        out.append(g)
    if strategy == "none":
        return out
    mig = [g for g in out if g.mig_enabled]
    if strategy == "single" and mig and len(mig) != len(out):
        raise ConfigError(f"{MIG_STRATEGY_ENV}=single: all devices on the node must be configured with the same "
                          f"migEnabled value ({len(mig)} of {len(out)} GPUs have MIG enabled)")
    for g in mig:
        log.warning("GPU %s: MIG is enabled and the MIG strategy is %s: not served as a GPU (serving its MIG "
                    "devices as their own resources is not built)", g.uuid, strategy)
    return [g for g in out if not g.mig_enabled]


def _mig_manager(cfg: NvidiaConfig, ctx: Any) -> Any:
    """The device plugin's one MIG manager (created on first use; needs the node context for the pod list)."""
    if ctx is None:
        raise RuntimeError("dynamic MIG needs the device plugin's node context (no pod list outside it)")
    if _MIG_STATE not in ctx.state:
        import pynvml

        from hami_nvidia.config import allowlisted_profiles
        from hami_nvidia.migmgr import MigManager

        discovered = ctx.state.get(_GPUS_STATE, [])
        ctx.state[_MIG_STATE] = MigManager(pynvml, [(g.uuid, g.model) for g in discovered if g.mig_profiles],
                                           ctx.list_pods,
                                           allowlisted=lambda model: allowlisted_profiles(cfg, model) is not None,
                                           other_models=[g.model for g in discovered if not g.mig_profiles])
    return ctx.state[_MIG_STATE]


def discover_devices(cfg: NvidiaConfig) -> list[DeviceInfo]:
    """``hami_discover_devices``: hami-core/mps: every served GPU with deviceSplitCount replicas; mig: the GPUs
    with allowlisted MIG profiles, each registered with its profiles (spec node.md §2.5, §2.12 b).

    The node's config.json entries apply first (split count, scaling, ``preconfigureddevicememory``,
    ``filterdevices``, ...), and ``$MIG_STRATEGY`` decides whether MIG-enabled GPUs are served (:func:`select_gpus`).
    """
    from hami_core.plugins import ConfigError, current
    from hami_nvidia import detect
    from hami_nvidia.config import mig_strategy

    ctx = current()
    nc = node_config(ctx)
    cfg = nc.apply(cfg)
    strategy = mig_strategy()
    mode = nc.operating_mode
    try:
        found = detect.discover(pre_configured_memory_mib=cfg.pre_configured_device_memory,
                                mig_profiles=mode == "mig")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    # A GPU left out is not this plugin's: the MIG manager never sees it either (it resets idle GPUs).
    gpus = select_gpus(found, nc, strategy)
    if ctx is not None:
        ctx.state[_GPUS_STATE] = gpus
        ctx.state[NUMA_TOPOLOGY_STATE] = cfg.enable_numa_topology
        ctx.state[PREFERRED_ALLOCATION_STATE] = nc.enable_get_preferred_allocation
    if mode == "mig":
        infos = mig_device_infos(cfg, gpus)
        logging.getLogger("hami.nvidia.mig").info("operatingmode mig: %d of %d GPUs registered with MIG profiles",
                                                  len(infos), len(gpus))
        return infos
    return device_infos(cfg, gpus, mode=mode)


def start_watch(cfg: NvidiaConfig, devices: Sequence[DeviceInfo],
                on_health: Callable[[str, bool], None]) -> HealthWatch | None:
    """``hami_watch_health``: the XID watch, plus the MIG startup pass and 5 s reconcile in mig mode (§2.12 b);
    ``None`` when there is nothing to watch."""
    from hami_core.plugins import current

    ctx = current()
    xid = watch_health(devices, on_health)
    if _operating_mode(ctx) != "mig":
        return xid
    from hami_nvidia.migmgr import Reconciler

    try:
        reconciler = Reconciler(_mig_manager(cfg, ctx)).start()
    except Exception:
        if xid is not None:
            xid.stop()
        raise
    return MigWatch(xid, reconciler)


def allocate(cfg: NvidiaConfig, pod: Mapping[str, Any], container_index: int,
             devices: Sequence[ContainerDevice]) -> ContainerAllocation:
    """``hami_allocate``: the MIG instances in mig mode, else HAMi-core's env vars and mounts."""
    from hami_core.plugins import current

    ctx = current()
    cfg = node_settings(cfg, ctx)  # this node's memory scaling (CUDA_OVERSUBSCRIBE) and libcudaloglevel
    if _operating_mode(ctx) == "mig":
        return mig_allocation(_mig_manager(cfg, ctx), pod, container_index, devices)
    return allocation(cfg, pod, container_index, devices)
