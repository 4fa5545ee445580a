"""The scheduler's HTTP(S) server (spec §5.1): ``/filter``, ``/bind``, ``/webhook``, ``/healthz``, ``/readyz``.

Bodies are limited to 1 MiB (413 beyond) and 64 levels of nesting; chunked bodies get 411. A missing,
undecodable or lying body is answered 400 with a one-line text message;
an unexpected handler exception 500 with a one-line message (the traceback goes to the log only).
With a certificate and key the server speaks TLS 1.2 or 1.3 only; the handshake runs in the connection's
thread. A client silent for ``client_timeout_s`` (60 s) loses its connection, so slow clients cannot pin threads.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hami_core.scheduler.extender import BadRequest, Extender
from hami_core.scheduler.webhook import Webhook

__all__ = ["CLIENT_TIMEOUT_S", "MAX_BODY", "MAX_DEPTH", "SchedulerServer", "parse_bind", "too_deep"]

log = logging.getLogger("hami.scheduler.server")

MAX_BODY = 1 << 20
#: How long a connection may stay silent (request line, headers, body) before it is dropped.
CLIENT_TIMEOUT_S = 60.0
_DIGITS = frozenset("0123456789")


class _NoBody:
    """Marks "already answered with an error" (a JSON body may itself be ``null``)."""


NO_BODY = _NoBody()
#: Kubernetes objects are a dozen levels deep; a body nested deeper is refused before any handler recurses into it.
MAX_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (decoded JSON) nests lists/objects more than ``limit`` levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


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

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is not None:
            try:
                request.settimeout(min(15.0, self.client_timeout_s))
                request = self.ssl_context.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS handshake with %s failed: %s", client_address, exc)
                return
            try:
                super().finish_request(request, client_address)
            finally:
                self.shutdown_request(request)
            return
        super().finish_request(request, client_address)

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
        self.client_timeout_s = client_timeout_s
        self.httpd = _Server((host, port), self._handler_class())
        self.httpd.client_timeout_s = client_timeout_s
        if cert_file or key_file:
            if not (cert_file and key_file):
                raise ValueError("TLS needs both a certificate and a key file")
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            # TLS 1.2 and 1.3 only, whatever the system OpenSSL would still allow (kube-apiserver speaks both).
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(cert_file, key_file)
            self.httpd.ssl_context = ctx
        self.tls = self.httpd.ssl_context is not None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"{'https' if self.tls else 'http'}://{host}:{port}"

    def start(self) -> None:
        """Serve in a background thread."""
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="hami-http", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        """Stop accepting, finish the loop, close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # ------------------------------------------------------------------------------------ routing
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

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
                path = self.path.split("?", 1)[0]
                if path == "/healthz":
                    self._send(200, b"", "text/plain")
                elif path == "/readyz":
                    self._send(200, b"ok" if server.ready() else b"not leader or not synced", "text/plain")
                else:
                    self._text(404, f"no route for GET {path}")

            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0]
                routes: dict[str, Callable[[Any], dict[str, Any]]] = {
                    "/filter": server.extender.filter, "/bind": server.extender.bind,
                    "/webhook": server.webhook.review}
                route = routes.get(path)
                if route is None:
                    self._text(404, f"no route for POST {path}")
                    return
                body = self._body()
                if body is NO_BODY:
                    return
                try:
                    result = route(body)
                except BadRequest as exc:
                    self._text(400, str(exc))
                    return
                except Exception as exc:
                    log.exception("%s failed", path)
                    self._text(500, f"internal error in {path}: {' '.join(str(exc).split()) or type(exc).__name__}")
                    return
                self._send(200, json.dumps(result).encode(), "application/json")

            def _body(self) -> Any:
                length = self.headers.get("Content-Length")
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    self._text(411, "chunked bodies are not supported; send Content-Length")
                    return NO_BODY
                lengths = self.headers.get_all("Content-Length") or []
                if len(set(lengths)) > 1:
                    self._text(400, "conflicting Content-Length headers")
                    return NO_BODY
                # Digits only: int() would also take " 12", "+12" and "1_2", which no HTTP peer sends.
                if length is not None and (not length or not set(length) <= _DIGITS):
                    self._text(400, f"invalid Content-Length {length[:40]!r}")
                    return NO_BODY
                size = int(length) if length is not None else 0
                if size <= 0:
                    self._text(400, "Please send a request body")
                    return NO_BODY
                if size > MAX_BODY:
                    self._text(413, f"request body of {size} bytes exceeds the {MAX_BODY}-byte limit")
                    return NO_BODY
                raw = self.rfile.read(size)
                if len(raw) < size:  # the client closed the connection early: nobody to answer
                    self.close_connection = True
                    return NO_BODY
                try:
                    body = json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    self._text(400, f"request body is not valid JSON: {exc}")
                    return NO_BODY
                except RecursionError:
                    body = NO_BODY
                # Counting brackets (C speed) rules out deep nesting for typical bodies without walking them.
                if body is NO_BODY or (raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and too_deep(body)):
                    self._text(400, f"request body is nested more than {MAX_DEPTH} levels deep")
                    return NO_BODY
                return body

            def _text(self, code: int, message: str) -> None:
                # One line whatever the message quotes from the request (clients log the first line only).
                self._send(code, (" ".join(message.split()) + "\n").encode(), "text/plain; charset=utf-8")

            def _send(self, code: int, payload: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                if code >= 400:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                self.wfile.write(payload)

        return Handler
