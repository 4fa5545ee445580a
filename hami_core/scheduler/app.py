"""Wiring: one engine, one lock, the sync feed, the extender, the webhook, the HTTP server(s) and metrics."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hami_core.cluster.base import Cluster
from hami_core.dra.mode import DraAdmission
from hami_core.engine.facade import Engine
from hami_core.scheduler.aioserver import AsyncSchedulerServer
from hami_core.scheduler.auth import Auth
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.identity import TrustedIdentities
from hami_core.scheduler.inflight import DEFAULT_INFLIGHT_LIMIT
from hami_core.scheduler.metrics import MetricsServer, serve_metrics
from hami_core.scheduler.nodelock import DEFAULT_RETRY_TIMEOUT_S, DEFAULT_TIMEOUT_S, DEFAULT_WAIT_S, WATCHED_POLL_S
from hami_core.scheduler.reqmetrics import RequestMetrics
from hami_core.scheduler.requeue import DEFAULT_NUDGE_INTERVAL_S
from hami_core.scheduler.routes import ALL_ROUTES, EXTENDER_ROUTES, WEBHOOK_ROUTES
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
    #: ``--requeue-nudge``: the least seconds between two requeue nudges (0: never nudge; :mod:`.requeue`)
    requeue_nudge_s: float = DEFAULT_NUDGE_INTERVAL_S
    #: ``--filter-reasons``: keep a refused pod's per-node reasons on it (``hami.io/filter-reasons``; :mod:`.reasons`)
    filter_reasons: bool = True
    #: ``--preemption``: device-aware preemption and the preempt verb (:mod:`.preemption`)
    preemption: bool = True
    #: ``--normal-events``: HAMi's FilteringSucceed / BindingSucceed for every pod (Warning events always)
    normal_events: bool = True
    resync_s: float = DEFAULT_INTERVAL_S
    sync_wait_s: float = 30.0
    #: ``--http-server``: ``asyncio`` (the hand-written httptools server, the default) or ``uvicorn``.
    http_server: str = "asyncio"
    #: ``--webhook-bind``: serve ``/webhook`` (and the probes) on this address, and only ``/filter`` and ``/bind``
    #: on ``host:port`` (None: everything on ``host:port``, as HAMi)
    webhook_host: str | None = None
    webhook_port: int = 9443
    #: ``--client-ca-file``: ``/filter`` and ``/bind`` need a client certificate signed by this CA (needs TLS)
    client_ca_file: str | None = None
    #: ``--webhook-client-ca-file``: ``/webhook`` needs a client certificate signed by this CA (needs TLS)
    webhook_client_ca_file: str | None = None
    #: ``--extender-token-file``: bearer tokens that authorise ``/filter`` and ``/bind``
    extender_token_file: str | None = None
    #: ``--metrics-device-detail``: HAMi's per-device and per-pod series (off: one series per node and type)
    metrics_device_detail: bool = False
    #: ``--trusted-identities``: user names that may change scheduler-owned pod annotations (None: deploy/'s
    #: ServiceAccounts of the scheduler and the device plugin)
    trusted_users: tuple[str, ...] | None = None
    #: ``--trusted-groups``: group names that may (none by default; ``system:nodes`` is not trusted)
    trusted_groups: tuple[str, ...] = ()
    #: DRA mode (issue 30): ``dra`` translates every pod's HAMi requests into ResourceClaims; ``device-plugin``
    #: only those of Namespaces labelled ``hami.io/device-mode: dra``
    device_mode: str = "device-plugin"


#: ``--http-server`` choices (the first is the default).
HTTP_SERVERS = ("asyncio", "uvicorn")


def make_server(kind: str, extender: Extender, webhook: Webhook, host: str, port: int, **kwargs: Any) -> Any:
    """The HTTP server of ``kind`` (one of :data:`HTTP_SERVERS`); they answer alike (:mod:`.routes`) and take the
    same keyword arguments (:class:`.aioserver.AsyncSchedulerServer`'s)."""
    if kind == "asyncio":
        return AsyncSchedulerServer(extender, webhook, host, port, **kwargs)
    if kind == "uvicorn":
        from hami_core.scheduler.asgi import UvicornSchedulerServer  # imports uvicorn only when chosen

        return UvicornSchedulerServer(extender, webhook, host, port, **kwargs)
    if kind == "threaded":
        raise ValueError("the threaded HTTP server was retired (it could not bound a request's arrival time or "
                         "its connections): choose one of " + ", ".join(HTTP_SERVERS))
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
                                 requeue_nudge_s=self.options.requeue_nudge_s,
                                 filter_reasons=self.options.filter_reasons,
                                 preemption=self.options.preemption,
                                 engine_lock=self.lock,
                                 ready=self.sync.wait_synced, sync_wait_s=self.options.sync_wait_s)
        # binds waiting for a locked node wake on its watch events (the poll is only a fallback then), and a
        # deleted node's mutex and a deleted pod's unwritten decision are forgotten
        self.sync.node_listeners.append(self.extender.locker.on_node_event)
        self.sync.pod_listeners.append(self.extender.on_pod_event)
        self.extender.pods = self.sync.pods  # a request's pod is the one this feed holds, never the body's
        self.extender.locker.poll_s = WATCHED_POLL_S
        self.webhook = Webhook(engine, engine_lock=self.lock,
                               trusted=TrustedIdentities.of(self.options.trusted_users, self.options.trusted_groups),
                               dra=DraAdmission(engine, cluster, self.options.device_mode))
        #: what filters, binds and reviews did, and the leader gauge: one set for both listeners, on /metrics
        self.request_metrics = RequestMetrics(is_leader)
        self.extender.metrics = self.webhook.metrics = self.request_metrics
        options = self.options
        self.auth = Auth.of(options.client_ca_file, options.extender_token_file, options.webhook_client_ca_file)
        common = {"cert_file": options.cert_file, "key_file": options.key_file, "ready": lambda: self.sync.synced,
                  "auth": self.auth}
        split = options.webhook_host is not None
        extender_cas = [options.client_ca_file] if options.client_ca_file else []
        webhook_cas = [options.webhook_client_ca_file] if options.webhook_client_ca_file else []
        #: the ``--http-bind`` listener (the extender's; everything's without ``--webhook-bind``, whose TLS then
        #: verifies client certificates against both CAs)
        self.server = make_server(options.http_server, self.extender, self.webhook, options.host, options.port,
                                  serves=EXTENDER_ROUTES if split else ALL_ROUTES,
                                  client_ca_file=extender_cas if split else list(dict.fromkeys(extender_cas
                                                                                               + webhook_cas)),
                                  **common)
        #: the ``--webhook-bind`` listener, or None
        self.webhook_server: Any = None
        if split:
            assert options.webhook_host is not None
            try:
                self.webhook_server = make_server(options.http_server, self.extender, self.webhook,
                                                  options.webhook_host, options.webhook_port, serves=WEBHOOK_ROUTES,
                                                  client_ca_file=webhook_cas, **common)
            except BaseException:
                self.server.shutdown()
                raise
        self.metrics: MetricsServer | None = None

    @property
    def servers(self) -> list[Any]:
        """Every listener of the extender and webhook."""
        return [self.server] + ([self.webhook_server] if self.webhook_server is not None else [])

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics is None else self.metrics.url

    def start(self) -> None:
        """Sync with the cluster, then serve HTTP and metrics in background threads."""
        self.sync.start()
        if self.options.metrics_host is not None:
            self.metrics = serve_metrics(self.engine, self.options.metrics_host, self.options.metrics_port,
                                         self.lock, self.extender.locker,
                                         device_detail=self.options.metrics_device_detail,
                                         extender=self.extender, requests=self.request_metrics)
        if self.extender.nudger is not None:
            self.extender.nudger.start()
        if self.extender.reasons is not None:
            self.extender.reasons.start()
        for server in self.servers:
            server.start()

    def stop(self) -> None:
        """Graceful shutdown: stop serving, stop the sync loop, close the cluster."""
        self.extender.locker.close()  # binds waiting for a node lock answer now, within the drain
        for server in self.servers:
            server.shutdown()
        if self.metrics is not None:
            self.metrics.shutdown()
        self.sync.stop()
        if self.extender.nudger is not None:
            self.extender.nudger.stop()
        if self.extender.reasons is not None:
            self.extender.reasons.stop()
        try:
            self.cluster.close()
        except Exception as exc:
            log.warning("closing the cluster: %s", exc)
