"""The scheduler's hand-written HTTP(S) server (``--http-server asyncio``): asyncio with the httptools (llhttp)
parser, handlers in thread pools.

One event-loop thread parses requests in C (llhttp, strict framing) and writes each reply in one ``send``,
whatever the number of open connections. Handlers run in thread pools, since ``/filter`` and ``/bind`` write to
the API server (kube-scheduler binds many pods at once, and a slow write must not stall the other connections).
Each endpoint has a pool of its own, so binds waiting on node locks never delay ``/filter`` or ``/webhook``, and
a flood of admission reviews never queues ahead of ``/filter``; bodies over 256 KiB (bulk) are handled one at a
time in a thread of their own, so decoding them never takes more than one thread's share of the interpreter.

Behaviour matches :mod:`.asgi` (both answer through :mod:`.routes`, bound framing with :mod:`.guard`, and share
their lifecycle, pools and connection deadlines in :mod:`.loopserver`): the same
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
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from email.utils import formatdate
from http import HTTPStatus
from time import monotonic, time
from typing import Any

import httptools

from hami_core.scheduler.loopserver import (
    DECIDE_WORKERS,
    DEFAULT_WORKERS,
    LINGER_BYTES,
    LINGER_S,
    GuardedConnection,
    LoopServer,
    admit,
    handle,
)
from hami_core.scheduler.routes import Admitted, Reply, text

__all__ = ["DECIDE_WORKERS", "DEFAULT_WORKERS", "LINGER_BYTES", "LINGER_S", "AsyncSchedulerServer", "encode_head"]

log = logging.getLogger("hami.scheduler.server")

#: Requests a client may have pipelined before the server stops reading from it.
_MAX_QUEUED = 8
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


class _Connection(GuardedConnection, asyncio.Protocol):
    """One client connection: httptools parser callbacks in, replies out in request order."""

    def __init__(self, server: AsyncSchedulerServer) -> None:
        self.server = server
        self.routes = server.routes
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self._guard_init(monotonic())
        self.transport: asyncio.Transport | None = None
        self.client_cert = False
        self.queue: deque[_Request] = deque()
        self.busy = False
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
        self._opened(connections, self.server.max_connections, self.server.client_timeout_s)
        connections.add(self)

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

    def eof_received(self) -> bool | None:
        if self.refused:  # a lingering refused client is done sending: close now
            self.close()
        return None

    # ------------------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], []
        self._began(self.server.request_timeout_s)

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
        admitted = admit(self.routes, path, self.headers, self.client_cert)
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
        if not self._read_whole():
            return
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
        future = pool.submit(handle, self.routes, request.admitted, request.raw)
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
        if self.refused:  # a second error in the same read (the parser runs on): the first refusal was written
            return
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
        if self.refused:
            self._linger()
        else:
            transport.close()

    def _expire(self) -> None:
        self.timer = None
        # A request still arriving is dropped even behind a pipelined one being handled (its reply is lost with
        # the connection: a client that trickles is not owed one); a connection busy otherwise is the server's.
        if self.transport is not None and (self.reading or not self.busy):
            log.debug("dropping %s: %s", self.transport.get_extra_info("peername"),
                      "request not in whole in time" if self.reading else "silent")
            self.transport.close()


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Failed TLS handshakes and reset connections are the client's business: log them quietly.
    exc = context.get("exception")
    if isinstance(exc, ssl.SSLError | ConnectionError | TimeoutError):
        log.debug("%s: %s", context.get("message"), exc)
    else:
        log.error("%s", context.get("message"), exc_info=exc)


class AsyncSchedulerServer(LoopServer):
    """Serves :class:`.routes.Routes` on one event loop with this module's connections; the lifecycle and the
    keyword arguments are :class:`.loopserver.LoopServer`'s (``gets``: slow GET routes, in a pool of their own).
    """

    serves_slow_gets = True

    def _pools(self, workers: int) -> dict[str, ThreadPoolExecutor]:
        return {**super()._pools(workers), "GET": ThreadPoolExecutor(2, thread_name_prefix="hami-get")}

    def _endpoint(self, host: str, port: int) -> tuple[Callable[[], asyncio.BaseProtocol], dict[str, Any]]:
        self.clock = _Clock()
        self.connections: set[_Connection] = set()
        self.loop.set_exception_handler(_exception_handler)
        return (lambda: _Connection(self)), {"host": host, "port": port, "reuse_address": True}

    def _wind_down(self, first: bool) -> None:
        for connection in list(self.connections):
            if not connection.busy:  # idle, or its reply just went out
                connection.close()
