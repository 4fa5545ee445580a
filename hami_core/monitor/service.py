"""``hami monitor``: the containers-dir store, the pod index, the collector on its own HTTP server (default port
9394, ``/metrics``) and the feedback loop (every 5 s), wired together."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from hami_core.monitor.collector import MonitorCollector
from hami_core.monitor.exposition import serve
from hami_core.monitor.feedback import observe
from hami_core.monitor.httpserver import MAX_CONNECTIONS, READ_DEADLINE_S
from hami_core.monitor.nvml import NvmlSource
from hami_core.monitor.store import ContainerStore, PodIndex

__all__ = ["Monitor", "MonitorOptions"]

log = logging.getLogger("hami.monitor")

DEFAULT_CONTAINERS_DIR = "/usr/local/vgpu/containers"


@dataclass
class MonitorOptions:
    containers_dir: str = DEFAULT_CONTAINERS_DIR
    host: str = "0.0.0.0"
    port: int = 9394              # 0 = any free port
    node_name: str = ""
    legacy_metrics: bool = False
    feedback: bool = True
    interval_s: float = 5.0       # feedback / rescan period
    gc_after_s: float = 300.0     # HAMI_RESYNC_INTERVAL: grace before removing a dead pod's directory
    pod_resync_s: float = 30.0    # pod list cache
    max_connections: int = MAX_CONNECTIONS   # /metrics connections served at once; more get 503
    read_deadline_s: float = READ_DEADLINE_S  # a request head must arrive within this


class Monitor:
    def __init__(self, options: MonitorOptions, cluster: Any = None, nvml: NvmlSource | None = None) -> None:
        self.options = options
        self.lock = threading.RLock()
        self.store = ContainerStore(options.containers_dir, gc_after_s=options.gc_after_s)
        self.pods = (PodIndex(cluster, options.node_name or None, resync_s=options.pod_resync_s)
                     if cluster is not None else None)
        self.nvml = nvml if nvml is not None else NvmlSource()
        self.collector = MonitorCollector(self.store, self.pods, self.nvml, node_name=options.node_name,
                                          legacy=options.legacy_metrics, lock=self.lock)
        self.registry = CollectorRegistry()
        self.registry.register(self.collector)
        self._stop = threading.Event()
        self._server: Any = None
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server is not None else self.options.port

    @property
    def url(self) -> str:
        host = self.options.host if self.options.host not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}/metrics"

    def tick(self) -> None:
        """Rescan the directory and, with feedback on, run one feedback pass."""
        with self.lock:
            if self.pods is not None:
                self.pods.refresh()
            self.store.refresh(self.pods.alive_uids() if self.pods is not None else None)
            if self.options.feedback:
                observe(e.region for e in self.store)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # never let one bad tick end the loop
                log.exception("monitor tick failed")
            self._stop.wait(self.options.interval_s)

    def start(self) -> None:
        if not os.path.isdir(self.options.containers_dir):
            log.warning("containers dir %s does not exist (yet)", self.options.containers_dir)
        self._server, thread = serve(self.registry, self.options.host, self.options.port,
                                     max_connections=self.options.max_connections,
                                     read_deadline_s=self.options.read_deadline_s)
        self._threads.append(thread)
        loop = threading.Thread(target=self._loop, name="hami-monitor-feedback", daemon=True)
        loop.start()
        self._threads.append(loop)

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        with self.lock:
            self.store.close()
        self.nvml.shutdown()
