"""Shared pieces of the reliability tests: scheduler replicas on the in-test API server, a kube-scheduler driver,
a device-plugin stand-in that runs the real :class:`~hami_core.node.allocate.Allocator`, and the invariants.

The API server is ``tests/kubeapi/fake_apiserver.py`` (an in-test stand-in, reached over real HTTP through the
official ``kubernetes`` client by :class:`~hami_core.cluster.kube.KubeCluster`).
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeapi.fake_apiserver import FakeApiServer
from scheduler.sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.base import Cluster
from hami_core.cluster.kube import KubeCluster
from hami_core.cluster.memory import MemoryCluster
from hami_core.engine.facade import Engine
from hami_core.engine.pods import annotations
from hami_core.node.allocate import Allocator
from hami_core.scheduler.app import Options, Scheduler
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.nodelock import DEFAULT_WAIT_S
from hami_core.scheduler.sync import Sync
from hami_core.wire import keys
from hami_core.wire.pods import decode_pod_single_device

__all__ = ["Driver", "MemoryReplica", "Outcome", "ReplicaView", "bound_overcommit", "bound_pods_match_annotations",
           "check_capacity",
           "device_usage", "fresh_engine", "gpu_pod", "kube_cluster", "kubelet_ids", "ledger_view", "make_engine",
           "nvidia_node", "start_replica", "wait_until"]


def kubelet_ids(pod: Mapping[str, Any], annotation: str = keys.VGPU_DEVICES_TO_ALLOCATE) -> list[list[str]]:
    """The device IDs kubelet passes to Allocate for ``pod``, one list per container asking for devices: the
    replicas ``<uuid>-<k>`` of its booked devices, as GetPreferredAllocation steers kubelet to them (the plugin
    refuses IDs of other devices)."""
    slots = decode_pod_single_device(annotations(pod).get(annotation) or "", key=annotation)
    return [[f"{d.uuid}-{k}" for k, d in enumerate(slot)] for slot in slots if slot]


def kube_cluster(server: FakeApiServer, *, request_timeout_s: float = 10.0) -> KubeCluster:
    """A KubeCluster with its own official-client connection pool to ``server`` (no rate limit)."""
    from kubernetes import client

    cfg = client.Configuration(host=server.url)
    cfg.connection_pool_maxsize = 32
    return KubeCluster(api_client=client.ApiClient(cfg), qps=0, request_timeout_s=request_timeout_s,
                       backoff_initial_s=0.05, backoff_max_s=0.5)


def start_replica(server: FakeApiServer, *, clock: Callable[[], float] | None = None,
                  lock_timeout_s: float = 300.0, request_timeout_s: float = 10.0, start: bool = True,
                  sync_wait_s: float = 10.0, lock_wait_s: float = DEFAULT_WAIT_S,
                  write_allocation: str = "filter") -> Scheduler:
    """One scheduler replica (engine, sync feed, extender) over its own KubeCluster; no HTTP serving needed
    for calls made in-process, but ``start()`` runs the whole service as production does."""
    engine = make_engine(clock)
    svc = Scheduler(engine, kube_cluster(server, request_timeout_s=request_timeout_s),
                    Options(port=0, metrics_host=None, sync_wait_s=sync_wait_s, lock_timeout_s=lock_timeout_s,
                            lock_wait_s=lock_wait_s, write_allocation=write_allocation))
    svc.extender.locker.backoff_s = 0.01  # keep retries quick in tests
    if start:
        svc.start()
    return svc


class ReplicaView:
    """One replica's connection to a shared :class:`MemoryCluster` (an in-test stand-in for its API client).

    Closing it silences only this replica's watch. With ``lag=True`` watch events reach the replica through a
    queue drained by its own thread, as a real watch lags the API server: two replicas then race on stale views.
    While ``fault`` is ``"fail"`` every write fails unapplied (the API is unreachable); with ``"lose"`` the first
    write is applied but its response lost, and every later one fails (so retries cannot hide the loss).
    """

    def __init__(self, store: MemoryCluster, *, lag: bool = False) -> None:
        self.store = store
        self.fault = ""
        self._handlers: tuple[Any, Any] | None = None
        self._queue: queue.Queue[tuple[Any, str, dict[str, Any]] | None] | None = queue.Queue() if lag else None
        self._thread: threading.Thread | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _write(self, fn: Any, *args: Any) -> Any:
        if self.fault == "fail":
            raise ConnectionError("injected: connection refused")
        out = fn(*args)
        if self.fault == "lose":
            self.fault = "fail"
            raise TimeoutError("injected: response lost")
        return out

    def patch_pod(self, namespace: str, name: str, patch: Any) -> dict[str, Any]:
        return self._write(self.store.patch_pod, namespace, name, patch)

    def patch_node(self, name: str, patch: Any) -> dict[str, Any]:
        return self._write(self.store.patch_node, name, patch)

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Any = None) -> None:
        return self._write(self.store.bind, namespace, name, uid, node, annotations)

    def watch(self, on_node: Any, on_pod: Any) -> None:
        if self._queue is not None:
            q = self._queue

            def drain() -> None:
                while (item := q.get()) is not None:
                    handler, event, obj = item
                    handler(event, obj)
                    q.task_done()
                q.task_done()

            self._thread = threading.Thread(target=drain, name="lagging-watch", daemon=True)
            self._thread.start()
            self._handlers = (lambda e, o: q.put((on_node, e, o)), lambda e, o: q.put((on_pod, e, o)))
        else:
            self._handlers = (on_node, on_pod)
        self.store.watch(*self._handlers)

    def settled(self) -> bool:
        """True when every watch event sent so far has been handled."""
        return self._queue is None or self._queue.unfinished_tasks == 0

    def close(self) -> None:
        with self.store._lock:
            if self._handlers in self.store._watchers:
                self.store._watchers.remove(self._handlers)
        if self._queue is not None:
            self._queue.put(None)


class MemoryReplica:
    """A scheduler replica (engine, sync feed, extender sharing one lock) on a :class:`ReplicaView`."""

    def __init__(self, store: MemoryCluster, *, lag: bool = False) -> None:
        self.view = ReplicaView(store, lag=lag)
        self.engine = make_engine()
        self.sync = Sync(self.engine, self.view)
        self.lock = self.sync.lock
        self.extender = Extender(self.engine, self.view, engine_lock=self.lock, sleep=lambda s: None)
        self.sync.start(background=False)

    def stop(self) -> None:
        self.view.close()


def fresh_engine(server: FakeApiServer) -> Engine:
    """An engine rebuilt from the API server's current Nodes and Pods (what a restarted scheduler books)."""
    engine = make_engine()
    for node in server.objects("nodes").values():
        engine.upsert_node(node)
    for pod in server.objects("pods").values():
        engine.upsert_pod(pod)
    return engine


def bound_overcommit(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Devices over capacity counting only pods bound to a node (what really runs there). Reservations of pending
    pods are left out: a replica that has not yet seen another's reservation may place a pod over it, which is
    safe because a pending pod is filtered again (its reservation replaced) before it can be bound."""
    engine = make_engine()
    for node in nodes:
        engine.upsert_node(node)
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName"):
            engine.upsert_pod(pod)
    return check_capacity(engine)


def device_usage(engine: Engine) -> dict[str, tuple[int, int, int]]:
    """device UUID → (slots used, memory used, cores used)."""
    return {d.id: (d.used, d.usedmem, d.usedcores) for s in engine.nodes.values() for devs in s.devices.values()
            for d in devs}


def ledger_view(engine: Engine) -> dict[str, tuple[str, tuple[tuple[str, int, int, int], ...]]]:
    """pod key → (node, ((uuid, memory, cores, slots), ...)): the ledger, comparable across engines."""
    return {k: (b.node, tuple(sorted((d.uuid, d.usedmem, d.usedcores, d.slots) for devs in b.devices.values()
                                     for d in devs)))
            for k, b in engine.ledger.bookings.items()}


def check_capacity(engine: Engine) -> list[str]:
    """Every device over its split count, memory or cores (empty: the invariant holds)."""
    over = []
    for state in engine.nodes.values():
        for d in state.by_uuid.values():
            if d.used > d.count or d.usedmem > d.totalmem or d.usedcores > d.totalcore:
                over.append(repr(d))
    return over


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0, poll_s: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` (a generous bound for convergence, not a timing check)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()


@dataclass
class Outcome:
    bound: dict[str, str] = field(default_factory=dict)  # pod name → node
    pending: dict[str, str] = field(default_factory=dict)  # pod name → last error
    attempts: int = 0


class Driver:
    """Plays kube-scheduler (filter then bind, retrying a failed cycle) and kubelet + device plugin (Allocate
    right after a successful bind, through the real :class:`Allocator` on its own cluster client).

    :param replicas: the scheduler replicas; each attempt goes to a random one.
    :param dp_cluster: the device plugin's API client.
    """

    def __init__(self, replicas: list[Any], dp_cluster: Cluster, node_names: list[str], *,
                 max_attempts: int = 40, seed: int = 0, allocate: bool = True) -> None:
        self.replicas = replicas
        self.dp_cluster = dp_cluster
        self.node_names = node_names
        self.max_attempts = max_attempts
        self.allocate = allocate
        self.rng = random.Random(seed)
        self.rng_lock = threading.Lock()
        self.outcome = Outcome()
        self._lock = threading.Lock()
        self._allocators: dict[str, Allocator] = {}
        backend = replicas[0].engine.backends["NVIDIA"]
        self._backend = backend

    def allocator(self, node: str) -> Allocator:
        with self._lock:
            if node not in self._allocators:
                self._allocators[node] = Allocator(self.dp_cluster, node, self._backend, lambda *a: object())
            return self._allocators[node]

    def allocate_pod(self, node: str, namespace: str, name: str) -> Any:
        """kubelet admitting the pod: Allocate with the IDs of its booked devices (read as the plugin will)."""
        pod = self.dp_cluster.get_pod(namespace, name)
        return self.allocator(node).allocate(kubelet_ids(pod))

    def _pick(self) -> Scheduler:
        with self.rng_lock:
            return self.replicas[self.rng.randrange(len(self.replicas))]

    def schedule(self, pod: Mapping[str, Any]) -> None:
        """Run scheduling cycles for ``pod`` until it is bound or ``max_attempts`` cycles failed."""
        meta = pod["metadata"]
        error = ""
        unfit = 0
        for attempt in range(self.max_attempts):
            with self._lock:
                self.outcome.attempts += 1
            svc = self._pick()
            result = svc.extender.filter({"Pod": pod, "NodeNames": self.node_names})
            if result["Error"] or not result["NodeNames"]:
                error = result["Error"] or "no node fits"
                unfit += not result["Error"]
                if unfit > 3:  # unschedulable: nothing is freed in these runs, so it stays pending
                    break
                time.sleep(0.0005 * min(attempt + 1, 10))
                continue
            [node] = result["NodeNames"]
            bound = self._pick().extender.bind({"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                                "PodUID": meta["uid"], "Node": node})
            if bound["Error"]:
                error = bound["Error"]
                time.sleep(0.0005 * min(attempt + 1, 10))
                continue
            if self.allocate:
                self.allocate_pod(node, meta["namespace"], meta["name"])
            with self._lock:
                self.outcome.bound[meta["name"]] = node
            return
        with self._lock:
            self.outcome.pending[meta["name"]] = error

    def run(self, pods: Iterable[Mapping[str, Any]], threads: int) -> Outcome:
        """Schedule ``pods`` from ``threads`` worker threads; returns the outcome."""
        queue = list(pods)
        qlock = threading.Lock()
        failures: list[BaseException] = []

        def worker() -> None:
            while True:
                with qlock:
                    if not queue:
                        return
                    pod = queue.pop(0)
                try:
                    self.schedule(pod)
                except BaseException as exc:  # surfaced by the test
                    failures.append(exc)
                    return

        workers = [threading.Thread(target=worker, name=f"kube-scheduler-{i}") for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        if failures:
            raise failures[0]
        return self.outcome


def bound_pods_match_annotations(server: FakeApiServer) -> list[str]:
    """Bound HAMi pods whose ``hami.io/vgpu-node`` differs from ``spec.nodeName`` (empty: all consistent)."""
    wrong = []
    for (ns, name), pod in server.objects("pods").items():
        node = (pod.get("spec") or {}).get("nodeName")
        vgpu = annotations(pod).get(keys.VGPU_NODE)
        if node and vgpu and vgpu != node:
            wrong.append(f"{ns}/{name}: bound to {node}, allocation on {vgpu}")
    return wrong
