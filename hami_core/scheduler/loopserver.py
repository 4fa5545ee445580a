"""What both scheduler HTTP servers (:mod:`.aioserver`, :mod:`.asgi`) share, so that each keeps only what differs.

:class:`LoopServer` is their lifecycle: :class:`.routes.Routes` served on an event loop of its own, the socket
bound in the constructor, a thread pool per endpoint, and a shutdown that drains. :class:`GuardedConnection` is
what their httptools connections do alike: :class:`.guard.HeadGuard`'s limits, the read deadlines, the bound on
open connections and a refused client's lingering. :func:`admit` reads what :meth:`.routes.Routes.admit` needs
from a POST's head; :func:`handle` is a worker's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httptools

from hami_core.scheduler.auth import Auth
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.guard import HeadGuard, Refused, evict_idle, refusal
from hami_core.scheduler.routes import (
    ALL_ROUTES,
    CLIENT_TIMEOUT_S,
    DRAIN_S,
    MAX_CONNECTIONS,
    REQUEST_TIMEOUT_S,
    Admitted,
    Reply,
    Routes,
    base_url,
    text,
    tls_context,
)
from hami_core.scheduler.webhook import Webhook

__all__ = ["DECIDE_WORKERS", "DEFAULT_WORKERS", "LINGER_BYTES", "LINGER_S", "GuardedConnection", "LoopServer",
           "admit", "handle"]

log = logging.getLogger("hami.scheduler.server")

#: Threads for ``/bind``. A bind may wait long on the API server or for a locked node (``--node-lock-wait``,
#: 10 s; a PodGroup member ``--node-lock-retry-timeout``, 28 s), and kube-scheduler binds a whole burst at
#: once: up to :data:`~hami_core.scheduler.nodelock.MAX_WAITERS` binds may wait for one node, so the pool holds
#: several such queues and still has threads for binds to free nodes. A waiting thread costs little memory.
DEFAULT_WORKERS = 256
#: Threads for ``/filter``, and as many again for ``/webhook``: pools of their own, so that binds waiting on node
#: locks never hold up scheduling decisions or pod admission, and admission reviews never hold up decisions.
DECIDE_WORKERS = 4
#: How long, and how many bytes, a refused client may go on sending (its body) before the connection closes:
#: closing at once, with unread bytes, resets the connection and the client may never read the refusal. What it
#: sends meanwhile is read and dropped.
LINGER_S = 2.0
LINGER_BYTES = 2 << 20


def admit(routes: Routes, path: str, headers: Iterable[tuple[bytes, bytes]], client_cert: bool) -> Admitted | Reply:
    """:meth:`.routes.Routes.admit` for a POST to ``path``, from its head alone (``headers``: names in lower case,
    as parsed); decided before any byte of the body is read."""
    lengths, chunked, authorization = [], False, None
    for name, value in headers:
        if name == b"content-length":
            lengths.append(value.decode("latin-1").strip())
        elif name == b"transfer-encoding":
            chunked = chunked or b"chunked" in value.lower()
        elif name == b"authorization":
            authorization = value
    return routes.admit(path, lengths, chunked, authorization, client_cert)


def handle(routes: Routes, admitted: Admitted, raw: bytes) -> Reply:
    """A worker's job: the handler's reply; the endpoint's place is given back whatever happens."""
    try:
        return routes.post(admitted.path, raw)
    finally:
        routes.done(admitted)


class GuardedConnection:
    """What an httptools connection of either server does alike: the head limits of :class:`.guard.HeadGuard`, a
    deadline (silent for ``client_timeout_s``, a request not in whole ``request_timeout_s`` after its first byte),
    the bound on open connections, and a refused client left to finish sending before the socket closes.

    The class it is mixed into has ``transport``, ``parser`` and ``loop``, answers :meth:`_refuse` and
    :meth:`_expire`, calls :meth:`_guard_init` before its first event, :meth:`_opened` once connected, and
    :meth:`_began` and :meth:`_read_whole` as each request's first and last byte are parsed.
    """

    transport: Any
    parser: httptools.HttpRequestParser
    loop: asyncio.AbstractEventLoop

    def _guard_init(self, idle_since: float) -> None:
        self.guard = HeadGuard()
        self.refused = False  # answered with an error: ignore the rest of the input, close once written
        self.dropped = 0  # bytes read and dropped since
        self.reading = False  # between a request's first byte and its last
        self.idle_since: float | None = idle_since
        self.timer: asyncio.TimerHandle | None = None

    def _refuse(self, reply: Reply) -> None:
        """Answer ``reply`` and close (see :meth:`_linger`), ignoring the rest of the input."""
        raise NotImplementedError

    def _expire(self) -> None:
        """The timer ran out (see :meth:`_arm`)."""
        raise NotImplementedError

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _opened(self, others: Collection[Any], limit: int, timeout_s: float) -> None:
        """Make room for this connection beside ``others`` (those open, not counting it) and give it ``timeout_s``
        to send its first byte; with every other one in the middle of a request, refuse it with a 503."""
        if evict_idle(others, limit, lambda c: c.idle_since, lambda c: c.close()):
            self._arm(timeout_s)
            return
        log.warning("%d connections open, none idle: refusing a new one", len(others))
        self._refuse(text(503, f"{len(others)} connections open; retry", (("Retry-After", "1"),)))

    def data_received(self, data: bytes) -> None:
        if self.refused:
            self.dropped += len(data)
            if self.dropped > LINGER_BYTES:
                self.close()
            return
        was_in_head = self.guard.in_head
        try:
            self.parser.feed_data(data)
            self.guard.fed(was_in_head, len(data))
        except (Refused, httptools.HttpParserError) as exc:
            self._refuse(refusal(exc))

    def _began(self, timeout_s: float) -> None:
        """A request's first byte: its head is counted afresh, and it must be in whole within ``timeout_s``."""
        self.guard.begin()
        self.reading = True
        self.idle_since = None
        self._arm(timeout_s)

    def _read_whole(self) -> bool:
        """A request's last byte: False if the connection was refused (its linger timer runs on)."""
        self.reading = False
        if self.refused:
            return False
        if self.timer is not None:  # in whole: from now on the server is busy, not the client
            self.timer.cancel()
            self.timer = None
        return True

    def _linger(self) -> None:
        """Close once a refusal is written, but let the client finish sending (and read it) first; its end of
        stream, :data:`LINGER_BYTES` more or the timer (:data:`LINGER_S`) closes the socket."""
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self._arm(LINGER_S)
        else:
            self.transport.close()

    def _arm(self, seconds: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, self._expire)


class LoopServer:
    """Serves :class:`.routes.Routes` on one event loop.

    The socket is bound in the constructor (so a busy port fails there); :meth:`start` serves from a background
    thread, :meth:`serve_forever` from the caller's; :meth:`shutdown` stops either from any thread. A subclass
    says how it listens and what its connections are (:meth:`_endpoint`), and how they wind down on shutdown
    (:meth:`_wind_down`, :meth:`_abandon`); its connections have ``close()`` and are in :attr:`connections`.

    :param serves: the POST routes of this listener (:data:`~.routes.ALL_ROUTES` by default).
    :param client_ca_file: ask clients for certificates and verify them against this CA file (or these); ``auth``
        says which routes need one.
    :param gets: GET routes whose answer takes time (:class:`.routes.Routes`), where :attr:`serves_slow_gets`.
    """

    #: Whether the server runs the slow GET routes (``gets``) in a pool of their own.
    serves_slow_gets = False
    #: The open connections.
    connections: set[Any]

    def __init__(self, extender: Extender, webhook: Webhook, host: str = "127.0.0.1", port: int = 0, *,
                 cert_file: str | None = None, key_file: str | None = None,
                 client_ca_file: str | Iterable[str] | None = None,
                 ready: Callable[[], bool] | None = None, client_timeout_s: float = CLIENT_TIMEOUT_S,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
                 workers: int = DEFAULT_WORKERS, serves: Iterable[str] = ALL_ROUTES, auth: Auth | None = None,
                 limits: dict[str, int] | None = None, gets: dict[str, Callable[[], Reply]] | None = None) -> None:
        if gets and not self.serves_slow_gets:
            raise TypeError(f"{type(self).__name__} serves no slow GET routes (gets)")
        self.extender = extender
        self.webhook = webhook
        self.ready = ready or (lambda: True)
        self.routes = Routes(extender, webhook, self.ready, serves=serves, auth=auth, limits=limits, gets=gets)
        self.client_timeout_s = client_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.ssl_context = tls_context(cert_file, key_file, client_ca_file)
        self.tls = self.ssl_context is not None
        self.pools = self._pools(workers)
        self.draining = False
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._closed = False
        self.loop = asyncio.new_event_loop()
        try:
            factory, where = self._endpoint(host, port)
            self._server = self.loop.run_until_complete(self.loop.create_server(
                factory, ssl=self.ssl_context, backlog=1024,
                ssl_handshake_timeout=min(15.0, client_timeout_s) if self.ssl_context else None, **where))
        except BaseException:
            self.loop.close()
            for pool in self.pools.values():
                pool.shutdown(wait=False)
            raise
        host_bound, port_bound = self._server.sockets[0].getsockname()[:2]
        self._address = (str(host_bound), int(port_bound))  # kept: the socket is gone after shutdown

    def _pools(self, workers: int) -> dict[str, ThreadPoolExecutor]:
        """A pool per endpoint, so that binds waiting on node locks never delay ``/filter`` or ``/webhook`` and a
        flood of admission reviews never queues ahead of ``/filter``; bodies over 256 KiB (bulk) one at a time,
        so that decoding them never takes more than one thread's share of the interpreter."""
        return {"/filter": ThreadPoolExecutor(DECIDE_WORKERS, thread_name_prefix="hami-filter"),
                "/webhook": ThreadPoolExecutor(DECIDE_WORKERS, thread_name_prefix="hami-webhook"),
                "/bind": ThreadPoolExecutor(workers, thread_name_prefix="hami-bind"),
                # preemption deletes pods and patches status: off the filter threads
                "/preempt": ThreadPoolExecutor(2, thread_name_prefix="hami-preempt"),
                "bulk": ThreadPoolExecutor(1, thread_name_prefix="hami-bulk")}

    def _endpoint(self, host: str, port: int) -> tuple[Callable[[], asyncio.BaseProtocol], dict[str, Any]]:
        """The protocol factory and where to listen (``loop.create_server``'s ``host`` and ``port``, or ``sock``),
        once :attr:`loop`, :attr:`routes` and :attr:`pools` exist."""
        raise NotImplementedError

    def _wind_down(self, first: bool) -> None:
        """Close what may close while draining: called as draining begins (``first``) and every 20 ms after."""
        raise NotImplementedError

    def _abandon(self) -> None:
        """Once the grace period is over and every connection closed: drop what is left of their requests."""

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    @property
    def url(self) -> str:
        return base_url(self.address, self.tls)

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self.serve_forever, name="hami-http", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        try:
            self.loop.run_forever()
        finally:
            self._stopped.set()

    def shutdown(self, grace_s: float = DRAIN_S) -> None:
        """Stop accepting, close idle connections, give requests being handled up to ``grace_s`` to answer
        (kubelet sends SIGTERM with a grace period; a bind cut off mid-write is a retry for kube-scheduler),
        then stop the loop and close everything. Idempotent, from any thread."""
        if self._closed:
            return
        self._closed = True
        if self.loop.is_running():
            drained = asyncio.run_coroutine_threadsafe(self._drain(grace_s), self.loop)
            with contextlib.suppress(Exception):
                drained.result(timeout=grace_s + 5)
            self._stopped.wait(timeout=5)
        else:
            self.loop.run_until_complete(self._drain(0))
        if self._thread is not None:
            self._thread.join(timeout=5)
        for pool in self.pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        with contextlib.suppress(RuntimeError):  # still running: the loop thread did not stop in time
            self.loop.close()

    async def _drain(self, grace_s: float) -> None:
        self.draining = True
        self._server.close()
        deadline = self.loop.time() + grace_s
        self._wind_down(first=True)
        while self.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
            self._wind_down(first=False)
        if self.connections:
            log.warning("shutdown: %d requests still unanswered after %.0f s; dropping them",
                        len(self.connections), grace_s)
        for connection in list(self.connections):
            connection.close()
        self._abandon()
        await asyncio.sleep(0)  # one more turn lets the transports close their sockets
        if self.loop.is_running():
            self.loop.call_soon(self.loop.stop)
