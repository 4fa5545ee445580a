"""A faithful in-test stand-in for the subset of the Kubernetes API server that HAMi's scheduler uses.

This is **not** a Kubernetes API server. It is a small threaded HTTP server on ``127.0.0.1`` (ephemeral port)
that speaks the same wire protocol as the real one for the resources and verbs ``KubeCluster`` and
``LeaderElector`` use, so that those classes can be driven through the official ``kubernetes`` client over real
HTTP:

* core/v1 Nodes (cluster-scoped), Pods (namespaced, plus the all-namespaces list ``/api/v1/pods``),
  ``pods/{name}/binding`` (POST; its annotations are merged into the pod, as kube-apiserver's BindingREST does),
  Events (POST/GET/LIST), ResourceQuotas (namespaced, plus the all-namespaces list and watch
  ``/api/v1/resourcequotas``; ``status`` is not computed); coordination.k8s.io/v1 Leases.
* GET, LIST (``metadata.resourceVersion`` on the list; items carry no ``kind``/``apiVersion``, as on the real
  server), WATCH (``?watch=true&resourceVersion=N``: a chunked, newline-delimited JSON stream of
  ``{"type": ..., "object": ...}``), POST (409 AlreadyExists), PUT (409 Conflict on a stale
  ``metadata.resourceVersion``), PATCH (JSON merge patch; strategic merge patch is treated as a merge patch,
  which is right for the annotation/label patches HAMi sends; a ``metadata.resourceVersion`` in the patch is a
  precondition → 409), DELETE. Errors are ``kind: Status`` bodies with the real reasons and codes.
* One global resourceVersion counter and an event log that watches replay from.

Fault injection for tests: :meth:`FakeApiServer.break_watches` aborts every open watch stream mid-flight;
:meth:`FakeApiServer.compact` forgets the event log so that watches from older versions get ``410 Gone``
(``gone_as_event`` chooses between an HTTP 410 and an in-stream ``ERROR`` event, both of which real servers
produce); :meth:`FakeApiServer.drop_next_response` makes the next matching request take effect but closes the
connection without answering ("lost response"); :meth:`FakeApiServer.inject` is the general form: on chosen
verbs and paths (and optionally request bodies), answer an error status without applying the request (409, 500,
503, ...), apply it and hang up (lost response), or apply it and answer only after a delay (a client timeout),
a given number of times or at a seeded random rate. Pod LISTs honour ``fieldSelector=spec.nodeName=<node>``.

Not implemented: label selectors, field selectors other than ``spec.nodeName`` on pods, pagination
(``limit``/``continue``), bookmarks, JSON patch, apply, authentication, admission, finalizers and graceful
deletion. ``make e2e`` (tests/e2e, docs/e2e.md) runs the same behaviours against a real kube-apiserver; where the
two differ, the real server is right.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import itertools
import json
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: (plural, group/version, kind, namespaced)
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "nodes": ("v1", "Node", False),
    "pods": ("v1", "Pod", True),
    "events": ("v1", "Event", True),
    "resourcequotas": ("v1", "ResourceQuota", True),
    "leases": ("coordination.k8s.io/v1", "Lease", True),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget", True),
}

_PATH = re.compile(
    r"^/(?:api/v1|apis/coordination\.k8s\.io/v1|apis/policy/v1)"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?/?$"
)


def merge_patch(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch, in place."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def status(code: int, reason: str, message: str, *, name: str = "", kind: str = "") -> dict[str, Any]:
    """A ``kind: Status`` body as the API server sends it."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure" if code >= 400 else "Success",
                            "message": message, "reason": reason, "code": code}
    if name or kind:
        body["details"] = {"name": name, "kind": kind}
    return body


class ApiError(Exception):
    """Raised inside the server to answer with a Status body."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body["message"])
        self.body = body


@dataclass
class Fault:
    """One injected fault (see :meth:`FakeApiServer.inject`); ``hits`` counts the requests it struck."""

    method: str
    path: str
    code: int | None = None
    lost: bool = False
    delay_s: float = 0.0
    body: str = ""
    count: int | None = 1
    rate: float = 1.0
    rng: random.Random = field(default_factory=random.Random)
    hits: int = 0

    def matches(self, method: str, path: str, body: bytes) -> bool:
        return (self.method in ("*", method) and self.path in path
                and (not self.body or self.body.encode() in body))


_REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}


class FakeApiServer:
    """The store, the event log and the HTTP server. Use as a context manager or call :meth:`stop`."""

    def __init__(self, *, gone_as_event: bool = False) -> None:
        self.cond = threading.Condition()
        self._rv = itertools.count(1)
        self.rv = 0
        #: (plural, namespace, name) -> object
        self.store: dict[tuple[str, str, str], dict[str, Any]] = {}
        #: (rv, plural, namespace, type, object)
        self.log: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self.compacted_rv = 0
        self.gone_as_event = gone_as_event
        self.watch_generation = 0  # bumped: open watches are aborted
        self.end_generation = 0  # bumped: open watches end cleanly
        self.expire_generation = 0  # bumped: open watches get an in-stream 410 ERROR event
        self.fail_watches = 0  # the next N watch requests are answered 410 Gone
        self._quiet = False
        self.active_watches = 0
        self.requests: list[tuple[str, str, str]] = []  # (method, path, content-type)
        self._drop: list[tuple[str, str]] = []  # (method, path substring)
        self.faults: list[Fault] = []
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="fake-apiserver", daemon=True)
        self._thread.start()

    def __enter__(self) -> FakeApiServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        with self.cond:
            self.watch_generation += 1
            self.cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()

    # --------------------------------------------------------------------------- fault injection
    def break_watches(self) -> None:
        """Abort every open watch stream (the client sees a truncated chunked response)."""
        with self.cond:
            self.watch_generation += 1
            self.cond.notify_all()

    def end_watches(self) -> None:
        """End every open watch stream cleanly (as the server's watch timeout does)."""
        with self.cond:
            self.end_generation += 1
            self.cond.notify_all()

    def compact(self) -> None:
        """Forget the event log: a watch from any version before now is answered with 410 Gone."""
        with self.cond:
            self.compacted_rv = self.rv
            self.log.clear()
            self.cond.notify_all()

    def fail_next_watches(self, count: int = 1) -> None:
        """Answer the next ``count`` watch requests with 410 Gone (HTTP or in-stream, see ``gone_as_event``)."""
        with self.cond:
            self.fail_watches += count

    @contextlib.contextmanager
    def missed_events(self) -> Iterator[None]:
        """Changes made inside are not logged (watchers miss them); afterwards the log is compacted and every
        open watch gets an in-stream ``410 Expired`` ERROR event, as after an etcd compaction."""
        with self.cond:
            self._quiet = True
        try:
            yield
        finally:
            with self.cond:
                self._quiet = False
                self.compacted_rv = self.rv
                self.log.clear()
                self.expire_generation += 1
                self.cond.notify_all()

    def wait_watches(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until ``count`` watch streams are open."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.active_watches < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True

    def drop_next_response(self, method: str, path_contains: str = "") -> None:
        """Let the next ``method`` request whose path contains ``path_contains`` take effect, then hang up."""
        with self.cond:
            self._drop.append((method.upper(), path_contains))

    def inject(self, method: str, path_contains: str = "", *, status: int | None = None, lost: bool = False,
               delay_s: float = 0.0, body_contains: str = "", count: int | None = 1, rate: float = 1.0,
               seed: int = 0) -> Fault:
        """Strike matching requests (``method`` ``"*"`` = any verb; watches are never struck).

        * ``status``: answer that HTTP status (a ``kind: Status`` body) **without** applying the request;
        * ``lost``: apply the request, then close the connection without answering;
        * ``delay_s``: apply the request, then wait before answering (a client with a shorter timeout gives up);
          with ``status``, wait and then answer the error, the request not applied.

        ``body_contains`` narrows the match to request bodies containing that text. The fault strikes the first
        ``count`` matching requests (``None``: all of them), each with probability ``rate`` (seeded).
        Returns the :class:`Fault`; :meth:`clear_faults` removes them all.
        """
        fault = Fault(method.upper(), path_contains, status, lost, delay_s, body_contains, count, rate,
                      random.Random(seed))
        with self.cond:
            self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        with self.cond:
            self.faults.clear()

    def _take_fault(self, method: str, path: str, body: bytes) -> Fault | None:
        with self.cond:
            for fault in self.faults:
                if fault.count is not None and fault.hits >= fault.count:
                    continue
                if fault.matches(method, path, body) and fault.rng.random() < fault.rate:
                    fault.hits += 1
                    return fault
        return None

    def _take_drop(self, method: str, path: str) -> bool:
        with self.cond:
            for i, (m, sub) in enumerate(self._drop):
                if m == method and sub in path:
                    del self._drop[i]
                    return True
        return False

    # --------------------------------------------------------------------------- store
    def _emit(self, plural: str, ns: str, typ: str, obj: dict[str, Any]) -> None:
        if self._quiet:
            return
        self.log.append((self.rv, plural, ns, typ, copy.deepcopy(obj)))
        self.cond.notify_all()

    def _stamp(self, obj: dict[str, Any]) -> None:
        self.rv = next(self._rv)
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, plural: str, ns: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object (409 AlreadyExists if it exists); fills kind, uid, creationTimestamp."""
        api_version, kind, namespaced = RESOURCES[plural]
        obj = copy.deepcopy(dict(obj))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name")
        if not name:
            raise ApiError(status(422, "Invalid", f"{kind} is invalid: metadata.name: Required value", kind=kind))
        ns = ns if namespaced else ""
        if namespaced:
            meta["namespace"] = ns
        with self.cond:
            key = (plural, ns, name)
            if key in self.store:
                raise ApiError(status(409, "AlreadyExists", f'{plural} "{name}" already exists',
                                      name=name, kind=plural))
            obj["kind"], obj["apiVersion"] = kind, api_version
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            self._stamp(obj)
            self.store[key] = obj
            self._emit(plural, ns, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, plural: str, ns: str, name: str) -> dict[str, Any]:
        with self.cond:
            obj = self.store.get((plural, ns if RESOURCES[plural][2] else "", name))
            if obj is None:
                raise ApiError(status(404, "NotFound", f'{plural} "{name}" not found', name=name, kind=plural))
            return copy.deepcopy(obj)

    def update(self, plural: str, ns: str, name: str, mutate: Any, precondition_rv: str | None) -> dict[str, Any]:
        """Apply ``mutate(obj)`` under the lock, honouring a resourceVersion precondition (409)."""
        with self.cond:
            key = (plural, ns if RESOURCES[plural][2] else "", name)
            old = self.store.get(key)
            if old is None:
                raise ApiError(status(404, "NotFound", f'{plural} "{name}" not found', name=name, kind=plural))
            if precondition_rv not in (None, "") and precondition_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the '
                                      "object has been modified; please apply your changes to the latest version "
                                      "and try again", name=name, kind=plural))
            new = copy.deepcopy(old)
            mutate(new)
            for field in ("name", "namespace", "uid", "creationTimestamp"):  # immutable
                if field in old["metadata"]:
                    new.setdefault("metadata", {})[field] = old["metadata"][field]
            new["kind"], new["apiVersion"] = old["kind"], old["apiVersion"]
            self._stamp(new)
            self.store[key] = new
            self._emit(plural, key[1], "MODIFIED", new)
            return copy.deepcopy(new)

    def patch(self, plural: str, ns: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch an object; ``metadata.resourceVersion`` in the patch is a precondition."""
        patch = copy.deepcopy(dict(patch))
        rv = (patch.get("metadata") or {}).pop("resourceVersion", None)
        return self.update(plural, ns, name, lambda obj: merge_patch(obj, patch), rv)

    def delete(self, plural: str, ns: str, name: str) -> dict[str, Any]:
        with self.cond:
            key = (plural, ns if RESOURCES[plural][2] else "", name)
            obj = self.store.pop(key, None)
            if obj is None:
                raise ApiError(status(404, "NotFound", f'{plural} "{name}" not found', name=name, kind=plural))
            self._stamp(obj)
            self._emit(plural, key[1], "DELETED", obj)
            return copy.deepcopy(obj)

    def list(self, plural: str, ns: str | None = None, node: str | None = None) -> tuple[list[dict[str, Any]], int]:
        """Objects (sorted by namespace and name) and the list's resourceVersion; ``node``: pods bound there."""
        with self.cond:
            items = [copy.deepcopy(o) for (_, _, _), o in sorted(
                     (k, o) for k, o in self.store.items()
                     if k[0] == plural and (ns is None or k[1] == ns)
                     and (node is None or (o.get("spec") or {}).get("nodeName") == node))]
            return items, self.rv

    def bind(self, ns: str, name: str, binding: Mapping[str, Any]) -> None:
        target = (binding.get("target") or {}).get("name")
        if not target:
            raise ApiError(status(422, "Invalid", "Binding is invalid: target.name: Required value"))
        uid = (binding.get("metadata") or {}).get("uid")

        def assign(pod: dict[str, Any]) -> None:
            if uid and pod["metadata"].get("uid") != uid:
                raise ApiError(status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": '
                                      f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                      f"{pod['metadata'].get('uid')}"))
            if (pod.get("spec") or {}).get("nodeName"):
                raise ApiError(status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": '
                                      f"pod {name} is already assigned to node \"{pod['spec']['nodeName']}\""))
            pod.setdefault("spec", {})["nodeName"] = target
            # as kube-apiserver's BindingREST: the Binding's annotations are merged into the pod's
            extra = (binding.get("metadata") or {}).get("annotations") or {}
            if extra:
                pod.setdefault("metadata", {}).setdefault("annotations", {}).update(extra)

        self.update("pods", ns, name, assign, None)

    # convenience for tests
    def objects(self, plural: str) -> dict[tuple[str, str], dict[str, Any]]:
        """``{(namespace, name): object}`` for one resource."""
        with self.cond:
            return {(n, nm): copy.deepcopy(o) for (p, n, nm), o in self.store.items() if p == plural}


class _Handler(BaseHTTPRequestHandler):
    api: FakeApiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # silence
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as separate writes; without TCP_NODELAY, Nagle plus the client's delayed ACK
        # stall every keep-alive response by ~40 ms.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # --------------------------------------------------------------------------- plumbing
    def _send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_raw(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _decode(raw: bytes) -> Any:
        try:
            return json.loads(raw or b"null")
        except ValueError:
            raise ApiError(status(400, "BadRequest", "the request body is not valid JSON")) from None

    def _hang_up(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self.api.requests.append((method, url.path, self.headers.get("Content-Type", "")))
        m = _PATH.match(url.path)
        raw = self._read_raw() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
        watching = query.get("watch") in ("true", "1")
        fault = None if watching else self.api._take_fault(method, url.path, raw)
        try:
            if fault is not None and fault.code is not None:
                if fault.delay_s:
                    time.sleep(fault.delay_s)
                raise ApiError(status(fault.code, _REASONS.get(fault.code, "InternalError"),
                                      f"injected fault: HTTP {fault.code} on {method} {url.path}"))
            if not m or m["plural"] not in RESOURCES:
                raise ApiError(status(404, "NotFound", "the server could not find the requested resource"))
            body = self._decode(raw) if method in ("POST", "PUT", "PATCH") or (method == "DELETE" and raw) else None
            result = self._handle(method, m["plural"], m["ns"] or "", m["name"], m["sub"], query, body)
            if result is None:  # a watch wrote its own response
                return
            code, payload = result
        except ApiError as exc:
            code, payload = exc.body["code"], exc.body
        if self.api._take_drop(method, url.path) or (fault is not None and fault.lost):
            self._hang_up()
            return
        if fault is not None and fault.delay_s:
            time.sleep(fault.delay_s)
        try:
            self._send_json(code, payload)
        except OSError:  # the client gave up waiting
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # --------------------------------------------------------------------------- verbs
    def _handle(self, method: str, plural: str, ns: str, name: str | None, sub: str | None,
                query: dict[str, str], body: Any) -> tuple[int, Any] | None:
        api = self.api
        api_version, kind, namespaced = RESOURCES[plural]
        if sub is not None:
            if plural == "pods" and sub == "binding" and method == "POST" and name:
                api.bind(ns, name, body or {})
                return 201, status(201, "", "", name=name, kind="pods") | {"status": "Success"}
            if plural == "pods" and sub == "status" and method == "PATCH" and name:
                if not isinstance(body, dict):
                    raise ApiError(status(400, "BadRequest", "a merge patch must be a JSON object"))
                # the status subresource changes status alone, as kube-apiserver's StatusREST does
                return 200, api.patch(plural, ns, name, {"status": body.get("status") or {}})
            raise ApiError(status(404, "NotFound", "the server could not find the requested resource"))
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    self._watch(plural, ns if namespaced and ns else None, query)
                    return None
                node = None
                selector = query.get("fieldSelector") or ""
                if selector:
                    if plural != "pods" or not selector.startswith("spec.nodeName="):
                        raise ApiError(status(400, "BadRequest", f"unsupported field selector {selector!r}"))
                    node = selector.removeprefix("spec.nodeName=")
                items, rv = api.list(plural, ns if ns else None, node)
                for item in items:  # list items carry no kind/apiVersion on the wire
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                return 200, {"kind": f"{kind}List", "apiVersion": api_version,
                             "metadata": {"resourceVersion": str(rv)}, "items": items}
            if method == "POST":
                if not isinstance(body, dict):
                    raise ApiError(status(400, "BadRequest", f"{kind} body must be an object"))
                return 201, api.create(plural, ns, body)
            raise ApiError(status(405, "MethodNotAllowed", f"{method} is not supported on {plural}"))
        if method == "GET":
            return 200, api.get(plural, ns, name)
        if method == "DELETE":
            uid = ((body or {}).get("preconditions") or {}).get("uid") if isinstance(body, dict) else None
            if uid:
                current = api.get(plural, ns, name)
                if (current.get("metadata") or {}).get("uid") != uid:
                    raise ApiError(status(409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": '
                                          f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                                          f"{(current.get('metadata') or {}).get('uid')}", name=name, kind=plural))
            return 200, api.delete(plural, ns, name)
        if method == "PATCH":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if ctype not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                raise ApiError(status(415, "UnsupportedMediaType", f"the body of the request was in an unknown "
                                      f"format - accepted media types include: application/merge-patch+json, "
                                      f"application/strategic-merge-patch+json (got {ctype!r})"))
            if not isinstance(body, dict):
                raise ApiError(status(400, "BadRequest", "a merge patch must be a JSON object"))
            return 200, api.patch(plural, ns, name, body)
        if method == "PUT":
            if not isinstance(body, dict):
                raise ApiError(status(400, "BadRequest", f"{kind} body must be an object"))
            rv = (body.get("metadata") or {}).get("resourceVersion")

            def replace(obj: dict[str, Any]) -> None:
                obj.clear()
                obj.update(copy.deepcopy(body))

            return 200, api.update(plural, ns, name, replace, rv)
        raise ApiError(status(405, "MethodNotAllowed", f"{method} is not supported"))

    def _watch(self, plural: str, ns: str | None, query: dict[str, str]) -> None:
        api = self.api
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        with api.cond:
            forced = api.fail_watches > 0
            api.fail_watches -= 1 if forced else 0
            gone = forced or since < api.compacted_rv
            generation, expiry, ending = api.watch_generation, api.expire_generation, api.end_generation
        too_old = status(410, "Expired", f"too old resource version: {since} ({api.compacted_rv})")
        if gone and not api.gone_as_event:
            raise ApiError(too_old)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        with api.cond:
            api.active_watches += 1
            api.cond.notify_all()
        try:
            if gone:
                chunk(json.dumps({"type": "ERROR", "object": too_old}).encode() + b"\n")
                chunk(b"")
                return
            while True:
                end = False
                with api.cond:
                    while True:
                        if api.watch_generation != generation:
                            self._hang_up()  # abort: no terminating chunk
                            return
                        if api.expire_generation != expiry:
                            pending = [json.dumps({"type": "ERROR", "object": too_old}).encode() + b"\n"]
                            end = True
                            break
                        start = bisect.bisect_right(api.log, since, key=lambda e: e[0])  # the log is in rv order
                        pending = [json.dumps({"type": t, "object": o}).encode() + b"\n"
                                   for rv, p, n, t, o in api.log[start:]
                                   if p == plural and (ns is None or n == ns)]
                        if api.log and api.log[-1][0] > since:
                            since = api.log[-1][0]
                        if pending:
                            break
                        left = deadline - time.monotonic()
                        if left <= 0 or api.end_generation != ending:
                            pending, end = [], True
                            break
                        api.cond.wait(min(left, 0.5))
                for line in pending:
                    chunk(line)
                if end:
                    chunk(b"")  # clean end of stream
                    return
        except OSError:
            self.close_connection = True
        finally:
            with api.cond:
                api.active_watches -= 1
                api.cond.notify_all()


# --- DRA (issue 30), kubelet plugin: ResourceClaims under /apis/resource.k8s.io/v1. Re-bound here rather than
# edited above so other parts can add their own resource.k8s.io kinds the same way (the handler reads the module
# globals at request time); ``api.create("resourceclaims", ns, claim)`` stores one.
RESOURCES.setdefault("resourceclaims", ("resource.k8s.io/v1", "ResourceClaim", True))
if "resource" not in _PATH.pattern:
    _PATH = re.compile(_PATH.pattern.replace("|apis/policy/v1)", r"|apis/policy/v1|apis/resource\.k8s\.io/v1)"))


# --- DRA (issue 30), publishing: ResourceSlices and DeviceClasses (cluster-scoped) under /apis/resource.k8s.io/v1.
# As kube-apiserver: ResourceSlice LISTs take the field selectors spec.nodeName, spec.driver and spec.pool.name
# (comma-joined), and stored capacity quantities come back canonical (81920Mi as 80Gi), so a driver that compares
# strings would see a change on every resync.
RESOURCES.setdefault("resourceslices", ("resource.k8s.io/v1", "ResourceSlice", False))
RESOURCES.setdefault("deviceclasses", ("resource.k8s.io/v1", "DeviceClass", False))
if "resource" not in _PATH.pattern:
    _PATH = re.compile(_PATH.pattern.replace("|apis/policy/v1)", r"|apis/policy/v1|apis/resource\.k8s\.io/v1)"))

_SLICE_FIELDS = {"spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName"),
                 "spec.driver": lambda o: (o.get("spec") or {}).get("driver"),
                 "spec.pool.name": lambda o: ((o.get("spec") or {}).get("pool") or {}).get("name")}
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def canonical_quantity(text: Any) -> Any:
    """A binary quantity in kube-apiserver's canonical form: the largest suffix that divides it (``81920Mi`` ->
    ``80Gi``); anything else unchanged."""
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|Pi|Ei)", str(text))
    if not match:
        return text
    value = int(match[1]) * dict(_BINARY)[match[2]]
    return next((f"{value // size}{suffix}" for suffix, size in _BINARY if value % size == 0), str(value))


def _canonical_slice(body: Any) -> None:
    for device in ((body or {}).get("spec") or {}).get("devices") or []:
        for cap in (device.get("capacity") or {}).values():
            if isinstance(cap, dict) and "value" in cap:
                cap["value"] = canonical_quantity(cap["value"])


_handle_before_resource_slices = _Handler._handle


def _handle_resource_slices(self: _Handler, method: str, plural: str, ns: str, name: str | None, sub: str | None,
                            query: dict[str, str], body: Any) -> tuple[int, Any] | None:
    if plural == "resourceslices" and method in ("POST", "PUT") and isinstance(body, dict):
        _canonical_slice(body)
    selector = query.get("fieldSelector") or ""
    if plural != "resourceslices" or method != "GET" or name is not None or not selector \
            or query.get("watch") in ("true", "1"):
        return _handle_before_resource_slices(self, method, plural, ns, name, sub, query, body)
    wanted = []
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if key not in _SLICE_FIELDS:
            raise ApiError(status(400, "BadRequest", f'"{key}" is not a known field selector: only "spec.nodeName", '
                                  '"spec.driver", "spec.pool.name"'))
        wanted.append((_SLICE_FIELDS[key], value))
    items, rv = self.api.list(plural)
    items = [item for item in items if all(get(item) == value for get, value in wanted)]
    for item in items:
        item.pop("kind", None)
        item.pop("apiVersion", None)
    return 200, {"kind": "ResourceSliceList", "apiVersion": "resource.k8s.io/v1",
                 "metadata": {"resourceVersion": str(rv)}, "items": items}


_Handler._handle = _handle_resource_slices  # type: ignore[method-assign]


# --- DRA (issue 30), the translating webhook: Namespaces (cluster-scoped; the webhook reads their
# hami.io/device-mode label) and ResourceClaimTemplates (namespaced) under /apis/resource.k8s.io/v1.
RESOURCES.setdefault("namespaces", ("v1", "Namespace", False))
RESOURCES.setdefault("resourceclaimtemplates", ("resource.k8s.io/v1", "ResourceClaimTemplate", True))
