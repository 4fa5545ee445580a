"""What the scheduler's HTTP endpoints answer (spec §5.1), independent of the server that carries the bytes.

Both servers (:mod:`.aioserver`, the hand-written asyncio/httptools one; :mod:`.asgi`, uvicorn) decide here what a
request gets, so their answers are the same byte for byte:

* ``GET /healthz`` → 200 empty, ``GET /readyz`` → 200 ``ok`` or ``not leader or not synced`` (always 200, as HAMi);
* ``POST /filter``, ``/bind``, ``/preempt``, ``/webhook`` → the handler's JSON, 200;
* from the request line and headers alone, before any byte of the body (:meth:`Routes.admit`): 404 for a route this
  listener does not serve, 401/403 for a caller who has not authenticated (:mod:`.auth`), 411 for chunked bodies,
  413 for a body over 1 MiB, 400 for a missing or malformed Content-Length, and 503 (``Retry-After: 1``) when the
  endpoint already holds its limit of requests (:data:`ENDPOINT_LIMITS`; bodies over 256 KiB: :data:`BULK_LIMIT`):
  a flood of one endpoint, or of big bodies, is shed cheaply and never queues ahead of other callers;
* the body: 400 for undecodable JSON, nesting deeper than 64 levels, or an integer longer than Python converts
  (4,300 digits); a handler's :class:`BadRequest` 400; an unexpected handler exception 500 with a one-line
  message (the traceback goes to the log only). Every 4xx/5xx closes the connection.

The framing limits every server enforces while it parses (:data:`MAX_URL` → 414, :data:`MAX_HEADER_LINE`,
:data:`MAX_HEADERS`, :data:`MAX_HEAD` → 431, :data:`REQUEST_TIMEOUT_S`, :data:`CLIENT_TIMEOUT_S`,
:data:`MAX_CONNECTIONS`) are defined here too; :mod:`.guard` applies them.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.scheduler.auth import Auth
from hami_core.scheduler.extender import BadRequest, Extender
from hami_core.scheduler.reqmetrics import RequestMetrics
from hami_core.scheduler.webhook import Webhook

__all__ = ["ALL_ROUTES", "BULK_BODY", "BULK_LIMIT", "CLIENT_TIMEOUT_S", "DRAIN_S", "ENDPOINT_LIMITS",
           "EXTENDER_ROUTES", "MAX_BODY", "MAX_CONNECTIONS", "MAX_DEPTH", "MAX_HEAD", "MAX_HEADERS", "MAX_HEADER_LINE",
           "MAX_URL", "REQUEST_TIMEOUT_S", "WEBHOOK_ROUTES", "Admitted", "Gate", "Reply", "Routes", "base_url",
           "text", "tls_context", "too_deep"]

log = logging.getLogger("hami.scheduler.server")

MAX_BODY = 1 << 20
#: Kubernetes objects are a dozen levels deep; a body nested deeper is refused before any handler recurses into it.
MAX_DEPTH = 64
#: The request target (path and query): kube-scheduler and kube-apiserver send a few dozen bytes. Longer: 414.
MAX_URL = 8 << 10
#: One header field (name and value). Longer: 431.
MAX_HEADER_LINE = 8 << 10
#: Header fields in one request. More: 431.
MAX_HEADERS = 100
#: The request line and all headers together. More: 431.
MAX_HEAD = 64 << 10
#: How long a connection may stay silent (before its first request, or idle between keep-alive requests).
CLIENT_TIMEOUT_S = 60.0
#: How long one request may take to arrive, from its first byte to its last: a client that trickles a request a
#: byte at a time (slowloris) loses its connection after this, however busy it keeps the socket. kube-apiserver
#: gives a webhook call 10 s in all, so a request slower to arrive than that is lost anyway.
REQUEST_TIMEOUT_S = 10.0
#: Open connections a listener keeps. A new connection past this closes the longest-idle one (one not in the
#: middle of a request), so idle sockets never lock out a caller; when none is idle the new one gets a 503.
MAX_CONNECTIONS = 1024
#: How long shutdown waits for requests already being handled (a bind waiting on the API server) to answer.
DRAIN_S = 10.0
#: Requests one endpoint holds at once (being handled or waiting for a thread); past this, 503 from the headers.
#: ``/filter``: kube-scheduler filters one pod at a time per profile. ``/webhook``: kube-apiserver calls it once per
#: pod admission, in parallel; each waiting request holds its body (up to 1 MiB). ``/bind``: kube-scheduler binds
#: a whole burst at once and binds may wait for node locks (aioserver's bind pool has 256 threads).
ENDPOINT_LIMITS = {"/filter": 32, "/webhook": 64, "/bind": 512, "/preempt": 8}
#: A body larger than this is a bulk request: it costs tens of milliseconds of JSON decoding under the GIL, which
#: every other request waits for. Bulk requests have their own lane: at most :data:`BULK_LIMIT` per endpoint at
#: once, handled one at a time in a thread of their own, so a flood of them neither crowds out the small requests
#: kube-apiserver and kube-scheduler send (a pod review is a few KiB; ExtenderArgs naming 5,000 nodes ~100 KiB)
#: nor takes more than one thread's share of the interpreter from them.
BULK_BODY = 256 << 10
BULK_LIMIT = 2
#: The POST routes of each listener layout: one listener (HAMi's), or ``--webhook-bind`` apart from ``--http-bind``.
ALL_ROUTES = frozenset({"/filter", "/bind", "/preempt", "/webhook"})
EXTENDER_ROUTES = frozenset({"/filter", "/bind", "/preempt"})
WEBHOOK_ROUTES = frozenset({"/webhook"})
_DIGITS = frozenset("0123456789")
_JSON = "application/json"
_TEXT = "text/plain"


@dataclass(frozen=True, slots=True)
class Reply:
    """One HTTP answer. Errors (status >= 400) close the connection: the client may still be sending a body."""

    status: int
    body: bytes
    content_type: str
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def close(self) -> bool:
        return self.status >= 400


def text(status: int, message: str, headers: tuple[tuple[str, str], ...] = ()) -> Reply:
    """A one-line text reply, whatever the message quotes from the request (clients log the first line only)."""
    return Reply(status, (" ".join(message.split()) + "\n").encode(), "text/plain; charset=utf-8", headers)


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


def tls_context(cert_file: str | None, key_file: str | None,
                client_ca_file: str | Iterable[str] | None = None) -> ssl.SSLContext | None:
    """The server's TLS context (TLS 1.2 and 1.3 only), or None for plain HTTP.

    With ``client_ca_file`` (one PEM file, or several) the server asks every client for a certificate and verifies
    one it is given against those CAs (a certificate another CA signed fails the handshake). A client may still
    connect without one, so that kubelet's probes reach ``/healthz``; :class:`.auth.Auth` then refuses it the
    routes that need one with a 401.
    """
    ca_files = [client_ca_file] if isinstance(client_ca_file, str) else list(client_ca_file or ())
    if not (cert_file or key_file):
        if ca_files:
            raise ValueError("a client CA needs TLS: give the server's certificate and key too")
        return None
    if not (cert_file and key_file):
        raise ValueError("TLS needs both a certificate and a key file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # Whatever the system OpenSSL would still allow (kube-apiserver and kube-scheduler speak both).
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    for ca_file in ca_files:
        try:
            ctx.load_verify_locations(cafile=ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(f"cannot load the client CA {ca_file}: {exc}") from None
    if ca_files:
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class Gate:
    """A count of the requests an endpoint holds, with a limit. Entered on the event loop, left from anywhere."""

    __slots__ = ("held", "limit", "lock", "path", "shed")

    def __init__(self, path: str, limit: int) -> None:
        self.path, self.limit = path, limit
        self.held = 0
        self.shed = 0
        self.lock = threading.Lock()

    def enter(self) -> bool:
        with self.lock:
            if self.held >= self.limit:
                self.shed += 1
                return False
            self.held += 1
            return True

    def leave(self) -> None:
        with self.lock:
            self.held -= 1


@dataclass(frozen=True, slots=True)
class Admitted:
    """A POST that may be read: its body length, and the gate it holds until :meth:`Routes.done`. ``bulk``: a body
    over :data:`BULK_BODY`, handled in the bulk lane (the servers' one-thread ``bulk`` pool)."""

    path: str
    size: int
    gate: Gate
    bulk: bool = False


class Routes:
    """The endpoints of one listener.

    :param ready: ``() -> bool``, reported by ``/readyz``.
    :param serves: the POST routes this listener serves (:data:`ALL_ROUTES`, or one half of the split layout);
        ``GET /healthz`` and ``/readyz`` are served wherever ``/webhook`` is (kubelet probes the webhook's port),
        and on a listener serving everything.
    :param auth: who may call the POST routes (None: anyone, HAMi's behaviour).
    :param limits: requests each endpoint holds at once (default :data:`ENDPOINT_LIMITS`).
    :param gets: GET routes whose answer takes time (``/metrics``): the server runs them in a worker thread,
        gated like the POST routes (their limit from ``limits``, else 64).
    """

    def __init__(self, extender: Extender | None, webhook: Webhook | None, ready: Callable[[], bool] | None = None,
                 *, serves: Iterable[str] = ALL_ROUTES, auth: Auth | None = None,
                 limits: dict[str, int] | None = None, gets: dict[str, Callable[[], Reply]] | None = None) -> None:
        self.ready = ready or (lambda: True)
        self.auth = auth
        serves = frozenset(serves)
        unknown = serves - ALL_ROUTES
        if unknown:
            raise ValueError(f"unknown routes {sorted(unknown)}: choose from {sorted(ALL_ROUTES)}")
        handlers: dict[str, Callable[[Any], dict[str, Any]]] = {}
        if serves & EXTENDER_ROUTES:
            assert extender is not None, "the extender routes need an extender"
            handlers.update({"/filter": extender.filter, "/bind": extender.bind})
            preempt = getattr(extender, "preempt", None)  # an extender without the verb serves the other two
            if preempt is not None:
                handlers["/preempt"] = preempt
        if "/webhook" in serves:
            assert webhook is not None, "/webhook needs a webhook"
            handlers["/webhook"] = webhook.review
        self._post = {path: handler for path, handler in handlers.items() if path in serves}
        # callers refused here count with the requests' own metrics (the app shares one set between both halves)
        owner = extender if serves & EXTENDER_ROUTES else webhook
        self.metrics: RequestMetrics | None = getattr(owner, "metrics", None)
        self.probes = "/webhook" in serves or serves == ALL_ROUTES
        self.slow_gets = dict(gets or {})
        limits = {**ENDPOINT_LIMITS, **(limits or {})}
        self.gates = {path: Gate(path, limits.get(path, 64)) for path in [*self._post, *self.slow_gets]}
        self.bulk_gates = {path: Gate(f"{path} (bodies over {BULK_BODY >> 10} KiB)", BULK_LIMIT)
                           for path in self._post}

    @property
    def serves(self) -> frozenset[str]:
        return frozenset(self._post)

    def get(self, path: str) -> Reply:
        if self.probes:
            if path == "/healthz":
                return Reply(200, b"", _TEXT)
            if path == "/readyz":
                return Reply(200, b"ok" if self.ready() else b"not leader or not synced", _TEXT)
        return text(404, f"no route for GET {path}")

    def get_slow(self, path: str) -> Admitted | Reply:
        """A place in the gate of a slow GET route (:meth:`slow_gets`), or the 503."""
        gate = self.gates[path]
        if not gate.enter():
            return text(503, f"{path} is busy: {gate.limit} requests are already waiting; retry",
                        (("Retry-After", "1"),))
        return Admitted(path, 0, gate)

    def answer_slow(self, admitted: Admitted) -> Reply:
        """Run a slow GET route (in a worker thread); its place is given back whatever happens."""
        try:
            return self.slow_gets[admitted.path]()
        except Exception as exc:
            log.exception("GET %s failed", admitted.path)
            return text(500, f"internal error in {admitted.path}: {' '.join(str(exc).split()) or type(exc).__name__}")
        finally:
            self.done(admitted)

    def unrouted(self, path: str) -> Reply | None:
        """404 for a POST path nobody serves here (answered before its body is read)."""
        return None if path in self._post else text(404, f"no route for POST {path}")

    def admit(self, path: str, lengths: Sequence[str], chunked: bool, authorization: bytes | None,
              client_cert: bool) -> Admitted | Reply:
        """Everything decided from a POST's request line and headers: the route, the caller, the framing, and a
        place in the endpoint's gate. An :class:`Admitted` must be handed back to :meth:`done` once answered."""
        refused = self.unrouted(path)
        if refused is None and self.auth is not None:
            denied = self.auth.check(path, authorization, client_cert)
            if denied is not None:
                if self.metrics is not None:
                    self.metrics.refused_caller(path, denied.status)
                return text(denied.status, denied.message, denied.headers)
        if refused is not None:
            return refused
        size = self.body_size(lengths, chunked)
        if isinstance(size, Reply):
            return size
        bulk = size > BULK_BODY
        gate = self.bulk_gates[path] if bulk else self.gates[path]
        if not gate.enter():
            if gate.shed == 1 or gate.shed % 1000 == 0:  # once, then every thousandth: a flood must not flood the log
                log.warning("%s: %d requests already held; shedding with 503 (%d shed so far)", gate.path,
                            gate.limit, gate.shed)
            return text(503, f"{gate.path} is busy: {gate.limit} requests are already being handled; retry",
                        (("Retry-After", "1"),))
        return Admitted(path, size, gate, bulk)

    @staticmethod
    def done(admitted: Admitted) -> None:
        admitted.gate.leave()

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
        if length is not None and len(length) > 12:  # int() of a 5,000-digit length would raise ValueError
            return text(413, f"request body of {length[:20]}... bytes exceeds the {MAX_BODY}-byte limit")
        size = int(length) if length is not None else 0
        if size <= 0:
            return text(400, "Please send a request body")
        if size > MAX_BODY:
            return text(413, f"request body of {size} bytes exceeds the {MAX_BODY}-byte limit")
        return size

    def post(self, path: str, raw: bytes) -> Reply:
        """Decode ``raw`` (already framed: its length was accepted by :meth:`admit`) and run the handler."""
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return text(400, f"request body is not valid JSON: {exc}")
        except RecursionError:
            return text(400, f"request body is nested more than {MAX_DEPTH} levels deep")
        except ValueError as exc:
            # Python refuses to convert integers of more than 4,300 digits (CVE-2020-10735): not a JSON error
            # class, but the body's fault all the same.
            return text(400, f"request body holds a number Python will not convert: {exc}")
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
