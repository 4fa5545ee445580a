"""The scheduler's hand-written HTTP(S) server (``--http-server asyncio``): asyncio with the httptools (llhttp)
parser, handlers in thread pools.

One event-loop thread parses requests in C (llhttp, strict framing) and writes each reply in one ``send``,
whatever the number of open connections. Handlers run in thread pools, since ``/filter`` and ``/bind`` write to
the API server (kube-scheduler binds many pods at once, and a slow write must not stall the other connections).
Each endpoint has a pool of its own, so binds waiting on node locks never delay ``/filter`` or ``/webhook``, and
a flood of admission reviews never queues ahead of ``/filter``; bodies over 256 KiB (bulk) are handled one at a
time in a thread of their own, so decoding them never takes more than one thread's share of the interpreter.

Behaviour matches :mod:`.asgi` (both answer through :mod:`.routes` and bound framing with :mod:`.guard`): the same
replies, every refusal decided from the headers before the body is read (404, 401/403, 411, 413, 503 when an
endpoint holds its limit), 414/431 for an oversized URL or head, TLS 1.2/1.3 only (client certificates with a
client CA), a connection silent for ``client_timeout_s`` (during the TLS handshake, before or between requests)
or a request not in whole within ``request_timeout_s`` of its first byte (a slowloris) closed, and at most
``max_connections`` open, the longest idle closed to make room. Requests pipelined on one connection are answered
in order, one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from email.utils import formatdate
from http import HTTPStatus
from time import monotonic, time
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

__all__ = ["DECIDE_WORKERS", "DEFAULT_WORKERS", "LINGER_BYTES", "LINGER_S", "AsyncSchedulerServer", "encode_head"]

log = logging.getLogger("hami.scheduler.server")

#: Threads for ``/bind``. A bind may wait long on the API server or for a locked node (``--node-lock-wait``,
#: 10 s; a PodGroup member ``--node-lock-retry-timeout``, 28 s), and kube-scheduler binds a whole burst at
#: once: up to :data:`~hami_core.scheduler.nodelock.MAX_WAITERS` binds may wait for one node, so the pool holds
#: several such queues and still has threads for binds to free nodes. A waiting thread costs little memory.
DEFAULT_WORKERS = 256
#: Threads for ``/filter``, and as many again for ``/webhook``: pools of their own, so that binds waiting on node
#: locks never hold up scheduling decisions or pod admission, and admission reviews never hold up decisions.
DECIDE_WORKERS = 4
#: Requests a client may have pipelined before the server stops reading from it.
_MAX_QUEUED = 8
#: How long, and how many bytes, a refused client may go on sending (its body) before the connection closes:
#: closing at once, with unread bytes, resets the connection and the client may never read the refusal. What it
#: sends meanwhile is read and dropped.
LINGER_S = 2.0
LINGER_BYTES = 2 << 20
_PHRASES = {status.value: status.phrase for status in HTTPStatus}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class _Clock:
    """The ``Date`` header, formatted once per second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def date(self) -> bytes:
        now = int(time())
        if now != self._second:
            self._second, self._value = now, formatdate(now, usegmt=True).encode()
        return self._value


def encode_head(reply: Reply, date: bytes, close: bool) -> bytes:
    """The status line and headers of ``reply``."""
    extra = b"".join(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1"))
                     for name, value in reply.headers)
    return (b"HTTP/1.1 %d %s\r\nServer: hami-scheduler\r\nDate: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"%s%s\r\n") % (reply.status, _PHRASES.get(reply.status, "Unknown").encode(), date,
                            reply.content_type.encode(), len(reply.body), extra,
                            b"Connection: close\r\n" if close else b"")


class _Request:
    __slots__ = ("admitted", "keep_alive", "method", "path", "raw")

    def __init__(self, method: bytes, path: str, raw: bytes, keep_alive: bool, admitted: Admitted | None) -> None:
        self.method, self.path, self.raw, self.keep_alive, self.admitted = method, path, raw, keep_alive, admitted


class _Connection(asyncio.Protocol):
    """One client connection: httptools parser callbacks in, replies out in request order."""

    def __init__(self, server: AsyncSchedulerServer) -> None:
        self.server = server
        self.routes = server.routes
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.guard = HeadGuard()
        self.transport: asyncio.Transport | None = None
        self.client_cert = False
        self.queue: deque[_Request] = deque()
        self.busy = False
        self.reading = False  # between a request's first byte and its last
        self.idle_since: float | None = monotonic()
        self.refused = False  # answered with an error: ignore the rest of the input, close once written
        self.dropped = 0  # bytes read and dropped since
        self.timer: asyncio.TimerHandle | None = None
        self.url = b""
        self.path = ""  # the URL's path, set once the headers are in
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.admitted: Admitted | None = None  # the POST being read holds its endpoint's gate

    # ------------------------------------------------------------------------------ transport events
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.client_cert = bool(transport.get_extra_info("peercert"))  # verified, or the handshake had failed
        connections = self.server.connections
        if not evict_idle(connections, self.server.max_connections, lambda c: c.idle_since, _Connection.close):
            log.warning("%d connections open, none idle: refusing a new one", len(connections))
            self.server.connections.add(self)
            self._refuse(text(503, f"{len(connections) - 1} connections open; retry", (("Retry-After", "1"),)))
            return
        connections.add(self)
        self._arm(self.server.client_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None  # a reply still being computed has nobody to go to
        for request in self.queue:  # read but never handed to a worker: their places go back
            if request.admitted is not None:
                self.routes.done(request.admitted)
        self.queue.clear()
        self._release()
        if self.timer is not None:
            self.timer.cancel()

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

    def eof_received(self) -> bool | None:
        if self.refused:  # a lingering refused client is done sending: close now
            self.close()
        return None

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], []
        self.guard.begin()
        self.reading = True
        self.idle_since = None
        self._arm(self.server.request_timeout_s)

    def on_url(self, url: bytes) -> None:
        self.guard.url(url)
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.guard.header(name, value)
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.guard.complete()
        if self.refused:
            return
        method = self.parser.get_method()
        self.path = path = self.url.split(b"?", 1)[0].decode("latin-1")
        if method == b"GET":
            return
        if method != b"POST":
            self._refuse(text(501, f"unsupported method {method.decode('latin-1')!r}"))
            return
        lengths, chunked, authorization = [], False, None
        for name, value in self.headers:
            if name == b"content-length":
                lengths.append(value.decode("latin-1").strip())
            elif name == b"transfer-encoding":
                chunked = chunked or b"chunked" in value.lower()
            elif name == b"authorization":
                authorization = value
        admitted = self.routes.admit(path, lengths, chunked, authorization, self.client_cert)
        if isinstance(admitted, Reply):
            self._refuse(admitted)
            return
        self.admitted = admitted
        if (b"expect", b"100-continue") in self.headers and self.transport is not None:
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.reading = False
        if self.refused:
            return
        if self.timer is not None:  # in whole: from now on the server is busy, not the client
            self.timer.cancel()
            self.timer = None
        self.queue.append(_Request(self.parser.get_method(), self.path, b"".join(self.body),
                                   self.parser.should_keep_alive(), self.admitted))
        self.body, self.admitted = [], None
        if len(self.queue) >= _MAX_QUEUED and self.transport is not None:
            self.transport.pause_reading()
        self._next()

    # ------------------------------------------------------------------------------ replies
    def _next(self) -> None:
        if self.busy or self.transport is None or self.transport.is_closing():
            return
        if self.server.draining:  # shutting down: answer nothing new
            self.transport.close()
            return
        if not self.queue:
            if not self.reading:
                self.idle_since = monotonic()
                self._arm(self.server.client_timeout_s)
            return
        request = self.queue.popleft()
        if len(self.queue) < _MAX_QUEUED // 2:
            self.transport.resume_reading()
        if request.method == b"GET" and request.path not in self.routes.slow_gets:
            self._send(self.routes.get(request.path), request.keep_alive)
            self._next()
            return
        if request.method == b"GET":
            admitted = self.routes.get_slow(request.path)
            if isinstance(admitted, Reply):
                self._refuse(admitted)
                return
            self.busy = True
            future = self.server.pools["GET"].submit(self.routes.answer_slow, admitted)
            future.add_done_callback(lambda done: self._from_worker(done, request.keep_alive))
            return
        self.busy = True
        assert request.admitted is not None
        pool = self.server.pools["bulk" if request.admitted.bulk else request.path]
        future = pool.submit(_handle, self.routes, request.admitted, request.raw)
        future.add_done_callback(lambda done: self._from_worker(done, request.keep_alive))

    def _from_worker(self, future: Future[Reply], keep_alive: bool) -> None:
        # Runs in the worker thread (or in shutdown's, for a cancelled request): hand the reply to the loop.
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is shut down, nobody to answer
            self.loop.call_soon_threadsafe(self._done, future, keep_alive)

    def _done(self, future: Future[Reply], keep_alive: bool) -> None:
        self.busy = False
        try:
            reply = future.result()
        except Exception as exc:  # Routes.post catches handler errors; this is the pool refusing work
            reply = text(500, f"internal error: {exc}")
        if self.transport is None or self.transport.is_closing():
            return
        self._send(reply, keep_alive)
        if not self.transport.is_closing():
            self._next()

    def _release(self) -> None:
        if self.admitted is not None:
            self.routes.done(self.admitted)
            self.admitted = None

    def _refuse(self, reply: Reply) -> None:
        self.refused = True
        self._release()
        for request in self.queue:
            if request.admitted is not None:
                self.routes.done(request.admitted)
        self.queue.clear()
        if self.busy:  # a reply for an earlier pipelined request is still to come: it must not follow this one
            self.close()
            return
        self._send(reply, keep_alive=False)

    def _send(self, reply: Reply, keep_alive: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        close = reply.close or not keep_alive
        transport.write(encode_head(reply, self.server.clock.date(), close) + reply.body)
        if not close:
            return
        if self.refused and transport.can_write_eof():
            # Let the client finish sending (and read this) before the socket closes; eof_received or the
            # linger timer closes it.
            transport.write_eof()
            self._arm(LINGER_S)
        else:
            transport.close()

    def _arm(self, seconds: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self.timer = None
        # A request still arriving is dropped even behind a pipelined one being handled (its reply is lost with
        # the connection: a client that trickles is not owed one); a connection busy otherwise is the server's.
        if self.transport is not None and (self.reading or not self.busy):
            log.debug("dropping %s: %s", self.transport.get_extra_info("peername"),
                      "request not in whole in time" if self.reading else "silent")
            self.transport.close()


def _handle(routes: Routes, admitted: Admitted, raw: bytes) -> Reply:
    """A worker's job: the handler's reply; the endpoint's place is given back whatever happens."""
    try:
        return routes.post(admitted.path, raw)
    finally:
        routes.done(admitted)


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Failed TLS handshakes and reset connections are the client's business: log them quietly.
    exc = context.get("exception")
    if isinstance(exc, ssl.SSLError | ConnectionError | TimeoutError):
        log.debug("%s: %s", context.get("message"), exc)
    else:
        log.error("%s", context.get("message"), exc_info=exc)


class AsyncSchedulerServer:
    """Serves :class:`.routes.Routes` on one event loop.

    The socket is bound in the constructor (so a busy port fails there); :meth:`start` serves from a background
    thread, :meth:`serve_forever` from the caller's; :meth:`shutdown` stops either from any thread.

    :param serves: the POST routes of this listener (:data:`~.routes.ALL_ROUTES` by default).
    :param client_ca_file: ask clients for certificates and verify them against this CA file (or these); ``auth``
        says which routes need one.
    """

    def __init__(self, extender: Extender, webhook: Webhook, host: str = "127.0.0.1", port: int = 0, *,
                 cert_file: str | None = None, key_file: str | None = None,
                 client_ca_file: str | Iterable[str] | None = None,
                 ready: Callable[[], bool] | None = None, client_timeout_s: float = CLIENT_TIMEOUT_S,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
                 workers: int = DEFAULT_WORKERS, serves: Iterable[str] = ALL_ROUTES, auth: Auth | None = None,
                 limits: dict[str, int] | None = None, gets: dict[str, Callable[[], Reply]] | None = None) -> None:
        self.extender = extender
        self.webhook = webhook
        self.ready = ready or (lambda: True)
        self.routes = Routes(extender, webhook, self.ready, serves=serves, auth=auth, limits=limits, gets=gets)
        self.client_timeout_s = client_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.clock = _Clock()
        self.connections: set[_Connection] = set()
        self.ssl_context = ssl_context = tls_context(cert_file, key_file, client_ca_file)
        self.tls = ssl_context is not None
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_exception_handler)
        try:
            self._server = self.loop.run_until_complete(self.loop.create_server(
                lambda: _Connection(self), host, port, ssl=ssl_context, reuse_address=True, backlog=1024,
                ssl_handshake_timeout=min(15.0, client_timeout_s) if ssl_context else None))
        except BaseException:
            self.loop.close()
            raise
        host_bound, port_bound = self._server.sockets[0].getsockname()[:2]
        self._address = (str(host_bound), int(port_bound))  # kept: the socket is gone after shutdown
        self.pools = {"/filter": ThreadPoolExecutor(DECIDE_WORKERS, thread_name_prefix="hami-filter"),
                      "/webhook": ThreadPoolExecutor(DECIDE_WORKERS, thread_name_prefix="hami-webhook"),
                      "/bind": ThreadPoolExecutor(workers, thread_name_prefix="hami-bind"),
                      "GET": ThreadPoolExecutor(2, thread_name_prefix="hami-get"),
                      "bulk": ThreadPoolExecutor(1, thread_name_prefix="hami-bulk")}
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._closed = False
        self.draining = False

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
        while True:
            for connection in list(self.connections):
                if not connection.busy:  # idle, or its reply just went out
                    connection.close()
            if not self.connections or self.loop.time() >= deadline:
                break
            await asyncio.sleep(0.02)
        if self.connections:
            log.warning("shutdown: %d requests still unanswered after %.0f s; dropping them",
                        len(self.connections), grace_s)
        for connection in list(self.connections):
            connection.close()
        await asyncio.sleep(0)  # one more turn lets the transports close their sockets
        if self.loop.is_running():
            self.loop.call_soon(self.loop.stop)
