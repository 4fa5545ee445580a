"""The API objects of the e2e tier, and the parts of a kubelet the harness plays.

There is no kubelet here. A Node is created as an API object and its capacity, allocatable and Ready condition
are written through the ``status`` subresource, as a kubelet's registration does. :class:`KubeletSim` plays the
kubelet for pods bound to nodes that have no real device plugin: it answers a bound pod's device request through
hami's own Allocate logic (:class:`hami_core.node.allocate.Allocator`, the code behind the device plugin's gRPC
Allocate, with the device plugin's ServiceAccount), marks the pod Running, and confirms a graceful deletion
(the final DELETE with ``gracePeriodSeconds=0`` and the pod's UID as precondition), as kubelet does.
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hami_core.engine.pods import annotations, metadata
from hami_core.wire import keys
from hami_core.wire.pods import decode_container_devices, decode_pod_single_device

__all__ = ["KubeletSim", "gpu_devices", "gpu_pod", "node_object", "node_status", "registration"]

log = logging.getLogger("hami.e2e.kubelet")

GPU_MEM = 81920
SPLIT = 10


def gpu_devices(node: str, gpus: int = 8, mem: int = GPU_MEM,
                model: str = "NVIDIA A100-SXM4-80GB") -> list[dict[str, Any]]:
    """The devices-file entries of ``node``'s fake GPUs (what ``hami device-plugin --devices-file`` reads)."""
    tag = zlib.crc32(node.encode()) % 10**8  # stable across processes (str hashes are salted per process)
    return [{"uuid": f"GPU-{tag:08d}-0000-4000-8000-{i:012d}", "model": model,
             "memory": mem, "numa": 0, "index": i} for i in range(gpus)]


def registration(node: str, gpus: int = 8, mem: int = GPU_MEM, model: str = "NVIDIA A100-SXM4-80GB") -> str:
    """``hami.io/node-nvidia-register`` as HAMi's NVIDIA device plugin writes it for ``gpu_devices(node)``."""
    return json.dumps([{"id": d["uuid"], "index": d["index"], "count": SPLIT, "devmem": mem, "devcore": 100,
                        "type": model, "numa": 0, "mode": "hami-core", "health": True}
                       for d in gpu_devices(node, gpus, mem, model)], separators=(",", ":"))


def node_object(name: str, *, labels: Mapping[str, str] | None = None,
                annotations_: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gpu": "on", **(labels or {})},
                         "annotations": dict(annotations_ or {})}}


def node_status(gpus: int = 8, *, cpu: str = "64", memory: str = "512Gi", pods: str = "250",
                extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Ready node's status: capacity = allocatable (``nvidia.com/gpu`` = gpus x split count)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": cpu, "memory": memory, "pods": pods, "nvidia.com/gpu": str(gpus * SPLIT), **(extra or {})}
    return {"status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "e2e harness", "lastHeartbeatTime": now,
                                       "lastTransitionTime": now}],
                       "nodeInfo": {"kubeletVersion": "v1.37.2", "architecture": "amd64", "operatingSystem": "linux"}}}


def create_node(core: Any, name: str, *, gpus: int = 8, register: bool = True,
                status_extra: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None) -> None:
    """Create a Ready, untainted Node; with ``register``, carrying the registration annotation of ``gpus`` GPUs."""
    annos = {keys.NODE_NVIDIA_REGISTER: registration(name, gpus)} if register and gpus else {}
    core.create_node(node_object(name, labels=labels, annotations_=annos), _preload_content=False)
    core.patch_node_status(name, node_status(gpus, extra=status_extra), _preload_content=False)


def gpu_pod(name: str, *, namespace: str = "default", gpus: int = 1, mem: int | None = None,
            cores: int | None = None, scheduler: str | None = None, priority_class: str | None = None,
            labels: Mapping[str, str] | None = None, cpu: str = "100m") -> dict[str, Any]:
    """A pod asking ``gpus`` vGPUs (and gpumem/gpucores when given); no schedulerName: the webhook sets it."""
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                            "resources": {"limits": limits, "requests": {"cpu": cpu}}}],
                            "terminationGracePeriodSeconds": 30}
    if scheduler:
        spec["schedulerName"] = scheduler
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {"app": "e2e"})},
            "spec": spec}


def allocated(pod: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """(device UUID, memory, cores) of every device in the pod's ``hami.io/vgpu-devices-allocated``."""
    raw = annotations(pod).get(keys.VGPU_DEVICES_ALLOCATED) or ""
    return [(d.uuid, d.usedmem, d.usedcores) for slot in decode_pod_single_device(raw) for d in slot]


@dataclass
class Served:
    """What the simulated kubelet got from Allocate for one pod."""

    node: str
    env: list[dict[str, str]] = field(default_factory=list)
    error: str = ""


class KubeletSim:
    """The kubelets of ``nodes``: Allocate for bound pods, Running status, deletion confirmation.

    :param watch_cluster: a ``KubeCluster`` (admin) whose pod watch drives the simulation.
    :param device_cluster: the ``KubeCluster`` Allocate runs with (the device plugin's ServiceAccount).
    """

    def __init__(self, watch_cluster: Any, device_cluster: Any, nodes: Iterable[str], *, run_pods: bool = True,
                 confirm_deletions: bool = True, allocate: bool = True, workers: int = 16,
                 prefix: str | None = None) -> None:
        from hami_core.engine.config import load_config
        from hami_core.node.allocate import Allocator
        from hami_core.plugins.manager import get_plugin_manager
        from hami_core.plugins.relay import RoutedHooks

        self.watch_cluster, self.device_cluster = watch_cluster, device_cluster
        self.nodes = set(nodes)
        self.prefix = prefix  # also every node whose name starts with it
        self.run_pods, self.confirm_deletions, self.do_allocate = run_pods, confirm_deletions, allocate
        pm = get_plugin_manager()
        backend = next(b for b in pm.backends(load_config({"nvidia": {}}).devices) if b.vendor == "nvidia")
        hooks = RoutedHooks(pm, [backend])  # as the device plugin calls its backend's hooks

        def hook(pod: Mapping[str, Any], index: int, devices: Sequence[Any]) -> Any:
            return hooks.hami_allocate(backend=backend, pod=pod, container_index=index, devices=devices)

        self._make = lambda node: Allocator(device_cluster, node, backend, hook)
        self.allocators: dict[str, Any] = {}
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kubelet-sim")
        self.served: dict[str, Served] = {}
        self.deleted: set[str] = set()
        self._lock = threading.Lock()
        self.errors: list[str] = []
        #: nodes whose kubelet does not Allocate (a pod stays ``allocating``, its node locked)
        self.no_allocate: set[str] = set()
        #: nodes whose kubelet holds deletions (a deleted pod stays Terminating) until :meth:`release_deletions`
        self.hold_deletions: set[str] = set()
        self._held: dict[str, list[dict[str, Any]]] = {}

    def add_nodes(self, names: Iterable[str]) -> None:
        """Play the kubelet of these nodes too."""
        with self._lock:
            self.nodes |= set(names)

    def allocator(self, node: str) -> Any:
        with self._lock:
            if node not in self.allocators:
                self.allocators[node] = self._make(node)
            return self.allocators[node]

    def start(self) -> KubeletSim:
        self.watch_cluster.watch(lambda _e, _n: None, self._on_pod)
        return self

    def stop(self) -> None:
        self.watch_cluster.close()
        self.pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------------------------ events
    def _on_pod(self, event: str, pod: dict[str, Any]) -> None:
        meta = metadata(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if event == "DELETED" or not node or not (node in self.nodes or (self.prefix and node.startswith(self.prefix))):
            return
        uid = str(meta.get("uid"))
        if meta.get("deletionTimestamp"):
            if self.confirm_deletions:
                with self._lock:
                    if uid in self.deleted:
                        return
                    self.deleted.add(uid)
                    if node in self.hold_deletions:
                        self._held.setdefault(node, []).append(pod)
                        return
                self.pool.submit(self._confirm_delete, pod)
            return
        phase = annotations(pod).get(keys.BIND_PHASE)
        if self.do_allocate and phase == keys.BIND_PHASE_ALLOCATING and node not in self.no_allocate:
            with self._lock:
                if uid in self.served:
                    return
                self.served[uid] = Served(node)
            self.pool.submit(self._allocate, node, pod)

    def held(self, node: str) -> list[dict[str, Any]]:
        """The Terminating pods of ``node`` whose deletion this kubelet holds."""
        with self._lock:
            return list(self._held.get(node, []))

    def release_deletions(self, node: str) -> None:
        """Confirm the held deletions of ``node`` now, and from now on at once."""
        with self._lock:
            self.hold_deletions.discard(node)
            pods = self._held.pop(node, [])
        for pod in pods:
            self._confirm_delete(pod)

    def _kubelet_ids(self, pod: Mapping[str, Any]) -> list[list[str]]:
        """Per container asking devices, the IDs kubelet would pass: one ``<uuid>-<k>`` per device."""
        raw = annotations(pod).get(keys.VGPU_DEVICES_TO_ALLOCATE) or ""
        out = []
        for slot in raw.split(";"):
            if slot:
                out.append([f"{d.uuid}-{k}" for k, d in enumerate(decode_container_devices(slot))])
        return out

    def _allocate(self, node: str, pod: dict[str, Any]) -> None:
        uid = str(metadata(pod).get("uid"))
        served = self.served[uid]
        try:
            for ids in self._kubelet_ids(pod):
                # kubelet calls Allocate once per container, init containers first
                result = self.allocator(node).allocate([ids])
                served.env.extend(dict(r.env) for r in result)
        except Exception as exc:
            served.error = f"{type(exc).__name__}: {exc}"
            self.errors.append(f"{metadata(pod).get('name')}: {served.error}")
            log.warning("allocate for %s on %s failed: %s", metadata(pod).get("name"), node, exc)
            return
        if self.run_pods:
            self._set_running(pod)

    def _set_running(self, pod: Mapping[str, Any]) -> None:
        meta = metadata(pod)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {"status": {"phase": "Running", "startTime": now, "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{"name": c["name"], "ready": True, "restartCount": 0, "image": c["image"],
                                   "imageID": "", "state": {"running": {"startedAt": now}}}
                                  for c in (pod.get("spec") or {}).get("containers") or []]}}
        try:
            self._core().patch_namespaced_pod_status(meta["name"], meta["namespace"], status, _preload_content=False)
        except Exception as exc:
            log.info("pod %s: cannot set Running: %s", meta.get("name"), exc)

    def _core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.watch_cluster.api_client)

    def _confirm_delete(self, pod: Mapping[str, Any]) -> None:
        """kubelet's last word on a Terminating pod: delete it for good, only if it is still the same pod."""
        meta = metadata(pod)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                "preconditions": {"uid": meta.get("uid")}}
        try:
            self._core().delete_namespaced_pod(meta["name"], meta["namespace"], body=body, _preload_content=False)
        except Exception as exc:
            log.info("pod %s: confirming its deletion: %s", meta.get("name"), exc)
