"""The :class:`~hami_core.cluster.base.Cluster` interface over a real API server, with the official ``kubernetes``
client.

Objects in and out are plain Kubernetes JSON dicts: every call is made with ``_preload_content=False`` and the
body is decoded with :func:`json.loads`, so nothing is lost or renamed by the client's models (and the client's
known failure to deserialize the ``pods/binding`` response does not arise). Patches are sent as
``application/merge-patch+json`` (the client would otherwise pick strategic merge for a dict body); a patch that
carries ``metadata.resourceVersion`` is a compare-and-swap. HTTP 404 becomes :class:`NotFoundError`, 409
:class:`ConflictError`, any other API error a one-line :class:`HamiError`, and a transport failure (connection
refused or reset, response lost) a :class:`TemporaryError`: a write may then have been applied, so re-read before
retrying. Every request first takes a token from a client-side ``qps``/``burst`` token bucket.

:meth:`KubeCluster.watch` runs one daemon thread per resource (Nodes, Pods; ResourceQuotas with
:meth:`KubeCluster.watch_resource_quotas`), each a small reflector: LIST, deliver
``ADDED`` for everything listed, WATCH from the list's resourceVersion and deliver events as they come. A clean
end of the stream, a broken stream or a transport error (connection refused while kube-apiserver restarts, 5xx,
429) re-watches from the last version delivered, with backoff, as client-go's reflector does; ``410 Gone`` /
"too old resource version" (that version was compacted away; kube-apiserver sends it as an in-stream ERROR event)
or any other watch error relists with backoff, delivering ``DELETED`` for objects that disappeared, ``ADDED`` for
new ones and ``MODIFIED`` for changed ones, so the handler's view converges on the server's. Every
``resync_s`` seconds the reflector relists and delivers ``MODIFIED`` for every object (the informer resync).
"""

from __future__ import annotations

import contextlib
import json
import logging
import marshal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from hami_core.cluster.base import ConflictError, NotFoundError, WatchHandler
from hami_core.cluster.events import EventRecorder
from hami_core.cluster.refs import parse_version
from hami_core.cluster.watchcache import WatchCache
from hami_core.plugins.errors import HamiError, TemporaryError

log = logging.getLogger("hami.cluster.kube")

MERGE_PATCH = "application/merge-patch+json"
#: Connections kept open to the API server (kubernetes' default is cpu_count x 5).
POOL_SIZE = 64


class TokenBucket:
    """Client-side rate limiter: ``qps`` tokens a second, at most ``burst`` saved up (client-go's default)."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._clock, self._sleep = clock, sleep
        self._tokens = float(self.burst)
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one token, sleeping until one is available; returns the seconds waited. ``qps <= 0``: no limit."""
        if self.qps <= 0:
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0  # reserve now; a negative balance is the queue ahead of us
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)
        return wait


def _error_message(exc: Any) -> str:
    """The API's ``Status.message`` if the body is one, else the HTTP reason; one line."""
    body = getattr(exc, "body", None)
    message = ""
    if body:
        try:
            message = json.loads(body).get("message", "")
        except (ValueError, AttributeError):
            message = str(body)
    message = message or getattr(exc, "reason", "") or str(exc)
    return " ".join(str(message).split())


def translate_api_error(exc: Exception, what: str) -> HamiError:
    """Map a client exception to the project's errors (404, 409, other HTTP status, transport failure)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        code, message = exc.status, _error_message(exc)
        if code == 404:
            return NotFoundError(message)
        if code == 409:
            return ConflictError(message)
        if code in (429, 500, 503, 504) or not code:
            return TemporaryError(f"{what}: HTTP {code}: {message}", delay=1.0)
        return HamiError(f"{what}: HTTP {code}: {message}")
    text = " ".join(str(exc).split())
    return TemporaryError(f"{what}: request failed ({type(exc).__name__}: {text}); "
                          "a write may have been applied, re-read before retrying", delay=0.5)


def _abort_response(resp: Any) -> None:
    """Shut the socket under a streaming urllib3 response, so a thread blocked reading it wakes up."""
    socks = [getattr(getattr(resp, "_connection", None), "sock", None)]
    with contextlib.suppress(Exception):
        socks.append(resp._fp.fp.raw._sock)
    for sock in socks:
        if sock is not None:
            with contextlib.suppress(Exception):
                sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        resp.shutdown()


class KubeCluster:
    """A :class:`~hami_core.cluster.base.Cluster` backed by the Kubernetes API (official client).

    :param kubeconfig: kubeconfig file (``None``: ``$KUBECONFIG`` or ``~/.kube/config``); ignored with
        ``in_cluster`` or ``api_client``.
    :param in_cluster: use the pod's service account (``KUBERNETES_SERVICE_HOST``, mounted token and CA).
    :param qps: client-side request rate (tokens per second; ``<= 0`` disables the limiter).
    :param burst: requests that may go at once before ``qps`` applies.
    :param api_client: a ready ``kubernetes.client.ApiClient`` (tests; shared clients).
    :param component: ``source.component`` of the Events recorded (the scheduler name).
    :param resync_s: periodic relist of the watches.
    :param request_timeout_s: timeout of ordinary (non-watch) requests.
    :param watch_timeout_s: ``timeoutSeconds`` asked of each watch request (the stream then ends and restarts).
    :param sync_timeout_s: how long :meth:`watch` waits for the initial lists before returning anyway.
    """

    def __init__(self, *, kubeconfig: str | None = None, in_cluster: bool = False, qps: float = 5.0,
                 burst: int = 10, api_client: Any = None, component: str = "hami-scheduler",
                 resync_s: float = 3600.0, request_timeout_s: float = 30.0, watch_timeout_s: int = 300,
                 sync_timeout_s: float = 60.0, backoff_initial_s: float = 0.2, backoff_max_s: float = 30.0) -> None:
        from kubernetes import client, config

        if api_client is None:
            # The client keeps cpu_count x 5 connections (10 on a 2-core node): concurrent binds, lock waits and
            # watches overflow it, and every connection it then discards costs a new TLS handshake on both ends
            # (found under the e2e benchmark's burst: hundreds of "Connection pool is full" warnings).
            configuration = client.Configuration(connection_pool_maxsize=POOL_SIZE)
            try:
                if in_cluster:
                    config.load_incluster_config(client_configuration=configuration)
                else:
                    config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
            except Exception as exc:
                where = "in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
                raise HamiError(f"cannot load Kubernetes credentials from {where}: "
                                f"{' '.join(str(exc).split())}") from None
            api_client = client.ApiClient(configuration)
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.component = component
        self.limiter = TokenBucket(qps, burst)
        # Events go out from their own thread with their own bucket (kube-scheduler gives its event client a
        # client of its own too): they never wait on, or take tokens from, decisions and binds.
        self.event_limiter = TokenBucket(qps, burst)
        self.events = EventRecorder(self._post_event, name="hami-events")
        self.resync_s = resync_s
        self.request_timeout_s = request_timeout_s
        self.watch_timeout_s = int(watch_timeout_s)
        self.sync_timeout_s = sync_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._stop = threading.Event()
        self._reflectors: list[_Reflector] = []

    # ------------------------------------------------------------------------------------ plumbing
    def _call(self, what: str, fn: Callable[..., Any], *args: Any, limiter: TokenBucket | None = None,
              **kwargs: Any) -> Any:
        """Rate-limit, call ``fn(..., _preload_content=False)``, decode the JSON body, translate errors."""
        (limiter or self.limiter).acquire()
        kwargs.setdefault("_request_timeout", self.request_timeout_s)
        try:
            resp = fn(*args, _preload_content=False, **kwargs)
            data = resp.data
        except Exception as exc:
            raise translate_api_error(exc, what) from None
        try:
            return json.loads(data) if data else {}
        except ValueError:
            raise HamiError(f"{what}: the API server answered with a body that is not JSON") from None

    @staticmethod
    def _typed(obj: dict[str, Any], kind: str) -> dict[str, Any]:
        """List items come without ``kind``/``apiVersion``; give them back (as MemoryCluster objects have)."""
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", "v1")
        return obj

    # ------------------------------------------------------------------------------------ Cluster
    def get_node(self, name: str) -> dict[str, Any]:
        """The Node; raises :class:`NotFoundError`."""
        return self._typed(self._call(f"get node {name}", self.core.read_node, name), "Node")

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        """The Pod; raises :class:`NotFoundError`."""
        return self._typed(self._call(f"get pod {namespace}/{name}", self.core.read_namespaced_pod, name,
                                      namespace), "Pod")

    def _list(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        fn = {"Node": self.core.list_node, "Pod": self.core.list_pod_for_all_namespaces,
              "ResourceQuota": self.core.list_resource_quota_for_all_namespaces}[kind]
        body = self._call(f"list {kind.lower()}s", fn)
        items = [self._typed(item, kind) for item in body.get("items") or []]
        return items, str((body.get("metadata") or {}).get("resourceVersion") or "")

    def list_nodes(self) -> list[dict[str, Any]]:
        """All Nodes."""
        return self._list("Node")[0]

    def list_pods(self) -> list[dict[str, Any]]:
        """All Pods in all namespaces."""
        return self._list("Pod")[0]

    def list_resource_quotas(self) -> list[dict[str, Any]]:
        """All ResourceQuotas in all namespaces."""
        return self._list("ResourceQuota")[0]

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """Pods bound to ``node``: one LIST with ``fieldSelector=spec.nodeName=<node>``."""
        body = self._call(f"list pods on node {node}", self.core.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={node}")
        return [self._typed(item, "Pod") for item in body.get("items") or []]

    def patch_node(self, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch a Node; with ``metadata.resourceVersion`` in the patch, a CAS (:class:`ConflictError`)."""
        return self._typed(self._call(f"patch node {name}", self.core.patch_node, name, dict(patch),
                                      _content_type=MERGE_PATCH), "Node")

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch a Pod (annotations, labels); raises :class:`NotFoundError`."""
        return self._typed(self._call(f"patch pod {namespace}/{name}", self.core.patch_namespaced_pod, name,
                                      namespace, dict(patch), _content_type=MERGE_PATCH), "Pod")

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        """Delete a Pod with a UID precondition (the pod's own grace period, as kube-scheduler's preemption)."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        self._call(f"delete pod {namespace}/{name}", self.core.delete_namespaced_pod, name, namespace, body=body)

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """Evict a Pod through the Eviction API (``pods/eviction`` create, policy/v1), with a UID precondition: the
        API server refuses (429) what a PodDisruptionBudget does not allow. ``hami defrag apply`` calls it."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": {"preconditions": {"uid": uid}}}
        self._call(f"evict pod {namespace}/{name}", self.core.create_namespaced_pod_eviction, name, namespace, body)

    def patch_pod_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Merge-patch the ``pods/status`` subresource."""
        return self._typed(self._call(f"patch pod {namespace}/{name} status", self.core.patch_namespaced_pod_status,
                                      name, namespace, dict(patch), _content_type=MERGE_PATCH), "Pod")

    def list_pod_disruption_budgets(self) -> list[dict[str, Any]]:
        """Every PodDisruptionBudget (policy/v1)."""
        body = self._call("list poddisruptionbudgets", self.policy.list_pod_disruption_budget_for_all_namespaces)
        out = []
        for item in body.get("items") or []:
            item.setdefault("kind", "PodDisruptionBudget")
            item.setdefault("apiVersion", "policy/v1")
            out.append(item)
        return out

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        """Create the ``pods/binding`` subresource: the pod gets ``spec.nodeName`` and ``annotations`` in one write
        (kube-apiserver merges a Binding's annotations into the pod's)."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self._call(f"bind pod {namespace}/{name} to node {node}", self.core.create_namespaced_pod_binding,
                   name, namespace, body)

    def event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record a core/v1 Event about ``obj`` (``Normal`` or ``Warning``). Never blocks and never raises: the
        Event is queued and posted by a background thread (:class:`~hami_core.cluster.events.EventRecorder`;
        failures are logged there). :meth:`flush_events` waits for the queue."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}  # "never raises", even about a malformed object
        namespace = meta.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        involved = {"kind": obj.get("kind") or "Pod", "apiVersion": obj.get("apiVersion") or "v1",
                    "name": meta.get("name"), "namespace": meta.get("namespace"), "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion")}
        self.events.record({"apiVersion": "v1", "kind": "Event",
                            "metadata": {"generateName": f"{meta.get('name') or 'object'}.", "namespace": namespace},
                            "involvedObject": {k: v for k, v in involved.items() if v},
                            "reason": reason, "message": message, "type": event_type,
                            "source": {"component": self.component},
                            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                            "reportingComponent": self.component})

    def _post_event(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        self._call(f"create event {body['reason']} in {namespace}", self.core.create_namespaced_event, namespace,
                   body, limiter=self.event_limiter)

    def flush_events(self, timeout_s: float = 10.0) -> bool:
        """Wait until the Events recorded so far were posted (or failed); False on timeout."""
        return self.events.flush(timeout_s)

    def watch(self, on_node: WatchHandler, on_pod: WatchHandler) -> None:
        """Start the Node and Pod reflector threads; return once both initial lists were delivered (``ADDED``)
        or ``sync_timeout_s`` passed (then they keep trying in the background; see :meth:`has_synced`)."""
        self._stop.clear()
        reflectors = [_Reflector(self, "Node", on_node), _Reflector(self, "Pod", on_pod)]
        self._reflectors.extend(reflectors)
        for r in reflectors:
            r.start()
        deadline = time.monotonic() + self.sync_timeout_s
        for r in reflectors:
            if not r.synced.wait(max(0.0, deadline - time.monotonic())):
                log.warning("%s watch has not completed its initial list after %.0f s; continuing in the "
                            "background", r.kind, self.sync_timeout_s)

    def watch_resource_quotas(self, on_quota: WatchHandler) -> None:
        """Start the ResourceQuota reflector thread (same LIST/WATCH/relist rules as :meth:`watch`); return once its
        initial list was delivered or ``sync_timeout_s`` passed."""
        self._stop.clear()
        reflector = _Reflector(self, "ResourceQuota", on_quota)
        self._reflectors.append(reflector)
        reflector.start()
        if not reflector.synced.wait(self.sync_timeout_s):
            log.warning("ResourceQuota watch has not completed its initial list after %.0f s; continuing in the "
                        "background", self.sync_timeout_s)

    def _reflector(self, kind: str) -> _Reflector | None:
        return next((r for r in self._reflectors if r.kind == kind and r.synced.is_set()), None)

    def cached_node(self, name: str) -> dict[str, Any] | None:
        """The Node as this client's watch last saw it (``None``: not watched, or unknown). Read-only: a write
        based on it must be a compare-and-swap (its ``resourceVersion`` may be behind the server's)."""
        r = self._reflector("Node")
        return r.cache.get(("", name)) if r is not None else None

    def cached_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Pod as this client's watch last saw it (``None``: not watched, or unknown). Read-only."""
        r = self._reflector("Pod")
        return r.cache.get((namespace, name)) if r is not None else None

    def bound_pods(self, node: str, through: str, timeout_s: float = 0.02) -> list[dict[str, Any]] | None:
        """The pods bound to ``node`` as this client's Pod watch has them, once that view includes every change up
        to resourceVersion ``through`` (waiting up to ``timeout_s`` for it); ``None`` when it does not by then (or
        nothing watches pods), and the caller must read the server. Under load pod events arrive every few
        milliseconds and the view passes ``through`` at once; in a quiet cluster no event may come, and the short
        wait then costs a bind 20 ms before it reads the server.

        This relies on etcd's resourceVersions being one increasing revision counter across all resources, which
        kube-apiserver's etcd3 storage guarantees (its consistent reads from the watch cache rely on the same).
        Read-only objects."""
        r = self._reflector("Pod")
        wanted = parse_version(through)
        if wanted is None or r is None:
            return None
        with r.cache.lock:  # the index is read as of the version waited for
            if not r.cache.through(wanted, timeout_s):
                return None
            keys = list(r.by_node.get(node, ()))
        return [obj for obj in (r.cache.get(k) for k in keys) if obj is not None]

    def has_synced(self) -> bool:
        """Whether every started watch has delivered its initial list."""
        return all(r.synced.is_set() for r in self._reflectors)

    def close(self) -> None:
        """Post the Events still queued (a few seconds at most), stop the watch threads (waits up to a few
        seconds for them) and release connections."""
        self.events.close()
        self._stop.set()
        for r in self._reflectors:
            r.interrupt()
        for r in self._reflectors:
            r.join(timeout=5.0)
        self._reflectors.clear()

    # --- DRA (issue 30): the kubelet plugin reads a claim's allocation (resource.k8s.io/v1).
    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaim; raises :class:`NotFoundError`."""
        obj = self._call(f"get resourceclaim {namespace}/{name}", self._resource_v1().read_namespaced_resource_claim,
                         name, namespace)
        obj.setdefault("kind", "ResourceClaim")
        obj.setdefault("apiVersion", "resource.k8s.io/v1")
        return obj

    # --- DRA publishing (issue 30): ResourceSlices and DeviceClasses (resource.k8s.io/v1, ResourceV1Api), plain JSON
    # in and out as every other call here.
    def _resource_v1(self) -> Any:
        from kubernetes import client

        api = self.__dict__.get("_resource_v1_api")
        if api is None:
            api = self.__dict__.setdefault("_resource_v1_api", client.ResourceV1Api(self.api_client))
        return api

    @staticmethod
    def _typed_resource(obj: dict[str, Any], kind: str) -> dict[str, Any]:
        obj.setdefault("kind", kind)
        obj.setdefault("apiVersion", "resource.k8s.io/v1")
        return obj

    def list_resource_slices(self, node: str | None = None, driver: str | None = None) -> list[dict[str, Any]]:
        """ResourceSlices, filtered by the API server on ``spec.nodeName`` and ``spec.driver`` (field selectors)."""
        selector = ",".join(f"{key}={value}" for key, value in (("spec.nodeName", node), ("spec.driver", driver))
                            if value)
        kwargs = {"field_selector": selector} if selector else {}
        body = self._call("list resourceslices", self._resource_v1().list_resource_slice, **kwargs)
        return [self._typed_resource(item, "ResourceSlice") for item in body.get("items") or []]

    def create_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ResourceSlice (409: :class:`ConflictError`)."""
        name = (obj.get("metadata") or {}).get("name")
        return self._typed_resource(self._call(f"create resourceslice {name}",
                                               self._resource_v1().create_resource_slice, dict(obj)), "ResourceSlice")

    def update_resource_slice(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a ResourceSlice (PUT; a stale ``metadata.resourceVersion`` is a :class:`ConflictError`)."""
        name = (obj.get("metadata") or {}).get("name")
        return self._typed_resource(self._call(f"update resourceslice {name}",
                                               self._resource_v1().replace_resource_slice, name, dict(obj)),
                                    "ResourceSlice")

    def delete_resource_slice(self, name: str) -> None:
        """Delete a ResourceSlice (404: :class:`NotFoundError`)."""
        self._call(f"delete resourceslice {name}", self._resource_v1().delete_resource_slice, name)

    def list_device_classes(self) -> list[dict[str, Any]]:
        """Every DeviceClass."""
        body = self._call("list deviceclasses", self._resource_v1().list_device_class)
        return [self._typed_resource(item, "DeviceClass") for item in body.get("items") or []]

    def create_device_class(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a DeviceClass (409: :class:`ConflictError`)."""
        name = (obj.get("metadata") or {}).get("name")
        return self._typed_resource(self._call(f"create deviceclass {name}", self._resource_v1().create_device_class,
                                               dict(obj)), "DeviceClass")

    def update_device_class(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Replace a DeviceClass (PUT, compare-and-swap on ``metadata.resourceVersion``)."""
        name = (obj.get("metadata") or {}).get("name")
        return self._typed_resource(self._call(f"update deviceclass {name}", self._resource_v1().replace_device_class,
                                               name, dict(obj)), "DeviceClass")

    def delete_device_class(self, name: str) -> None:
        """Delete a DeviceClass (404: :class:`NotFoundError`)."""
        self._call(f"delete deviceclass {name}", self._resource_v1().delete_device_class, name)

    # --- DRA translating webhook (issue 30): Namespaces (read) and ResourceClaimTemplates (resource.k8s.io/v1).
    def get_namespace(self, name: str) -> dict[str, Any]:
        """The Namespace (404: :class:`NotFoundError`)."""
        return self._typed(self._call(f"get namespace {name}", self.core.read_namespace, name), "Namespace")

    def get_resource_claim_template(self, namespace: str, name: str) -> dict[str, Any]:
        """The ResourceClaimTemplate (404: :class:`NotFoundError`)."""
        return self._typed_resource(self._call(f"get resourceclaimtemplate {namespace}/{name}",
                                               self._resource_v1().read_namespaced_resource_claim_template, name,
                                               namespace), "ResourceClaimTemplate")

    def create_resource_claim_template(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create a ResourceClaimTemplate in ``metadata.namespace`` (409: :class:`ConflictError`)."""
        meta = obj.get("metadata") or {}
        namespace, name = meta.get("namespace") or "default", meta.get("name")
        return self._typed_resource(self._call(f"create resourceclaimtemplate {namespace}/{name}",
                                               self._resource_v1().create_namespaced_resource_claim_template,
                                               namespace, dict(obj)), "ResourceClaimTemplate")

    def delete_resource_claim_template(self, namespace: str, name: str) -> None:
        """Delete a ResourceClaimTemplate (404: :class:`NotFoundError`)."""
        self._call(f"delete resourceclaimtemplate {namespace}/{name}",
                   self._resource_v1().delete_namespaced_resource_claim_template, name, namespace)


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of decoded JSON (marshal round trip: several times faster than ``copy.deepcopy``)."""
    return marshal.loads(marshal.dumps(obj))  # type: ignore[no-any-return]


class _Reflector(threading.Thread):
    """LIST then WATCH one resource, keeping a handler's view in step with the server's."""

    def __init__(self, cluster: KubeCluster, kind: str, handler: WatchHandler) -> None:
        super().__init__(name=f"hami-watch-{kind.lower()}s", daemon=True)
        self.cluster, self.kind, self.handler = cluster, kind, handler
        self.synced = threading.Event()
        #: the objects as delivered, and the highest resourceVersion this view is known to include (a LIST, an
        #: event or a bookmark); :meth:`KubeCluster.bound_pods` waits on it
        self.cache: WatchCache[tuple[str, str], dict[str, Any]] = WatchCache(self._index if kind == "Pod" else None)
        #: Pods only: spec.nodeName -> keys of the known pods bound there (kept by :meth:`_index`)
        self.by_node: dict[str, set[tuple[str, str]]] = {}
        self.lists = 0  # how many LISTs were made (tests, metrics)
        self.progress = ""  # the resourceVersion of the last event delivered from the current watch
        self._resp: Any = None
        self._resp_lock = threading.Lock()

    def _index(self, key: tuple[str, str], old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        """Keep :attr:`by_node` (the cache's lock held: readers copy the index under it)."""
        before = ((old or {}).get("spec") or {}).get("nodeName")
        after = ((new or {}).get("spec") or {}).get("nodeName")
        if before != after:
            if before:
                self.by_node.get(before, set()).discard(key)
            if after:
                self.by_node.setdefault(after, set()).add(key)

    def _put(self, key: tuple[str, str], obj: dict[str, Any]) -> dict[str, Any] | None:
        return self.cache.put(key, obj)

    def _pop(self, key: tuple[str, str]) -> dict[str, Any] | None:
        return self.cache.pop(key)

    def _advance(self, rv: str) -> None:
        self.cache.advance(parse_version(rv))

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return meta.get("namespace") or "", meta.get("name") or ""

    def _deliver(self, event: str, obj: dict[str, Any]) -> None:
        try:
            self.handler(event, obj)
        except Exception:
            log.exception("%s watch handler failed on %s %s", self.kind, event, self._key(obj))

    def interrupt(self) -> None:
        """Unblock a thread waiting on the watch stream (called by :meth:`KubeCluster.close`)."""
        with self._resp_lock:
            resp = self._resp
        if resp is not None:
            _abort_response(resp)

    def _relist(self, resync: bool) -> str:
        items, rv = self.cluster._list(self.kind)
        self.lists += 1
        fresh = {self._key(o): o for o in items}
        for key in [k for k in self.cache.entries if k not in fresh]:
            self._deliver("DELETED", self._pop(key) or {})
        for key, obj in fresh.items():
            old = self._put(key, obj)
            if old is None:
                self._deliver("ADDED", _copy(obj))
            elif resync or (old.get("metadata") or {}).get("resourceVersion") != obj["metadata"].get(
                    "resourceVersion"):
                self._deliver("MODIFIED", _copy(obj))
        self._advance(rv)
        self.synced.set()
        return rv

    def run(self) -> None:
        stop = self.cluster._stop
        backoff = self.cluster.backoff_initial_s
        resync = False
        while not stop.is_set():
            try:
                rv = self._relist(resync)
            except Exception as exc:
                if stop.is_set():
                    break
                log.warning("%s list: %s; relisting in %.1f s", self.kind, exc, backoff)
                stop.wait(backoff)
                backoff = min(self.cluster.backoff_max_s, backoff * 2)
                resync = False
                continue
            backoff = self.cluster.backoff_initial_s
            resync = self._watch_from(rv, time.monotonic() + self.cluster.resync_s)

    def _watch_from(self, rv: str, resync_at: float) -> bool:
        """WATCH from ``rv`` until a relist is due; returns whether it is the periodic resync (else the watch
        asked for a relist: 410 Gone, an ERROR event, an error that is not the transport's).

        As client-go's reflector: a stream that breaks, or a watch the server cannot take now (connection refused,
        5xx, 429), is re-made from the last version seen, with backoff; everything after it still arrives (or the
        server answers 410 and the reflector relists). Relisting on every broken stream would make each
        kube-apiserver restart cost every watcher a full LIST of all pods."""
        stop = self.cluster._stop
        backoff = self.cluster.backoff_initial_s
        while not stop.is_set():
            left = resync_at - time.monotonic()
            if left <= 0:
                return True
            self.progress = rv
            try:
                rv, ok = self._watch_once(rv, max(1, min(self.cluster.watch_timeout_s, int(left) + 1)))
            except TemporaryError as exc:
                if stop.is_set():
                    return False
                rv = self.progress  # what the broken stream delivered is not delivered again
                log.warning("%s watch: %s; watching again from resourceVersion %s in %.1f s", self.kind, exc, rv,
                            backoff)
                stop.wait(backoff)
                backoff = min(self.cluster.backoff_max_s, backoff * 2)
                continue
            except Exception as exc:
                if not stop.is_set():
                    log.warning("%s watch: %s; relisting in %.1f s", self.kind, exc, backoff)
                    stop.wait(backoff)
                return False
            if not ok:
                return False
            backoff = self.cluster.backoff_initial_s
        return False

    def _watch_once(self, rv: str, timeout_s: int) -> tuple[str, bool]:
        """One WATCH request from ``rv``. Returns the last version seen and whether to go on watching (a clean
        end of stream) rather than relist (410 Gone, an ERROR event)."""
        from kubernetes.client.exceptions import ApiException

        cluster = self.cluster
        if self.kind == "Node":
            fn = cluster.core.list_node
        elif self.kind == "Pod":
            fn = cluster.core.list_pod_for_all_namespaces
        else:
            fn = cluster.core.list_resource_quota_for_all_namespaces
        cluster.limiter.acquire()
        try:
            resp = fn(watch=True, resource_version=rv, timeout_seconds=timeout_s, allow_watch_bookmarks=True,
                      _preload_content=False, _request_timeout=(cluster.request_timeout_s, timeout_s + 30))
        except ApiException as exc:
            if exc.status == 410:
                log.info("%s watch from resourceVersion %s: 410 Gone; relisting", self.kind, rv)
                return rv, False
            raise translate_api_error(exc, f"watch {self.kind.lower()}s") from None
        with self._resp_lock:
            self._resp = resp
        if cluster._stop.is_set():  # close() may have run before the response was published
            _abort_response(resp)
        try:
            return self._read_stream(resp, rv)
        except (HamiError, ValueError):
            raise
        except Exception as exc:  # the stream broke (connection reset, response ended prematurely)
            if cluster._stop.is_set():
                return rv, False
            raise TemporaryError(f"watch {self.kind.lower()}s: stream broken ({type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())})", delay=0.2) from None
        finally:
            with self._resp_lock:
                self._resp = None
            with contextlib.suppress(Exception):
                resp.release_conn()

    def _read_stream(self, resp: Any, rv: str) -> tuple[str, bool]:
        """Deliver the events of one watch response; :attr:`progress` follows the last version delivered."""
        stop = self.cluster._stop
        buffer = b""
        for chunk in resp.stream(64 * 1024, decode_content=True):
            if stop.is_set():
                return rv, False
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    rv, ok = self._handle_line(line, rv)
                    self.progress = rv
                    if not ok:
                        return rv, False
        if buffer.strip():
            rv, ok = self._handle_line(buffer, rv)
            self.progress = rv
            return rv, ok
        return rv, True

    def _handle_line(self, line: bytes, rv: str) -> tuple[str, bool]:
        event = json.loads(line)
        typ, obj = event.get("type"), event.get("object") or {}
        if typ == "ERROR":
            code = obj.get("code")
            log.info("%s watch ERROR event (%s %s): %s; relisting", self.kind, code, obj.get("reason"),
                     obj.get("message"))
            return rv, False
        new_rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
        if typ == "BOOKMARK":
            self._advance(new_rv)
            return new_rv, True
        if typ not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("%s watch: unknown event type %r ignored", self.kind, typ)
            return rv, True
        obj = KubeCluster._typed(obj, self.kind)
        key = self._key(obj)
        if typ == "DELETED":
            self._pop(key)
        else:
            typ = "MODIFIED" if self._put(key, obj) is not None else "ADDED"
        self._deliver(typ, _copy(obj) if typ != "DELETED" else obj)
        self._advance(new_rv)
        return new_rv, True
