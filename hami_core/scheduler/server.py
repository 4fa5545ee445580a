"""The scheduler's threaded HTTP(S) server (``--http-server threaded``): one thread per connection over
``http.server``. What each endpoint answers, and the limits on bodies, live in :mod:`.routes`, shared with the
default asyncio server (:mod:`.aioserver`).

With a certificate and key the server speaks TLS 1.2 or 1.3 only; the handshake runs in the connection's
thread. A client silent for ``client_timeout_s`` (60 s) loses its connection, so slow clients cannot pin threads.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hami_core.scheduler.extender import Extender
from hami_core.scheduler.routes import (
    CLIENT_TIMEOUT_S,
    DRAIN_S,
    MAX_BODY,
    MAX_DEPTH,
    Reply,
    Routes,
    base_url,
    tls_context,
    too_deep,
)
from hami_core.scheduler.webhook import Webhook

__all__ = ["CLIENT_TIMEOUT_S", "MAX_BODY", "MAX_DEPTH", "SchedulerServer", "parse_bind", "too_deep"]

log = logging.getLogger("hami.scheduler.server")


def parse_bind(text: str, default_port: int) -> tuple[str, int]:
    """``host:port`` (``:9395`` = all interfaces, ``[::1]:80`` for IPv6) → (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]") or "0.0.0.0"
    try:
        return host, int(port)
    except ValueError:
        raise ValueError(f"invalid address {text!r}: port must be a number") from None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    ssl_context: ssl.SSLContext | None = None
    client_timeout_s: float = CLIENT_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Condition()
        self._ending = False

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is not None:
            try:
                request.settimeout(min(15.0, self.client_timeout_s))
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS handshake with %s failed: %s", client_address, exc)
                return
            try:
                self._serve_connection(request, client_address)
            finally:
                self.shutdown_request(request)
            return
        self._serve_connection(request, client_address)

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
            ending = self._ending
        if ending:  # accepted just before shutdown, registered just after end_connections looked
            self._end(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)
                self._open_lock.notify_all()

    def end_connections(self) -> None:
        """Shut the reading half of every open connection: an idle keep-alive client is closed at once (its
        handler reads end of stream), a request being handled still writes its reply and then closes."""
        with self._open_lock:
            self._ending = True
            open_now = list(self._open)
        for connection in open_now:
            self._end(connection)

    def wait_ended(self, timeout_s: float) -> bool:
        """Wait until every connection has closed (its last reply written); False if some are still open."""
        with self._open_lock:
            return self._open_lock.wait_for(lambda: not self._open, timeout_s)

    @staticmethod
    def _end(connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            # The plain socket's shutdown: SSLSocket.shutdown would drop the TLS session under a reply still
            # being written.
            socket.socket.shutdown(connection, socket.SHUT_RD)

    def shutdown_request(self, request: Any) -> None:
        with contextlib.suppress(OSError):
            request.shutdown(socket.SHUT_WR)
        request.close()


class SchedulerServer:
    """Routes requests to an :class:`Extender` and a :class:`Webhook`.

    :param ready: ``() -> bool`` reported by ``/readyz`` in its body (always HTTP 200, as HAMi).
    """

    def __init__(self, extender: Extender, webhook: Webhook, host: str = "127.0.0.1", port: int = 0, *,
                 cert_file: str | None = None, key_file: str | None = None,
                 ready: Callable[[], bool] | None = None, client_timeout_s: float = CLIENT_TIMEOUT_S) -> None:
        self.extender = extender
        self.webhook = webhook
        self.ready = ready or (lambda: True)
        self.routes = Routes(extender, webhook, self.ready)
        self.client_timeout_s = client_timeout_s
        self.httpd = _Server((host, port), self._handler_class())
        self.httpd.client_timeout_s = client_timeout_s
        self.httpd.ssl_context = tls_context(cert_file, key_file)
        self.ssl_context = self.httpd.ssl_context
        self.tls = self.ssl_context is not None
        self._thread: threading.Thread | None = None
        self._started = False
        self._closed = False

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        return base_url(self.address, self.tls)

    def start(self) -> None:
        """Serve in a background thread."""
        self._started = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="hami-http", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self._started = True
        self.httpd.serve_forever()

    def shutdown(self, grace_s: float = DRAIN_S) -> None:
        """Stop accepting, close idle connections, give requests being handled up to ``grace_s`` to answer
        (kubelet sends SIGTERM with a grace period; a bind cut off mid-write is a retry for kube-scheduler).
        Idempotent; a server never started just closes (``socketserver``'s shutdown would wait forever for a
        loop that never ran)."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd.end_connections()
        if not self.httpd.wait_ended(grace_s):
            log.warning("shutdown: requests still unanswered after %.0f s; leaving them", grace_s)
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ------------------------------------------------------------------------------------ routing
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "hami-scheduler"
            timeout = server.client_timeout_s  # a silent or slow client loses its connection, not a thread
            # Headers and body go out in separate writes; without TCP_NODELAY each keep-alive response
            # waits ~40 ms for the client's delayed ACK (11 → 268 filter+bind/s in benchmarks/run.py).
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s %s", self.address_string(), format % args)

            def do_GET(self) -> None:
                self._reply(routes.get(self.path.split("?", 1)[0]))

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0]
                refused = routes.unrouted(path)
                if refused is None:
                    chunked = self.headers.get("Transfer-Encoding", "").lower() == "chunked"
                    size = routes.body_size(self.headers.get_all("Content-Length") or [], chunked)
                    if isinstance(size, Reply):
                        refused = size
                if refused is not None:
                    self._reply(refused)
                    return
                assert isinstance(size, int)
                raw = self.rfile.read(size)
                if len(raw) < size:  # the client closed the connection early: nobody to answer
                    self.close_connection = True
                    return
                self._reply(routes.post(path, raw))

            def _reply(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                if reply.close:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(reply.body)

        return Handler
