"""The scheduler's default HTTP(S) server: asyncio with the httptools (llhttp) parser, handlers in a thread pool.

Why not ``http.server`` (still there: ``--http-server threaded``): it spends a thread per connection and parses
headers with ``email``. Here one event-loop thread parses requests in C (llhttp, strict framing) and writes
each reply in one ``send``, whatever the number of open connections; per request both measure the same on a
2-core machine (docs/performance.md). Handlers run in thread pools, since ``/filter`` and
``/bind`` write to the API server (kube-scheduler binds many pods at once, and a slow write must not stall the
other connections). Binds have a pool of their own, so binds waiting on node locks never delay ``/filter`` or
``/webhook``.

Behaviour matches :mod:`.server` (both answer through :mod:`.routes`): the same replies, body limits (413
from the headers alone, 411 for chunked bodies, 400 for malformed framing, which llhttp rejects before any
handler runs), TLS 1.2/1.3 only, and a client silent for ``client_timeout_s`` (during the TLS handshake,
between requests, or mid-request) loses its connection. Requests pipelined on one connection are answered in
order, one at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from email.utils import formatdate
from http import HTTPStatus
from time import time
from typing import Any

import httptools

from hami_core.scheduler.extender import Extender
from hami_core.scheduler.routes import CLIENT_TIMEOUT_S, DRAIN_S, Reply, Routes, base_url, text, tls_context
from hami_core.scheduler.webhook import Webhook

__all__ = ["DECIDE_WORKERS", "DEFAULT_WORKERS", "AsyncSchedulerServer"]

log = logging.getLogger("hami.scheduler.server")

#: Threads for ``/bind``. A bind may wait long on the API server or for a locked node (``--node-lock-wait``,
#: 10 s; a PodGroup member ``--node-lock-retry-timeout``, 28 s), and kube-scheduler binds a whole burst at
#: once: up to :data:`~hami_core.scheduler.nodelock.MAX_WAITERS` binds may wait for one node, so the pool holds
#: several such queues and still has threads for binds to free nodes. A waiting thread costs little memory.
DEFAULT_WORKERS = 256
#: Threads for ``/filter`` and ``/webhook``: a pool of their own, so that binds waiting on node locks never hold
#: up scheduling decisions or pod admission (kube-scheduler filters one pod at a time).
DECIDE_WORKERS = 4
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


class _Request:
    __slots__ = ("keep_alive", "method", "path", "raw")

    def __init__(self, method: bytes, path: str, raw: bytes, keep_alive: bool) -> None:
        self.method, self.path, self.raw, self.keep_alive = method, path, raw, keep_alive


class _Connection(asyncio.Protocol):
    """One client connection: httptools parser callbacks in, replies out in request order."""

    def __init__(self, server: AsyncSchedulerServer) -> None:
        self.server = server
        self.routes = server.routes
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.queue: deque[_Request] = deque()
        self.busy = False
        self.refused = False  # answered with an error: ignore the rest of the input, close once written
        self.timer: asyncio.TimerHandle | None = None
        self.url = b""
        self.path = ""  # the URL's path, set once the headers are in
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    # ------------------------------------------------------------------------------ transport events
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self.transport = None  # a reply still being computed has nobody to go to
        self.queue.clear()
        if self.timer is not None:
            self.timer.cancel()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if not self.busy:
            self._arm()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(text(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            self._refuse(_parse_error(str(exc)))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        self.url, self.headers, self.body = b"", [], []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        method = self.parser.get_method()
        self.path = path = self.url.split(b"?", 1)[0].decode("latin-1")
        if method == b"GET":
            return
        if method != b"POST":
            self._refuse(text(501, f"unsupported method {method.decode('latin-1')!r}"))
            return
        refused = self.routes.unrouted(path)
        if refused is None:
            lengths = [value.decode("latin-1").strip() for name, value in self.headers if name == b"content-length"]
            chunked = any(name == b"transfer-encoding" and b"chunked" in value.lower() for name, value in self.headers)
            size = self.routes.body_size(lengths, chunked)
            if isinstance(size, Reply):
                refused = size
        if refused is not None:
            self._refuse(refused)
        elif (b"expect", b"100-continue") in self.headers and self.transport is not None:
            self.transport.write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if not self.refused:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if self.refused:
            return
        self.queue.append(_Request(self.parser.get_method(), self.path, b"".join(self.body),
                                   self.parser.should_keep_alive()))
        self.body = []
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
            return
        request = self.queue.popleft()
        if len(self.queue) < _MAX_QUEUED // 2:
            self.transport.resume_reading()
        if request.method == b"GET":
            self._send(self.routes.get(request.path), request.keep_alive)
            self._next()
            return
        self.busy = True
        if self.timer is not None:  # the server is busy now, not the client
            self.timer.cancel()
        pool = self.server.bind_pool if request.path == "/bind" else self.server.executor
        future = pool.submit(self.routes.post, request.path, request.raw)
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
            self._arm()
            self._next()

    def _refuse(self, reply: Reply) -> None:
        self.refused = True
        self.queue.clear()
        self._send(reply, keep_alive=False)

    def _send(self, reply: Reply, keep_alive: bool) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        close = reply.close or not keep_alive
        head = (b"HTTP/1.1 %d %s\r\nServer: hami-scheduler\r\nDate: %s\r\nContent-Type: %s\r\n"
                b"Content-Length: %d\r\n%s\r\n") % (
            reply.status, _PHRASES.get(reply.status, "Unknown").encode(), self.server.clock.date(),
            reply.content_type.encode(), len(reply.body), b"Connection: close\r\n" if close else b"")
        self.transport.write(head + reply.body)
        if close:
            self.transport.close()

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(self.server.client_timeout_s, self._expire)

    def _expire(self) -> None:
        if self.transport is not None and not self.busy:
            log.debug("dropping %s: silent for %.0f s", self.transport.get_extra_info("peername"),
                      self.server.client_timeout_s)
            self.transport.close()


def _parse_error(message: str) -> Reply:
    """llhttp's complaint as the reply :mod:`.routes` gives for the same fault (framing is checked by llhttp here)."""
    if "Content-Length" in message:
        if "Duplicate" in message:  # llhttp refuses repeated Content-Length even when the values agree
            return text(400, "conflicting Content-Length headers")
        return text(400, f"invalid Content-Length ({message})")
    return text(400, f"malformed HTTP request: {message}")


def _exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Failed TLS handshakes and reset connections are the client's business: log them quietly.
    exc = context.get("exception")
    if isinstance(exc, ssl.SSLError | ConnectionError | TimeoutError):
        log.debug("%s: %s", context.get("message"), exc)
    else:
        log.error("%s", context.get("message"), exc_info=exc)


class AsyncSchedulerServer:
    """Serves :class:`.routes.Routes` on one event loop. Same interface as :class:`.server.SchedulerServer`.

    The socket is bound in the constructor (so a busy port fails there); :meth:`start` serves from a background
    thread, :meth:`serve_forever` from the caller's; :meth:`shutdown` stops either from any thread.
    """

    def __init__(self, extender: Extender, webhook: Webhook, host: str = "127.0.0.1", port: int = 0, *,
                 cert_file: str | None = None, key_file: str | None = None,
                 ready: Callable[[], bool] | None = None, client_timeout_s: float = CLIENT_TIMEOUT_S,
                 workers: int = DEFAULT_WORKERS) -> None:
        self.extender = extender
        self.webhook = webhook
        self.ready = ready or (lambda: True)
        self.routes = Routes(extender, webhook, self.ready)
        self.client_timeout_s = client_timeout_s
        self.clock = _Clock()
        self.connections: set[_Connection] = set()
        self.ssl_context = ssl_context = tls_context(cert_file, key_file)
        self.tls = ssl_context is not None
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_exception_handler)
        try:
            self._server = self.loop.run_until_complete(self.loop.create_server(
                lambda: _Connection(self), host, port, ssl=ssl_context, reuse_address=True, backlog=512,
                ssl_handshake_timeout=min(15.0, client_timeout_s) if ssl_context else None))
        except BaseException:
            self.loop.close()
            raise
        host_bound, port_bound = self._server.sockets[0].getsockname()[:2]
        self._address = (str(host_bound), int(port_bound))  # kept: the socket is gone after shutdown
        self.executor = ThreadPoolExecutor(DECIDE_WORKERS, thread_name_prefix="hami-http")
        self.bind_pool = ThreadPoolExecutor(workers, thread_name_prefix="hami-bind")
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
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.bind_pool.shutdown(wait=False, cancel_futures=True)
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
