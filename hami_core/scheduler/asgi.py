"""The scheduler's HTTP(S) server on uvicorn (``--http-server uvicorn``): uvicorn's HTTP/1.1 protocol (httptools,
keep-alive, pipelining, flow control) carrying a bare ASGI application over :mod:`.routes`.

uvicorn alone would leave three holes that :mod:`.routes` forbids, so its protocol is subclassed (a documented
extension point: ``Config(http=<class>)``) to close them, with the same code as :mod:`.aioserver`:

* it bounds no URL or header (a 256 MiB header line is buffered whole): :class:`.guard.HeadGuard` gives 414/431;
* it has no read deadline (its keep-alive timeout runs only between requests, and a connection that never sends
  a byte is kept forever): a connection silent for ``client_timeout_s`` before its first request, or a request
  not in whole ``request_timeout_s`` after its first byte, is closed;
* ``limit_concurrency`` counts connections and tasks of the whole server: instead, at most ``max_connections`` are
  open (the longest idle closed to make room) and each endpoint has its own gate (:meth:`.routes.Routes.admit`).

The listening socket is made here and served with ``loop.create_server`` (so a busy port fails in the
constructor, and the TLS handshake gets a timeout: uvicorn's own start-up gives it none); the peer's verified
client certificate reaches the application in the scope (``hami.client_cert``). Handlers run in thread pools, one
per endpoint, as in :mod:`.aioserver`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from hami_core.scheduler.aioserver import DECIDE_WORKERS, DEFAULT_WORKERS, LINGER_BYTES, LINGER_S
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

__all__ = ["SchedulerApp", "UvicornSchedulerServer"]

log = logging.getLogger("hami.scheduler.server")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class SchedulerApp:
    """The ASGI application: :class:`.routes.Routes` with its handlers in thread pools."""

    def __init__(self, routes: Routes, pools: dict[str, ThreadPoolExecutor]) -> None:
        self.routes = routes
        self.pools = pools

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "GET":
            await _send(send, self.routes.get(path))
            return
        admitted = scope.get("hami.admitted")
        if method != "POST" or not isinstance(admitted, Admitted):  # the protocol admits every POST it passes on
            await _send(send, text(501, f"unsupported method {method!r}"))
            return
        handed = False
        try:
            chunks: list[bytes] = []
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":  # gone before its body was in: nobody to answer
                    return
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            loop = asyncio.get_running_loop()
            pool = self.pools["bulk" if admitted.bulk else path]
            future = loop.run_in_executor(pool, _handle, self.routes, admitted, b"".join(chunks))
            handed = True
            reply = await future
        finally:
            if not handed:
                self.routes.done(admitted)
        await _send(send, reply)


def _handle(routes: Routes, admitted: Admitted, raw: bytes) -> Reply:
    try:
        return routes.post(admitted.path, raw)
    finally:
        routes.done(admitted)


async def _send(send: Send, reply: Reply) -> None:
    headers = [(b"content-type", reply.content_type.encode()), (b"content-length", b"%d" % len(reply.body)),
               *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers)]
    if reply.close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


class _Protocol(HttpToolsProtocol):
    """uvicorn's protocol with hami's framing limits, read deadlines and connection bound (see the module)."""

    hami: UvicornSchedulerServer  # set on the subclass each server makes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.guard = HeadGuard()
        self.refused = False
        self.dropped = 0  # bytes read and dropped since a refusal
        self.reading = False
        self.idle_since: float | None = self.loop.time()
        self.timer: asyncio.TimerHandle | None = None
        self.client_cert = bool(transport.get_extra_info("peercert"))
        others = set(self.connections)
        super().connection_made(transport)
        if not evict_idle(others, self.hami.max_connections, lambda c: c.idle_since, lambda c: c.transport.close()):
            log.warning("%d connections open, none idle: refusing a new one", len(others))
            self._refuse(text(503, f"{len(others)} connections open; retry", (("Retry-After", "1"),)))
            return
        self._arm(self.hami.client_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            self.dropped += len(data)
            if self.dropped > LINGER_BYTES:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        was_in_head = self.guard.in_head
        try:
            self.parser.feed_data(data)
            self.guard.fed(was_in_head, len(data))
        except (Refused, httptools.HttpParserError) as exc:
            self._refuse(refusal(exc))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.guard.begin()
        self.reading = True
        self.idle_since = None
        self._arm(self.hami.request_timeout_s)

    def on_url(self, url: bytes) -> None:
        self.guard.url(url)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.guard.header(name, value)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        # Refusals are decided here, from the head alone, as aioserver does: no ASGI task is started for them and
        # the reply goes out before any byte of the body is read (raising stops the parser: see data_received).
        self.guard.complete()
        method = self.parser.get_method()
        if method == b"POST":
            lengths, chunked, authorization = [], False, None
            for name, value in self.headers:
                if name == b"content-length":
                    lengths.append(value.decode("latin-1").strip())
                elif name == b"transfer-encoding":
                    chunked = chunked or b"chunked" in value.lower()
                elif name == b"authorization":
                    authorization = value
            path = self.url.split(b"?", 1)[0].decode("latin-1")
            admitted = self.hami.routes.admit(path, lengths, chunked, authorization, self.client_cert)
            if isinstance(admitted, Reply):
                raise Refused(admitted)
            self.scope["hami.admitted"] = admitted  # type: ignore[typeddict-unknown-key]
        elif method != b"GET":
            raise Refused(text(501, f"unsupported method {method.decode('latin-1')!r}"))
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.reading = False
        if self.timer is not None:  # in whole: from now on the server is busy, not the client
            self.timer.cancel()
            self.timer = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if not self.reading:
            self.idle_since = self.loop.time()
        super().on_response_complete()  # arms uvicorn's keep-alive timeout (client_timeout_s) when idle

    def _refuse(self, reply: Reply) -> None:
        self.refused = True
        if self.cycle is not None and not self.cycle.response_complete:
            self.transport.close()  # an earlier request's reply is still to come: this one must not go first
            return
        body = reply.body
        head = [b"HTTP/1.1 %d %s\r\n" % (reply.status, _phrase(reply.status))]
        head += [b"%s: %s\r\n" % pair for pair in self.server_state.default_headers]
        head += [b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers]
        head.append(b"content-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                    % (reply.content_type.encode(), len(body)))
        self.transport.write(b"".join(head) + body)
        if self.transport.can_write_eof():
            # Let the client finish sending (its body) and read this before the socket closes: closing with unread
            # bytes resets the connection. The peer's end of stream or the timer closes it.
            self.transport.write_eof()
            self._arm(LINGER_S)
        else:
            self.transport.close()

    def _arm(self, seconds: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self.timer = None
        if not self.transport.is_closing():
            log.debug("dropping %s: %s", self.client, "request not in whole in time" if self.reading else "silent")
            self.transport.close()


def _phrase(status: int) -> bytes:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b"Unknown"


class UvicornSchedulerServer:
    """Serves :class:`.routes.Routes` with uvicorn on one event loop. Same interface as
    :class:`.aioserver.AsyncSchedulerServer` (and the same keyword arguments)."""

    def __init__(self, extender: Extender, webhook: Webhook, host: str = "127.0.0.1", port: int = 0, *,
                 cert_file: str | None = None, key_file: str | None = None,
                 client_ca_file: str | Iterable[str] | None = None,
                 ready: Callable[[], bool] | None = None, client_timeout_s: float = CLIENT_TIMEOUT_S,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
                 workers: int = DEFAULT_WORKERS, serves: Iterable[str] = ALL_ROUTES, auth: Auth | None = None,
                 limits: dict[str, int] | None = None) -> None:
        self.extender = extender
        self.webhook = webhook
        self.ready = ready or (lambda: True)
        self.routes = Routes(extender, webhook, self.ready, serves=serves, auth=auth, limits=limits)
        self.client_timeout_s = client_timeout_s
        self.request_timeout_s = request_timeout_s
        self.max_connections = max_connections
        self.ssl_context = tls_context(cert_file, key_file, client_ca_file)
        self.tls = self.ssl_context is not None
        self.pools = {"/filter": ThreadPoolExecutor(DECIDE_WORKERS, thread_name_prefix="hami-filter"),
                      "/webhook": ThreadPoolExecutor(DECIDE_WORKERS, thread_name_prefix="hami-webhook"),
                      "/bind": ThreadPoolExecutor(workers, thread_name_prefix="hami-bind"),
                      "bulk": ThreadPoolExecutor(1, thread_name_prefix="hami-bulk")}
        self.config = Config(SchedulerApp(self.routes, self.pools), http="httptools", ws="none", lifespan="off",
                             log_config=None, access_log=False, proxy_headers=False, server_header=False,
                             date_header=False, timeout_keep_alive=int(max(1, client_timeout_s)))
        self.config.load()
        self.state = ServerState()
        self.protocol = type("HamiProtocol", (_Protocol,), {"hami": self})
        self.loop = asyncio.new_event_loop()
        try:
            self._sock = _listen(host, port)
            factory = functools.partial(self.protocol, config=self.config, server_state=self.state, app_state={},
                                        _loop=self.loop)
            self._server = self.loop.run_until_complete(self.loop.create_server(
                factory, sock=self._sock, ssl=self.ssl_context, backlog=1024,
                ssl_handshake_timeout=min(15.0, client_timeout_s) if self.ssl_context else None))
        except BaseException:
            self.loop.close()
            for pool in self.pools.values():
                pool.shutdown(wait=False)
            raise
        host_bound, port_bound = self._sock.getsockname()[:2]
        self._address = (str(host_bound), int(port_bound))
        self._tick()
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        return self._address

    @property
    def url(self) -> str:
        return base_url(self.address, self.tls)

    @property
    def connections(self) -> set[Any]:
        return self.state.connections

    def _tick(self) -> None:
        # uvicorn's Server refreshes these once a second; so does this loop.
        self.state.default_headers = [(b"server", b"hami-scheduler"),
                                      (b"date", formatdate(usegmt=True).encode())]
        self.loop.call_later(1.0, self._tick)

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
        """Stop accepting, close idle connections, give requests being handled up to ``grace_s`` to answer, then
        stop the loop and close everything. Idempotent, from any thread."""
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
        with contextlib.suppress(RuntimeError):
            self.loop.close()

    async def _drain(self, grace_s: float) -> None:
        self._server.close()
        for connection in list(self.state.connections):
            connection.shutdown()  # idle ones close now, busy ones once their reply is out
        deadline = self.loop.time() + grace_s
        while self.state.connections and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        if self.state.connections:
            log.warning("shutdown: %d requests still unanswered after %.0f s; dropping them",
                        len(self.state.connections), grace_s)
        for connection in list(self.state.connections):
            connection.transport.close()
        for task in list(self.state.tasks):
            task.cancel()
        await asyncio.sleep(0)
        if self.loop.is_running():
            self.loop.call_soon(self.loop.stop)


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket. Its protocol is named (IPPROTO_TCP) so that asyncio turns Nagle off on the
    connections it accepts: a socket made with protocol 0 keeps Nagle, and every reply written as head and body
    then waits 40 ms for the client's delayed ACK."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
