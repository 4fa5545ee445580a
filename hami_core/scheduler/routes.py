"""What the scheduler's HTTP endpoints answer (spec §5.1), independent of the server that carries the bytes.

Both servers (:mod:`.server`, threads over ``http.server``; :mod:`.aioserver`, asyncio over httptools) check
request framing and bodies here, so their answers are the same byte for byte:

* ``GET /healthz`` → 200 empty, ``GET /readyz`` → 200 ``ok`` or ``not leader or not synced`` (always 200, as HAMi);
* ``POST /filter``, ``/bind``, ``/webhook`` → the handler's JSON, 200;
* bodies are limited to 1 MiB (413, answered from the headers alone) and 64 levels of nesting; chunked bodies get
  411; a missing, undecodable or lying body 400 with a one-line text message; an unexpected handler exception
  500 with a one-line message (the traceback goes to the log only). Every 4xx/5xx closes the connection.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.scheduler.extender import BadRequest, Extender
from hami_core.scheduler.webhook import Webhook

__all__ = ["CLIENT_TIMEOUT_S", "DRAIN_S", "MAX_BODY", "MAX_DEPTH", "Reply", "Routes", "base_url", "text", "tls_context",
           "too_deep"]

log = logging.getLogger("hami.scheduler.server")

MAX_BODY = 1 << 20
#: Kubernetes objects are a dozen levels deep; a body nested deeper is refused before any handler recurses into it.
MAX_DEPTH = 64
#: How long a connection may stay silent (request line, headers, body, or idle keep-alive) before it is dropped.
CLIENT_TIMEOUT_S = 60.0
#: How long shutdown waits for requests already being handled (a bind waiting on the API server) to answer.
DRAIN_S = 10.0
_DIGITS = frozenset("0123456789")
_JSON = "application/json"
_TEXT = "text/plain"


@dataclass(frozen=True, slots=True)
class Reply:
    """One HTTP answer. Errors (status >= 400) close the connection: the client may still be sending a body."""

    status: int
    body: bytes
    content_type: str

    @property
    def close(self) -> bool:
        return self.status >= 400


def text(status: int, message: str) -> Reply:
    """A one-line text reply, whatever the message quotes from the request (clients log the first line only)."""
    return Reply(status, (" ".join(message.split()) + "\n").encode(), "text/plain; charset=utf-8")


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


def base_url(sockname: tuple[Any, ...], tls: bool) -> str:
    """``http(s)://host:port`` of a listening socket's address."""
    return f"{'https' if tls else 'http'}://{sockname[0]}:{sockname[1]}"


def tls_context(cert_file: str | None, key_file: str | None) -> ssl.SSLContext | None:
    """The server's TLS context (TLS 1.2 and 1.3 only), or None for plain HTTP."""
    if not (cert_file or key_file):
        return None
    if not (cert_file and key_file):
        raise ValueError("TLS needs both a certificate and a key file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # Whatever the system OpenSSL would still allow (kube-apiserver and kube-scheduler speak both).
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


class Routes:
    """The endpoints. ``ready`` is ``() -> bool``, reported by ``/readyz``."""

    def __init__(self, extender: Extender, webhook: Webhook, ready: Callable[[], bool] | None = None) -> None:
        self.ready = ready or (lambda: True)
        self._post: dict[str, Callable[[Any], dict[str, Any]]] = {
            "/filter": extender.filter, "/bind": extender.bind, "/webhook": webhook.review}

    def get(self, path: str) -> Reply:
        if path == "/healthz":
            return Reply(200, b"", _TEXT)
        if path == "/readyz":
            return Reply(200, b"ok" if self.ready() else b"not leader or not synced", _TEXT)
        return text(404, f"no route for GET {path}")

    def unrouted(self, path: str) -> Reply | None:
        """404 for a POST path nobody serves (answered before its body is read)."""
        return None if path in self._post else text(404, f"no route for POST {path}")

    @staticmethod
    def body_size(lengths: Sequence[str], chunked: bool) -> Reply | int:
        """The body length the headers announce, or the error reply (checked before any byte of the body)."""
        if chunked:
            return text(411, "chunked bodies are not supported; send Content-Length")
        if len(set(lengths)) > 1:
            return text(400, "conflicting Content-Length headers")
        length = lengths[0] if lengths else None
        # Digits only: int() would also take " 12", "+12" and "1_2", which no HTTP peer sends.
        if length is not None and (not length or not set(length) <= _DIGITS):
            return text(400, f"invalid Content-Length {length[:40]!r}")
        size = int(length) if length is not None else 0
        if size <= 0:
            return text(400, "Please send a request body")
        if size > MAX_BODY:
            return text(413, f"request body of {size} bytes exceeds the {MAX_BODY}-byte limit")
        return size

    def post(self, path: str, raw: bytes) -> Reply:
        """Decode ``raw`` (already framed: its length was accepted by :meth:`body_size`) and run the handler."""
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return text(400, f"request body is not valid JSON: {exc}")
        except RecursionError:
            return text(400, f"request body is nested more than {MAX_DEPTH} levels deep")
        # Counting brackets (C speed) rules out deep nesting for typical bodies without walking them.
        if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and too_deep(body):
            return text(400, f"request body is nested more than {MAX_DEPTH} levels deep")
        try:
            result = self._post[path](body)
        except BadRequest as exc:
            return text(400, str(exc))
        except Exception as exc:
            log.exception("%s failed", path)
            return text(500, f"internal error in {path}: {' '.join(str(exc).split()) or type(exc).__name__}")
        return Reply(200, json.dumps(result).encode(), _JSON)
