"""Wiring: one engine, one lock, the sync feed, the extender, the webhook, the HTTP server and metrics."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hami_core.cluster.base import Cluster
from hami_core.engine.facade import Engine
from hami_core.scheduler.aioserver import AsyncSchedulerServer
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.inflight import DEFAULT_INFLIGHT_LIMIT
from hami_core.scheduler.metrics import serve_metrics
from hami_core.scheduler.nodelock import DEFAULT_RETRY_TIMEOUT_S, DEFAULT_TIMEOUT_S, DEFAULT_WAIT_S, WATCHED_POLL_S
from hami_core.scheduler.server import SchedulerServer
from hami_core.scheduler.sync import DEFAULT_INTERVAL_S, Sync
from hami_core.scheduler.webhook import Webhook
from hami_core.wire import keys

__all__ = ["HTTP_SERVERS", "Options", "Scheduler", "make_server"]

log = logging.getLogger("hami.scheduler")


@dataclass
class Options:
    """Service settings (the ``hami scheduler`` flags)."""

    host: str = "127.0.0.1"
    port: int = 9443
    metrics_host: str | None = "0.0.0.0"
    metrics_port: int = 9395
    cert_file: str | None = None
    key_file: str | None = None
    scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME
    lock_timeout_s: float = DEFAULT_TIMEOUT_S
    lock_retry_timeout_s: float = DEFAULT_RETRY_TIMEOUT_S
    #: ``--node-lock-wait``: how long a bind waits for a node another pod has locked (0: fail at once, as HAMi)
    lock_wait_s: float = DEFAULT_WAIT_S
    #: ``--write-allocation``: ``filter`` (HAMi: filter patches the pod before answering) or ``bind``
    write_allocation: str = "filter"
    #: ``--node-inflight-limit``: pods between filter and Allocate a node takes before others are preferred
    inflight_limit: int = DEFAULT_INFLIGHT_LIMIT
    #: ``--normal-events``: HAMi's FilteringSucceed / BindingSucceed for every pod (Warning events always)
    normal_events: bool = True
    resync_s: float = DEFAULT_INTERVAL_S
    sync_wait_s: float = 30.0
    #: ``asyncio`` (httptools, the default) or ``threaded`` (``http.server``, one thread per connection).
    http_server: str = "asyncio"


#: ``--http-server`` choices.
HTTP_SERVERS = ("asyncio", "threaded")


def make_server(kind: str, extender: Extender, webhook: Webhook, host: str, port: int,
                **kwargs: Any) -> SchedulerServer | AsyncSchedulerServer:
    """The HTTP server of ``kind`` (one of :data:`HTTP_SERVERS`); both answer alike (:mod:`.routes`)."""
    if kind == "asyncio":
        return AsyncSchedulerServer(extender, webhook, host, port, **kwargs)
    if kind == "threaded":
        return SchedulerServer(extender, webhook, host, port, **kwargs)
    raise ValueError(f"unknown HTTP server {kind!r}: choose one of {', '.join(HTTP_SERVERS)}")


class Scheduler:
    """The running service. ``start()`` syncs, then serves; ``stop()`` shuts everything down."""

    def __init__(self, engine: Engine, cluster: Cluster, options: Options | None = None, *,
                 is_leader: Callable[[], bool] | None = None) -> None:
        self.options = options or Options()
        self.engine = engine
        self.cluster = cluster
        self.lock = threading.RLock()
        self.sync = Sync(engine, cluster, engine_lock=self.lock, interval_s=self.options.resync_s,
                         is_leader=is_leader)
        self.extender = Extender(engine, cluster, scheduler_name=self.options.scheduler_name,
                                 lock_timeout=self.options.lock_timeout_s,
                                 lock_retry_timeout=self.options.lock_retry_timeout_s,
                                 lock_wait=self.options.lock_wait_s, write_allocation=self.options.write_allocation,
                                 inflight_limit=self.options.inflight_limit,
                                 normal_events=self.options.normal_events,
                                 engine_lock=self.lock,
                                 ready=self.sync.wait_synced, sync_wait_s=self.options.sync_wait_s)
        # binds waiting for a locked node wake on its watch events (the poll is only a fallback then), and a
        # deleted node's mutex and a deleted pod's unwritten decision are forgotten
        self.sync.node_listeners.append(self.extender.locker.on_node_event)
        self.sync.pod_listeners.append(self.extender.on_pod_event)
        self.extender.locker.poll_s = WATCHED_POLL_S
        self.webhook = Webhook(engine, engine_lock=self.lock)
        self.server = make_server(self.options.http_server, self.extender, self.webhook, self.options.host,
                                  self.options.port, cert_file=self.options.cert_file, key_file=self.options.key_file,
                                  ready=lambda: self.sync.synced)
        self.metrics: tuple[Any, threading.Thread] | None = None

    @property
    def metrics_url(self) -> str | None:
        if self.metrics is None:
            return None
        host, port = self.metrics[0].server_address[:2]
        return f"http://{host}:{port}/metrics"

    def start(self) -> None:
        """Sync with the cluster, then serve HTTP and metrics in background threads."""
        self.sync.start()
        if self.options.metrics_host is not None:
            self.metrics = serve_metrics(self.engine, self.options.metrics_host, self.options.metrics_port,
                                         self.lock, self.extender.locker)
        self.server.start()

    def stop(self) -> None:
        """Graceful shutdown: stop serving, stop the sync loop, close the cluster."""
        self.extender.locker.close()  # binds waiting for a node lock answer now, within the drain
        self.server.shutdown()
        if self.metrics is not None:
            self.metrics[0].shutdown()
            self.metrics[0].server_close()
        self.sync.stop()
        try:
            self.cluster.close()
        except Exception as exc:
            log.warning("closing the cluster: %s", exc)
