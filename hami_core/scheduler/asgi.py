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
per endpoint, as in :mod:`.aioserver`; the lifecycle, the pools and the connections' deadlines are
:mod:`.loopserver`'s, shared with it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from typing import Any

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from hami_core.scheduler.guard import Refused
from hami_core.scheduler.loopserver import GuardedConnection, LoopServer, admit, handle
from hami_core.scheduler.routes import Admitted, Reply, Routes, text

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
            future = loop.run_in_executor(pool, handle, self.routes, admitted, b"".join(chunks))
            handed = True
            reply = await future
        finally:
            if not handed:
                self.routes.done(admitted)
        await _send(send, reply)


async def _send(send: Send, reply: Reply) -> None:
    headers = [(b"content-type", reply.content_type.encode()), (b"content-length", b"%d" % len(reply.body)),
               *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in reply.headers)]
    if reply.close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


class _Protocol(GuardedConnection, HttpToolsProtocol):
    """uvicorn's protocol with hami's framing limits, read deadlines and connection bound (see the module)."""

    hami: UvicornSchedulerServer  # set on the subclass each server makes

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._guard_init(self.loop.time())
        self.client_cert = bool(transport.get_extra_info("peercert"))
        others = set(self.connections)
        super().connection_made(transport)
        self._opened(others, self.hami.max_connections, self.hami.client_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            self._unset_keepalive_if_required()  # as uvicorn's own data_received, which this one replaces
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._began(self.hami.request_timeout_s)

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
            path = self.url.split(b"?", 1)[0].decode("latin-1")
            admitted = admit(self.hami.routes, path, self.headers, self.client_cert)
            if isinstance(admitted, Reply):
                raise Refused(admitted)
            self.scope["hami.admitted"] = admitted  # type: ignore[typeddict-unknown-key]
        elif method != b"GET":
            raise Refused(text(501, f"unsupported method {method.decode('latin-1')!r}"))
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._read_whole()  # never refused here: a refusal stops the parser (see data_received)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if not self.reading:
            self.idle_since = self.loop.time()
        super().on_response_complete()  # arms uvicorn's keep-alive timeout (client_timeout_s) when idle

    def _refuse(self, reply: Reply) -> None:
        if self.refused:  # a second error in the same read (the parser runs on): the first refusal was written
            return
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
        self._linger()

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


class UvicornSchedulerServer(LoopServer):
    """Serves :class:`.routes.Routes` with uvicorn on one event loop. Same interface as
    :class:`.aioserver.AsyncSchedulerServer` (and the same keyword arguments: :class:`.loopserver.LoopServer`'s,
    but for ``gets``)."""

    @property
    def connections(self) -> set[Any]:  # type: ignore[override]
        return self.state.connections

    def _endpoint(self, host: str, port: int) -> tuple[Callable[[], asyncio.BaseProtocol], dict[str, Any]]:
        self.config = Config(SchedulerApp(self.routes, self.pools), http="httptools", ws="none", lifespan="off",
                             log_config=None, access_log=False, proxy_headers=False, server_header=False,
                             date_header=False, timeout_keep_alive=int(max(1, self.client_timeout_s)))
        self.config.load()
        self.state = ServerState()
        self.protocol = type("HamiProtocol", (_Protocol,), {"hami": self})
        self._sock = _listen(host, port)
        self._tick()
        factory = functools.partial(self.protocol, config=self.config, server_state=self.state, app_state={},
                                    _loop=self.loop)
        return factory, {"sock": self._sock}

    def _tick(self) -> None:
        # uvicorn's Server refreshes these once a second; so does this loop.
        self.state.default_headers = [(b"server", b"hami-scheduler"),
                                      (b"date", formatdate(usegmt=True).encode())]
        self.loop.call_later(1.0, self._tick)

    def _wind_down(self, first: bool) -> None:
        if first:
            for connection in list(self.connections):
                connection.shutdown()  # idle ones close now, busy ones once their reply is out

    def _abandon(self) -> None:
        for task in list(self.state.tasks):
            task.cancel()


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
