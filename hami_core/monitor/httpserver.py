"""The monitor's HTTP server: wsgiref's, one thread per connection, with every input bounded.

The monitor listens on the node network (Prometheus scrapes it), where any pod can reach it. Without bounds one
client could hold a thread forever (http.server has no timeout), send 6 MiB of headers per request (64 KiB a line,
100 lines) or open thousands of connections, each a thread. So:

- the request head (request line and headers) must arrive within ``read_deadline_s`` (10 s) in all, however
  slowly it trickles in, and be at most ``max_head`` bytes (16 KiB; a longer request line is 414, longer headers
  431); the head is read from the socket here, so no buffered ``readline`` can wait past the deadline;
- writing the answer gets ``io_timeout_s`` (10 s) per send: a scraper that stops reading loses the connection;
- at most ``max_connections`` (32) connections are served at once; one more is answered 503 and closed at once,
  without a thread; the listen backlog is 128.
"""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler

from prometheus_client.exposition import ThreadingWSGIServer

__all__ = ["IO_TIMEOUT_S", "MAX_CONNECTIONS", "MAX_HEAD", "MAX_REQUEST_LINE", "READ_DEADLINE_S", "BoundedServer",
           "make_bounded_server"]

log = logging.getLogger("hami.monitor")

MAX_REQUEST_LINE = 8 * 1024
MAX_HEAD = 16 * 1024
READ_DEADLINE_S = 10.0
IO_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 32
BACKLOG = 128
#: How often the "connection limit reached" warning may repeat (seconds).
WARN_EVERY_S = 60.0

_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 37\r\n"
         b"Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections to hami monitor\n")


class _HeadTooLarge(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status  # 414: the request line (URL) is too long; 431: the headers are


def _read_head(sock: socket.socket, deadline: float, limit: int) -> bytes | None:
    """Bytes up to and including the blank line that ends the head (plus whatever followed in the same
    packets); None when the client closed first. Raises TimeoutError past ``deadline``, _HeadTooLarge past
    ``limit`` bytes."""
    buf = bytearray()
    while True:
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            end = buf.find(b"\n\n")
        if end >= 0 and end <= limit:
            return bytes(buf)
        if len(buf) > limit:
            raise _HeadTooLarge(431 if b"\n" in buf[:MAX_REQUEST_LINE + 2] else 414)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        chunk = sock.recv(4096)
        if not chunk:
            return None
        buf += chunk


class _Handler(WSGIRequestHandler):
    server: BoundedServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every few seconds is not news; errors are logged by the server

    def _refuse(self, code: int) -> None:
        self.requestline, self.request_version, self.command = "", "HTTP/1.0", ""
        self.send_error(code)

    def handle(self) -> None:
        srv = self.server
        self.rfile.close()  # the socket is read below, unbuffered; the file would only hold a reference to it
        try:
            head = _read_head(self.connection, time.monotonic() + srv.read_deadline_s, srv.max_head)
        except TimeoutError:
            log.debug("dropped %s: no complete request head within %.0f s", self.client_address[0],
                      srv.read_deadline_s)
            return
        except _HeadTooLarge as exc:
            self.connection.settimeout(srv.io_timeout_s)
            self._refuse(exc.status)
            return
        if head is None:
            return
        self.connection.settimeout(srv.io_timeout_s)
        self.rfile = io.BytesIO(head)
        self.raw_requestline = self.rfile.readline(MAX_REQUEST_LINE + 1)
        if len(self.raw_requestline) > MAX_REQUEST_LINE:
            self._refuse(414)
            return
        if not self.parse_request():  # an error was sent
            return
        handler = ServerHandler(self.rfile, self.wfile, self.get_stderr(), self.get_environ(), multithread=False)
        handler.request_handler = self  # type: ignore[attr-defined]
        handler.run(srv.get_app())


class BoundedServer(ThreadingWSGIServer):
    """``ThreadingWSGIServer`` with a connection limit, a backlog and quiet error handling (see module doc)."""

    request_queue_size = BACKLOG
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], *, max_connections: int = MAX_CONNECTIONS,
                 read_deadline_s: float = READ_DEADLINE_S, io_timeout_s: float = IO_TIMEOUT_S,
                 max_head: int = MAX_HEAD) -> None:
        self.max_connections = max_connections
        self.read_deadline_s = read_deadline_s
        self.io_timeout_s = io_timeout_s
        self.max_head = max_head
        self._slots = threading.BoundedSemaphore(max_connections)
        self._warned_at = -WARN_EVERY_S
        self._refused = 0
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._busy(request, client_address)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _busy(self, request: socket.socket, client_address: Any) -> None:
        try:
            request.setblocking(False)
            request.send(_BUSY)  # a fresh socket's send buffer is empty: this never blocks the accept loop
        except OSError:
            pass
        self.shutdown_request(request)
        self._refused += 1
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("hami monitor: %d connections open (the limit); refused %d connection(s), the last "
                        "from %s", self.max_connections, self._refused, client_address[0])
            self._refused = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints a traceback to stderr for any error in a handler; a client that resets or stalls
        # is routine here, so say it at debug level only.
        log.debug("connection from %s ended with an error", client_address[0], exc_info=True)


def make_bounded_server(host: str, port: int, app: Callable[..., Iterable[bytes]], **limits: Any) -> BoundedServer:
    """A :class:`BoundedServer` for ``app`` on ``host:port`` (an IPv6 literal listens on IPv6)."""
    cls: type[BoundedServer] = BoundedServer
    if ":" in host:
        cls = type("BoundedServer6", (BoundedServer,), {"address_family": socket.AF_INET6})
    server = cls((host, port), **limits)
    server.set_app(app)
    return server
