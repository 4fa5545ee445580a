"""Prometheus metrics of the scheduler (spec §10.3), read from the engine's inventory and ledger.

Gauges carry HAMi's labels plus the constant label ``zone="vGPU"``; ``hami_build_info`` has no zone.

**Per-device series are opt-in** (``--metrics-device-detail``): HAMi's ``hami_gpu_*``, ``hami_node_gpu_overview``,
``hami_node_gpu_memory_allocated_ratio``, ``hami_node_gpu_mig_instance_info`` (1 per realized MIG instance) and
the per-pod ``hami_vgpu_*`` series, under HAMi's names and labels, grow with devices and pods (5 MiB a scrape at
500 nodes x 8 GPUs). Without the flag one series per node and device type says the same in sum, under hami-py's
own names: ``hami_node_device_count``, ``hami_node_device_shared_count``,
``hami_node_device_memory_limit_bytes``, ``hami_node_device_memory_allocated_bytes``,
``hami_node_device_core_limit_ratio``, ``hami_node_device_core_allocated_ratio`` (labels node, device_type).
Always: ``hami_node_quarantined`` (hami-py's own: per node, the pods whose allocation cannot be decoded),
``hami_resource_quota_used`` / ``hami_resource_quota_limit`` (per namespace and resource), ``hami_build_info``,
and ``hami_node_lock_*`` (:class:`LockWaitCollector`: binds waiting for node locks, ``--node-lock-wait``).

**Serving** (:class:`MetricsServer`, ``--metrics-bind``, default ``:9395``, ``GET /metrics``): the engine is read
under its lock only to copy numbers (no formatting under the lock, so ``/filter`` waits for a copy, not for a
render); the text is rendered in a worker thread, one render at a time whatever the number of scrapers, and
renders are spaced by three times the last one's duration when it took over :data:`CHEAP_RENDER_S` (scrapers in
between get the last text): rendering takes at most a quarter of one core however hard it is scraped, and a
small engine is always rendered afresh. The server is the scheduler's asyncio server: read deadlines, header
limits, at most :data:`METRICS_CONNECTIONS` connections and :data:`METRICS_SCRAPES` scrapes waiting.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from hami_core import __version__
from hami_core.engine.facade import Engine
from hami_core.plugins.types import MigInstance
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.nodelock import NodeLocker
from hami_core.scheduler.preemption import PREEMPTION_RESULTS
from hami_core.scheduler.reqmetrics import RequestMetrics

__all__ = ["CHEAP_RENDER_S", "METRICS_CONNECTIONS", "METRICS_SCRAPES", "EngineCollector", "LockWaitCollector",
           "MetricsRenderer", "MetricsServer", "register_runtime", "serve_metrics"]

log = logging.getLogger("hami.scheduler.metrics")

MIB = 1024 * 1024
ZONE = ("zone", "vGPU")
DEVICE = ["node", "device_uuid", "device_index", "device_type"]
#: A render faster than this is never spaced out: small engines are always rendered afresh.
CHEAP_RENDER_S = 0.005
#: After a slower render, the next waits this many times its duration (rendering: at most 1/(1+this) of a core).
SPACING = 3.0
#: Connections the metrics server keeps open (Prometheus keeps one per scraper).
METRICS_CONNECTIONS = 64
#: Scrapes waiting for a render at once; more get 503.
METRICS_SCRAPES = 32


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=[*labels, ZONE[0]])


# One device's numbers, copied under the engine lock: (uuid, index, type, totalmem, totalcore, used, usedmem,
# usedcores, mig instances in use)
_Device = tuple[str, int, str, int, int, int, int, int, tuple[MigInstance, ...]]


class EngineCollector(Collector):
    """Device capacity/usage per node (per device with ``device_detail``) and per-pod allocations (with
    ``device_detail``) from an :class:`Engine`."""

    def __init__(self, engine: Engine, engine_lock: threading.RLock | None = None, *,
                 device_detail: bool = True) -> None:
        self.engine = engine
        self.lock = engine_lock if engine_lock is not None else threading.RLock()
        self.device_detail = device_detail

    def _snapshot(self) -> tuple[list[Any], list[tuple[str, int, list[_Device]]], list[tuple[str, str, list[Any]]]]:
        """The numbers, copied under the engine lock (DeviceUsage objects change in place: keep no reference)."""
        detail = self.device_detail
        with self.lock:
            quotas = list(self.engine.quota_usage())
            nodes = []
            for name in sorted(self.engine.nodes):
                state = self.engine.nodes[name]
                devices = [(d.id, d.index, d.type, d.totalmem, d.totalcore, d.used, d.usedmem, d.usedcores,
                            d.mig_in_use) for backend in sorted(state.devices) for d in state.devices[backend]]
                nodes.append((name, len(state.quarantine), devices))
            # Bookings are frozen: holding them after the lock is safe.
            bookings = [(b.pod, b.node, [d for devs in b.devices.values() for d in devs])
                        for b in self.engine.ledger.bookings.values()] if detail else []
        return quotas, nodes, bookings

    def collect(self) -> Iterator[Any]:
        quotas, nodes, bookings = self._snapshot()
        quota_used = _gauge("hami_resource_quota_used", "Device resource booked in a namespace under ResourceQuota",
                            ["namespace", "quota_name", "limit"])
        quota_limit = _gauge("hami_resource_quota_limit", "ResourceQuota limit of a device resource in a namespace",
                             ["namespace", "quota_name"])
        for q in quotas:
            quota_used.add_metric([q.namespace, q.resource, str(q.limit or 0), ZONE[1]], q.used)
            if q.limit is not None:
                quota_limit.add_metric([q.namespace, q.resource, ZONE[1]], q.limit)
        quarantined = GaugeMetricFamily(
            "hami_node_quarantined", "Pods whose allocation annotation cannot be decoded on the node "
            "(> 0: the node is quarantined and takes no new pods)", labels=["node", ZONE[0]])
        for name, count, _ in nodes:
            quarantined.add_metric([name, ZONE[1]], count)
        yield from (self._per_device(nodes, bookings) if self.device_detail else self._per_node(nodes))
        yield from (quota_used, quota_limit, quarantined)
        info = GaugeMetricFamily("hami_build_info", "Build information",
                                 labels=["version", "revision", "build_date", "go_version", "compiler", "platform"])
        info.add_metric([__version__, "", "", platform.python_version(), platform.python_implementation(),
                         f"{platform.system().lower()}/{platform.machine()}"], 1)
        yield info

    @staticmethod
    def _per_node(nodes: list[tuple[str, int, list[_Device]]]) -> Iterator[GaugeMetricFamily]:
        labels = ["node", "device_type"]
        count = _gauge("hami_node_device_count", "Devices of a type on the node", labels)
        shared = _gauge("hami_node_device_shared_count", "Tasks sharing the node's devices of a type, in all", labels)
        mem_limit = _gauge("hami_node_device_memory_limit_bytes", "Device memory of the node's devices of a type "
                           "in bytes", labels)
        mem_alloc = _gauge("hami_node_device_memory_allocated_bytes", "Device memory allocated on the node's "
                           "devices of a type in bytes", labels)
        core_limit = _gauge("hami_node_device_core_limit_ratio", "Device cores of the node's devices of a type "
                            "(100 = one card)", labels)
        core_alloc = _gauge("hami_node_device_core_allocated_ratio", "Device cores allocated on the node's devices "
                            "of a type", labels)
        for name, _, devices in nodes:
            sums: dict[str, list[int]] = {}
            for _uuid, _index, dtype, totalmem, totalcore, used, usedmem, usedcores, _mig in devices:
                acc = sums.setdefault(dtype, [0, 0, 0, 0, 0, 0])
                acc[0] += 1
                acc[1] += used
                acc[2] += totalmem
                acc[3] += usedmem
                acc[4] += totalcore
                acc[5] += usedcores
            for dtype, (n, used, totalmem, usedmem, totalcore, usedcores) in sorted(sums.items()):
                base = [name, dtype, ZONE[1]]
                count.add_metric(base, n)
                shared.add_metric(base, used)
                mem_limit.add_metric(base, totalmem * MIB)
                mem_alloc.add_metric(base, usedmem * MIB)
                core_limit.add_metric(base, totalcore)
                core_alloc.add_metric(base, usedcores)
        yield from (count, shared, mem_limit, mem_alloc, core_limit, core_alloc)

    @classmethod
    def _per_device(cls, nodes: list[tuple[str, int, list[_Device]]],
                    bookings: list[tuple[str, str, list[Any]]]) -> Iterator[GaugeMetricFamily]:
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
        for name, _, devices in nodes:
            for uuid, index, dtype, totalmem, totalcore, used, usedmem, usedcores, mig in devices:
                base = [name, uuid, str(index), dtype, ZONE[1]]
                mem_limit.add_metric(base, totalmem * MIB)
                core_limit.add_metric(base, totalcore)
                mem_alloc.add_metric([name, uuid, str(index), str(usedcores), dtype, ZONE[1]], usedmem * MIB)
                shared.add_metric(base, used)
                core_alloc.add_metric(base, usedcores)
                overview.add_metric([name, uuid, str(index), str(usedcores), str(totalmem), dtype, ZONE[1]],
                                    usedmem * MIB)
                if totalmem > 0:
                    mem_ratio.add_metric(base, usedmem / totalmem)
                if mig:
                    cls._mig_instances(mig_info, name, uuid, index, mig)
        for pod_key, node, devices in bookings:
            namespace, _, pod = pod_key.partition("/")
            for d in devices:
                labels = [namespace, node, pod, "0", d.uuid, ZONE[1]]
                pod_mem.add_metric(labels, d.usedmem * MIB)
                pod_core.add_metric(labels, d.usedcores)
        yield from (mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, mem_ratio, mig_info, pod_mem,
                    pod_core)

    @staticmethod
    def _mig_instances(family: GaugeMetricFamily, node: str, uuid: str, index: int,
                       instances: tuple[MigInstance, ...]) -> None:
        """One sample per realized instance (an instance an init and an app container share counts once)."""
        seen = set()
        for inst in instances:
            if inst.mig_uuid is None:
                continue
            labels = (node, uuid, str(index), inst.mig_uuid, inst.profile, str(inst.gpu_instance_id),
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


class ExtenderCollector(Collector):
    """What the extender refused to trust, from an :class:`Extender`'s counters (docs/security.md): a rising
    ``hami_extender_refused_total`` is a caller naming pods that are not pending pods of this scheduler (a stale
    kube-scheduler cache, or someone probing the port); ``hami_extender_pod_view_misses_total`` counts filters
    whose pod the Pod watch did not hold yet, each of which cost one API read."""

    def __init__(self, extender: Extender) -> None:
        self.extender = extender

    def collect(self) -> Iterator[Any]:
        refused = CounterMetricFamily("hami_extender_refused", "Filters and binds refused because the pod named "
                                      "is not an identified pending pod of this scheduler; nothing was changed")
        refused.add_metric([], self.extender.refused)
        misses = CounterMetricFamily("hami_extender_pod_view_misses", "Filters whose pod the Pod watch did not "
                                     "hold yet (read from the API server instead)")
        misses.add_metric([], self.extender.view_misses)
        yield from (refused, misses)
        preemption = self.extender.preemption
        if preemption is None:
            return
        decisions = CounterMetricFamily("hami_preemption_decisions", "Preemption decisions by result: preempted "
                                        "(victims evicted, room held), no_victims, not_eligible, held (victims still "
                                        "terminating), failed; verb_node_kept / verb_node_dropped per node of "
                                        "kube-scheduler's preempt calls", labels=["result"])
        for result in PREEMPTION_RESULTS:
            decisions.add_metric([result], preemption.results.get(result, 0))
        victims = CounterMetricFamily("hami_preemption_victims", "Pods evicted by hami's device-aware preemption")
        victims.add_metric([], preemption.victims_total)
        holds = GaugeMetricFamily("hami_preemption_holds", "Preemptors whose room is held until they bind")
        with self.extender.lock:
            holds.add_metric([], len(self.extender.engine.holds()))
        yield from (decisions, victims, holds)


def register_runtime(registry: CollectorRegistry) -> None:
    """prometheus-client's process (``process_cpu_seconds_total``, ``process_resident_memory_bytes``, open fds:
    Linux only, empty elsewhere), platform (``python_info``) and garbage-collector (``python_gc_*``) collectors,
    into ``registry`` rather than the library's global one (nothing here is global)."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


class MetricsRenderer:
    """The exposition text of a registry, rendered one at a time and spaced out when renders are expensive."""

    def __init__(self, registry: CollectorRegistry, *, cheap_s: float = CHEAP_RENDER_S,
                 spacing: float = SPACING) -> None:
        self.registry = registry
        self.cheap_s = cheap_s
        self.spacing = spacing
        self.renders = 0  # how many times the text was rendered (the tests count them)
        self._lock = threading.Lock()
        self._text = b""
        self._next_at = 0.0  # monotonic time before which the last text is served as it is
        self._finished = 0.0  # when the last render ended
        self._warned = -1e9  # when a slow render was last logged

    def render(self) -> bytes:
        # One thread renders; scrapers that arrive meanwhile wait on the lock and then find the fresh text.
        arrived = time.monotonic()
        with self._lock:
            now = time.monotonic()
            if self.renders and (now < self._next_at or self._finished > arrived):
                return self._text
            started = time.monotonic()
            self._text = generate_latest(self.registry)
            self.renders += 1
            self._finished = done = time.monotonic()
            took = done - started
            self._next_at = done + self.spacing * took if took > self.cheap_s else 0.0
            if took > 1.0 and done - self._warned > 600:  # at most every 10 minutes
                self._warned = done
                log.warning("rendering /metrics took %.1f s (%d bytes); renders are spaced %.0f s apart. "
                            "--metrics-device-detail off keeps it small", took, len(self._text),
                            self.spacing * took)
            return self._text


class MetricsServer:
    """``GET /metrics`` on ``host:port`` (port 0: any), on the scheduler's asyncio server with its limits."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *,
                 max_connections: int = METRICS_CONNECTIONS, client_timeout_s: float = 60.0,
                 request_timeout_s: float = 10.0) -> None:
        from hami_core.scheduler.aioserver import AsyncSchedulerServer
        from hami_core.scheduler.routes import Reply

        self.renderer = MetricsRenderer(registry)

        def scrape() -> Reply:
            return Reply(200, self.renderer.render(), CONTENT_TYPE_LATEST)

        self.server = AsyncSchedulerServer(None, None, host, port, serves=(), gets={"/metrics": scrape},  # type: ignore[arg-type]
                                           limits={"/metrics": METRICS_SCRAPES}, max_connections=max_connections,
                                           client_timeout_s=client_timeout_s, request_timeout_s=request_timeout_s,
                                           workers=1)

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    @property
    def url(self) -> str:
        return self.server.url + "/metrics"

    def start(self) -> None:
        self.server.start()

    def shutdown(self) -> None:
        self.server.shutdown(grace_s=1.0)


def serve_metrics(engine: Engine, host: str, port: int, engine_lock: threading.RLock | None = None,
                  locker: NodeLocker | None = None, *, device_detail: bool = False,
                  extender: Extender | None = None, requests: RequestMetrics | None = None,
                  process: bool = True) -> MetricsServer:
    """Serve ``/metrics`` for ``engine`` (and ``locker``'s waits, ``extender``'s refusals, ``requests``' counters
    and histograms) on ``host:port`` (port 0 = any), started. ``process``: also prometheus-client's process,
    platform and gc collectors (``process_*``, ``python_info``, ``python_gc_*``)."""
    registry = CollectorRegistry()
    registry.register(EngineCollector(engine, engine_lock, device_detail=device_detail))
    if locker is not None:
        registry.register(LockWaitCollector(locker))
    if extender is not None:
        registry.register(ExtenderCollector(extender))
    if requests is not None:
        for collector in requests.collectors():
            registry.register(collector)
    if process:
        register_runtime(registry)
    server = MetricsServer(registry, host, port)
    server.start()
    return server
