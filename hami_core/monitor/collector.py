"""The Prometheus collector of ``hami monitor`` (node spec §3.5): every metric is built at scrape time from the mapped
regions, the pod index and NVML. All are gauges and carry ``zone="vGPU"`` except ``hami_build_info``.
"""

from __future__ import annotations

import json
import logging
import platform
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from hami_core import __version__
from hami_core.monitor.nvml import NvmlSource
from hami_core.monitor.region import RegionError
from hami_core.monitor.store import ContainerStore, PodIndex

__all__ = ["MonitorCollector"]

log = logging.getLogger("hami.monitor")

ZONE = "vGPU"
HOST = ["node", "device_index", "device_uuid", "device_type"]
CTR = ["namespace", "pod", "container", "vdevice_index", "device_uuid"]
MIG = [*CTR, "mig_uuid", "profile", "gpu_instance_id", "compute_instance_id"]
LEGACY_HOST = ["nodeid", "deviceidx", "deviceuuid", "devicetype"]
LEGACY_CTR = ["podnamespace", "podname", "ctrname", "vdeviceid", "deviceuuid"]
MIG_ANNOTATION = "hami.io/vgpu-mig-allocations"


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=[*labels, "zone"])


def _mig_entries(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(container name, entry) per complete ``hami.io/vgpu-mig-allocations`` entry; containerIndex counts init
    containers first."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(MIG_ANNOTATION)
    if not raw:
        return []
    try:
        entries = json.loads(raw)
    except ValueError:
        return []
    spec = pod.get("spec") or {}
    names = [c.get("name", "") for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]]
    out = []
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict) or any(e.get(k) is None for k in ("migUUID", "gpuInstanceID", "computeInstanceID")):
            continue
        if not _text_only(e):
            continue  # a "\udcff" escape decodes to a lone surrogate: no label can carry it
        ci = e.get("containerIndex")
        if isinstance(ci, int) and 0 <= ci < len(names):
            out.append((names[ci], e))
    return out


def _text_only(entry: dict[str, Any]) -> bool:
    try:
        for v in entry.values():
            str(v).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class MonitorCollector(Collector):
    """Reads the store (refreshing it first) under ``lock``, which the feedback loop shares."""

    def __init__(self, store: ContainerStore, pods: PodIndex | None = None, nvml: NvmlSource | None = None, *,
                 node_name: str = "", legacy: bool = False, lock: threading.RLock | None = None,
                 refresh: bool = True, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.pods = pods
        self.nvml = nvml
        self.node_name = node_name
        self.legacy = legacy
        self.lock = lock if lock is not None else threading.RLock()
        self.refresh = refresh
        self.clock = clock

    def describe(self) -> list[Any]:
        return []  # unchecked collector: metrics are only known at scrape time

    def collect(self) -> Iterator[Any]:
        yield from self._host()
        with self.lock:
            if self.refresh:
                if self.pods is not None:
                    self.pods.refresh()
                self.store.refresh(self.pods.alive_uids() if self.pods is not None else None)
            families = self._containers()
            loaded = len(self.store)
        yield from families
        # Present on every node, GPUs or not, NVML or not: dashboards list the nodes from it (the host series need a
        # driver, the container series a running GPU pod).
        containers = _gauge("hami_monitor_containers", "Containers whose HAMi-core shared region this monitor "
                            "reads (present on every node, 0 without GPU pods)", ["node"])
        containers.add_metric([self.node_name, ZONE], loaded)
        yield containers
        info = GaugeMetricFamily("hami_build_info", "Build information",
                                 labels=["version", "revision", "build_date", "go_version", "compiler", "platform"])
        info.add_metric([__version__, "", "", platform.python_version(), platform.python_implementation(),
                         f"{platform.system().lower()}/{platform.machine()}"], 1)
        yield info

    # ----------------------------------------------------------------------------------------- host
    def _host(self) -> list[GaugeMetricFamily]:
        if self.nvml is None:
            return []
        gpus = self.nvml.devices()
        if not gpus:
            return []
        mem = _gauge("hami_host_gpu_memory_used_bytes", "GPU device memory used on the host, bytes (NVML)", HOST)
        util = _gauge("hami_host_gpu_utilization_ratio", "GPU utilisation on the host, percent (NVML)", HOST)
        mcu = _gauge("hami_host_gpu_memory_controller_utilization_ratio",
                     "GPU memory controller utilisation, percent (NVML)", HOST[1:])
        legacy_mem = _gauge("HostGPUMemoryUsage", "GPU device memory usage (legacy)", LEGACY_HOST)
        legacy_util = _gauge("HostCoreUtilization", "GPU core utilization (legacy)", LEGACY_HOST)
        for g in gpus:
            labels = [self.node_name, str(g.index), g.uuid, g.type, ZONE]
            if g.memory_used is not None:
                mem.add_metric(labels, g.memory_used)
                legacy_mem.add_metric(labels, g.memory_used)
            if g.utilization is not None:
                util.add_metric(labels, g.utilization)
                legacy_util.add_metric(labels, g.utilization)
            if g.memory_utilization is not None:
                mcu.add_metric(labels[1:], g.memory_utilization)
        return [mem, util, mcu, *((legacy_mem, legacy_util) if self.legacy else ())]

    # ----------------------------------------------------------------------------------------- containers
    def _identity(self, pod_uid: str, container: str) -> tuple[str, str] | None:
        """(namespace, pod name) of a cache dir; from the dir name alone without a cluster."""
        if self.pods is None:
            return "", pod_uid
        pod = self.pods.lookup(pod_uid)
        if pod is None:
            return None
        if container not in {c.get("name") for c in (pod.get("spec") or {}).get("containers") or []}:
            return None  # init containers and unknown names are not reported (as HAMi)
        meta = pod.get("metadata") or {}
        return meta.get("namespace", ""), meta.get("name", "")

    def _containers(self) -> list[GaugeMetricFamily]:
        used = _gauge("hami_vgpu_memory_used_bytes", "vGPU device memory used by the container, bytes", CTR)
        limit = _gauge("hami_vgpu_memory_limit_bytes", "vGPU device memory limit of the container, bytes", CTR)
        dev_mem = _gauge("hami_container_device_memory_bytes", "Container device memory used, bytes", CTR)
        dev_util = _gauge("hami_container_device_utilization_ratio", "Container SM utilisation, percent", CTR)
        ctx = _gauge("hami_vgpu_memory_context_bytes", "Container device memory used by CUDA contexts, bytes", CTR)
        mod = _gauge("hami_vgpu_memory_module_bytes", "Container device memory used by modules, bytes", CTR)
        buf = _gauge("hami_vgpu_memory_buffer_bytes", "Container device memory used by buffers, bytes", CTR)
        last = _gauge("hami_container_last_kernel_elapsed_seconds", "Seconds since the container's last kernel",
                      CTR)
        mig = _gauge("hami_mig_device_info", "MIG device allocated to a container", MIG)
        families = [used, limit, dev_mem, dev_util, ctx, mod, buf, last, mig]
        if self.legacy:
            l_used = _gauge("vGPU_device_memory_usage_in_bytes", "vGPU device usage (legacy)", LEGACY_CTR)
            l_limit = _gauge("vGPU_device_memory_limit_in_bytes", "vGPU device limit (legacy)", LEGACY_CTR)
            l_util = _gauge("Device_utilization_desc_of_container", "Container device utilization (legacy)",
                            LEGACY_CTR)
            l_last = _gauge("Device_last_kernel_of_container", "Container device last kernel (legacy)", LEGACY_CTR)
            l_mem = _gauge("Device_memory_desc_of_container", "Container device memory description (legacy)",
                           [*LEGACY_CTR, "context", "module", "data", "offset"])
            l_mig = _gauge("MigInfo", "MIG device information of a container (legacy)", [*LEGACY_CTR, "instanceid"])
            families += [l_used, l_limit, l_util, l_last, l_mem, l_mig]
        now = self.clock()
        for entry in self.store:
            ident = self._identity(entry.pod_uid, entry.container)
            if ident is None:
                continue
            try:
                snap = entry.region.snapshot()
            except (RegionError, OSError, ValueError) as exc:  # shrank or failed since the refresh: skipped
                log.debug("scrape skips %s: %s", entry.region.path, exc)
                continue
            ns, pod = ident
            elapsed = max(0, now - snap.last_kernel_time) if snap.last_kernel_time > 0 else None
            for d in snap.devices:
                labels = [ns, pod, entry.container, str(d.index), d.uuid, ZONE]
                used.add_metric(labels, d.used)
                limit.add_metric(labels, d.limit)
                dev_mem.add_metric(labels, d.used)
                dev_util.add_metric(labels, d.sm_util)
                ctx.add_metric(labels, d.context)
                mod.add_metric(labels, d.module)
                buf.add_metric(labels, d.data)
                if elapsed is not None:
                    last.add_metric(labels, elapsed)
                if self.legacy:
                    l_used.add_metric(labels, d.used)
                    l_limit.add_metric(labels, d.limit)
                    l_util.add_metric(labels, d.sm_util)
                    if elapsed is not None:
                        l_last.add_metric(labels, elapsed)
                    offset = d.used - d.context - d.module - d.data
                    l_mem.add_metric([*labels[:5], str(d.context), str(d.module), str(d.data), str(offset), ZONE],
                                     d.used)
        if self.pods is not None:
            for pod in list(self.pods.by_uid.values()):
                meta = pod.get("metadata") or {}
                for ctr, e in _mig_entries(pod):
                    base = [meta.get("namespace", ""), meta.get("name", ""), ctr, str(e.get("deviceIndex", "")),
                            str(e.get("gpuUUID", ""))]
                    mig.add_metric([*base, str(e["migUUID"]), str(e.get("profile", "")), str(e["gpuInstanceID"]),
                                    str(e["computeInstanceID"]), ZONE], 1)
                    if self.legacy:
                        l_mig.add_metric([*base, str(e["migUUID"]), ZONE], 1)
        return families
