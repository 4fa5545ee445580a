"""Prometheus metrics of the scheduler (spec §10.3), read live from the engine's inventory and ledger.

Gauges carry HAMi's labels plus the constant label ``zone="vGPU"``; ``hami_build_info`` has no zone.
``hami_node_gpu_mig_instance_info`` is 1 per realized MIG instance (one whose ``hami.io/vgpu-mig-allocations``
entry carries the device plugin's runtime ids). ``hami_node_quarantined`` (hami-py's own) counts per node the pods
whose allocation cannot be decoded.
``hami_resource_quota_used`` / ``hami_resource_quota_limit`` show, per namespace and resource (``quota_name``), the
usage the scheduler booked and the ResourceQuota limit (the ``limit`` label: ``0`` when none is set).
``hami_node_lock_*`` (hami-py's own, :class:`LockWaitCollector`) show binds waiting for node locks
(``--node-lock-wait``): how many waited and for how long in all, how many wait now, and how many were refused by
reason. A rising wait per bind means Allocates come slowly after binds.
Served on their own port (``--metrics-bind``, default ``:9395``) at ``GET /metrics``.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from hami_core import __version__
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceUsage
from hami_core.scheduler.nodelock import NodeLocker

__all__ = ["EngineCollector", "LockWaitCollector", "serve_metrics"]

MIB = 1024 * 1024
ZONE = ("zone", "vGPU")
DEVICE = ["node", "device_uuid", "device_index", "device_type"]


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=[*labels, ZONE[0]])


class EngineCollector(Collector):
    """Collects device capacity/usage per node and per-pod allocations from an :class:`Engine`."""

    def __init__(self, engine: Engine, engine_lock: threading.RLock | None = None) -> None:
        self.engine = engine
        self.lock = engine_lock if engine_lock is not None else threading.RLock()

    def collect(self) -> Iterator[Any]:
        mem_limit = _gauge("hami_gpu_memory_limit_bytes", "Device memory limit in bytes", DEVICE)
        core_limit = _gauge("hami_gpu_core_limit_ratio", "Device core limit (100 = one card)", DEVICE)
        mem_alloc = _gauge("hami_gpu_memory_allocated_bytes", "Device memory allocated in bytes",
                           ["node", "device_uuid", "device_index", "device_cores", "device_type"])
        shared = _gauge("hami_gpu_shared_count", "Tasks sharing the device", DEVICE)
        core_alloc = _gauge("hami_gpu_core_allocated_ratio", "Device cores allocated", DEVICE)
        overview = _gauge("hami_node_gpu_overview", "Device memory allocated in bytes (overview)",
                          ["node", "device_uuid", "device_index", "device_cores", "device_memory_limit",
                           "device_type"])
        mem_ratio = _gauge("hami_node_gpu_memory_allocated_ratio", "Device memory allocated / limit", DEVICE)
        pod_mem = _gauge("hami_vgpu_memory_allocated_bytes", "Memory allocated to a pod on a device in bytes",
                         ["namespace", "node", "pod", "container_index", "device_uuid"])
        pod_core = _gauge("hami_vgpu_core_allocated_ratio", "Cores allocated to a pod on a device",
                          ["namespace", "node", "pod", "container_index", "device_uuid"])
        mig_info = _gauge("hami_node_gpu_mig_instance_info", "A realized MIG instance on a GPU (value 1)",
                          ["node", "device_uuid", "device_index", "mig_uuid", "profile", "gpu_instance_id",
                           "compute_instance_id", "placement_start", "placement_size"])
        quarantined = GaugeMetricFamily(
            "hami_node_quarantined", "Pods whose allocation annotation cannot be decoded on the node "
            "(> 0: the node is quarantined and takes no new pods)", labels=["node", ZONE[0]])
        quota_used = _gauge("hami_resource_quota_used", "Device resource booked in a namespace under ResourceQuota",
                            ["namespace", "quota_name", "limit"])
        quota_limit = _gauge("hami_resource_quota_limit", "ResourceQuota limit of a device resource in a namespace",
                             ["namespace", "quota_name"])
        with self.lock:
            for q in self.engine.quota_usage():
                quota_used.add_metric([q.namespace, q.resource, str(q.limit or 0), ZONE[1]], q.used)
                if q.limit is not None:
                    quota_limit.add_metric([q.namespace, q.resource, ZONE[1]], q.limit)
            for name in sorted(self.engine.nodes):
                state = self.engine.nodes[name]
                quarantined.add_metric([name, ZONE[1]], len(state.quarantine))
                for backend in sorted(state.devices):
                    for d in state.devices[backend]:
                        base = [name, d.id, str(d.index), d.type, ZONE[1]]
                        mem_limit.add_metric(base, d.totalmem * MIB)
                        core_limit.add_metric(base, d.totalcore)
                        mem_alloc.add_metric([name, d.id, str(d.index), str(d.usedcores), d.type, ZONE[1]],
                                             d.usedmem * MIB)
                        shared.add_metric(base, d.used)
                        core_alloc.add_metric(base, d.usedcores)
                        overview.add_metric([name, d.id, str(d.index), str(d.usedcores), str(d.totalmem), d.type,
                                             ZONE[1]], d.usedmem * MIB)
                        if d.totalmem > 0:
                            mem_ratio.add_metric(base, d.usedmem / d.totalmem)
                        if d.mig_in_use:
                            self._mig_instances(mig_info, name, d)
            for booking in self.engine.ledger.bookings.values():
                namespace, _, pod = booking.pod.partition("/")
                for devices in booking.devices.values():
                    for d in devices:
                        labels = [namespace, booking.node, pod, "0", d.uuid, ZONE[1]]
                        pod_mem.add_metric(labels, d.usedmem * MIB)
                        pod_core.add_metric(labels, d.usedcores)
        yield from (mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, mem_ratio, mig_info, pod_mem,
                    pod_core, quota_used, quota_limit, quarantined)
        info = GaugeMetricFamily("hami_build_info", "Build information",
                                 labels=["version", "revision", "build_date", "go_version", "compiler", "platform"])
        info.add_metric([__version__, "", "", platform.python_version(), platform.python_implementation(),
                         f"{platform.system().lower()}/{platform.machine()}"], 1)
        yield info

    @staticmethod
    def _mig_instances(family: GaugeMetricFamily, node: str, d: DeviceUsage) -> None:
        """One sample per realized instance (an instance an init and an app container share counts once)."""
        seen = set()
        for inst in d.mig_in_use:
            if inst.mig_uuid is None:
                continue
            labels = (node, d.id, str(d.index), inst.mig_uuid, inst.profile, str(inst.gpu_instance_id),
                      str(inst.compute_instance_id), str(inst.placement.start), str(inst.placement.size), ZONE[1])
            if labels not in seen:
                seen.add(labels)
                family.add_metric(list(labels), 1)


class LockWaitCollector(Collector):
    """Binds waiting for node locks, from a :class:`NodeLocker`'s counters."""

    def __init__(self, locker: NodeLocker) -> None:
        self.locker = locker

    def collect(self) -> Iterator[Any]:
        locker = self.locker
        waits = CounterMetricFamily("hami_node_lock_waits", "Binds that waited for a node lock, then took it")
        waits.add_metric([], locker.waits)
        seconds = CounterMetricFamily("hami_node_lock_wait_seconds", "Seconds binds waited for node locks in all")
        seconds.add_metric([], locker.waited_s)
        refused = CounterMetricFamily("hami_node_lock_refused", "Binds refused for node lock contention after or "
                                      "instead of waiting", labels=["reason"])
        for reason, count in sorted(locker.refused.items()):
            refused.add_metric([reason], count)
        waiting = GaugeMetricFamily("hami_node_lock_waiting", "Binds waiting for (or taking) a node lock now")
        waiting.add_metric([], locker.waiting())
        yield from (waits, seconds, refused, waiting)


def serve_metrics(engine: Engine, host: str, port: int, engine_lock: threading.RLock | None = None,
                  locker: NodeLocker | None = None) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` for ``engine`` (and ``locker``'s waits) on ``host:port`` (port 0 = any); returns
    (server, thread)."""
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine, engine_lock))
    if locker is not None:
        registry.register(LockWaitCollector(locker))
    return start_http_server(port, addr=host, registry=registry)
