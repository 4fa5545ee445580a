"""The scheduler's HTTP(S) server (spec §5.1): ``/filter``, ``/bind``, ``/webhook``, ``/healthz``, ``/readyz``.

Bodies are limited to 1 MiB. A missing or undecodable body is answered 400 with a one-line text message;
an unexpected handler exception 500 with a one-line message (the traceback goes to the log only).
With a certificate and key the server speaks TLS; the handshake runs in the connection's thread.
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

__all__ = ["MAX_BODY", "SchedulerServer", "parse_bind"]

log = logging.getLogger("hami.scheduler.server")

MAX_BODY = 1 << 20


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

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is not None:
            try:
                request.settimeout(15)
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
                 ready: Callable[[], bool] | None = None) -> None:
        self.extender = extender
        self.webhook = webhook
        self.ready = ready or (lambda: True)
        self.httpd = _Server((host, port), self._handler_class())
        if cert_file or key_file:
            if not (cert_file and key_file):
                raise ValueError("TLS needs both a certificate and a key file")
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
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
            timeout = 60
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
                if body is None:
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
                    return None
                try:
                    size = int(length) if length is not None else 0
                except ValueError:
                    self._text(400, f"invalid Content-Length {length!r}")
                    return None
                if size <= 0:
                    self._text(400, "Please send a request body")
                    return None
                if size > MAX_BODY:
                    self._text(413, f"request body of {size} bytes exceeds the {MAX_BODY}-byte limit")
                    return None
                raw = self.rfile.read(size)
                try:
                    return json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    self._text(400, f"request body is not valid JSON: {exc}")
                    return None

            def _text(self, code: int, message: str) -> None:
                self._send(code, (message + "\n").encode(), "text/plain; charset=utf-8")

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
