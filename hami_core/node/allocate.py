"""Allocate and GetPreferredAllocation, independent of gRPC (spec node.md §2.6, §2.7, §2.9, §2.10).

Kubelet's device IDs (``<uuid>-<i>``) carry no pod identity; the pod is found through the node lock the
scheduler took before binding (``hami.io/mutex.lock = <time>,<ns>,<name>``) or, failing that, as the
Pending pod on this node whose ``hami.io/bind-phase`` is ``allocating``/``success``. Its
``hami.io/vgpu-devices-to-allocate`` annotation holds one slot per container (init first); each
Allocate pops the first non-empty slot, and when none is left the pod is marked ``success`` and the lock
released. Any error marks it ``failed`` and releases the lock (owner-checked).

Every API call here is idempotent (reads, and merge patches that set a value computed under the node-global
mutex), so a 409, a 500 or a lost response is retried a few times before the pod is failed; a pod that is gone
(404) is not retried.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hami_core.cluster.base import Cluster, NotFoundError
from hami_core.engine.pods import annotations, metadata
from hami_core.plugins.errors import HamiError, PermanentError, WireFormatError
from hami_core.plugins.types import ContainerAllocation, ContainerDevice, DeviceBackend, LockSpec
from hami_core.scheduler.nodelock import NodeLocker
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock
from hami_core.wire.pods import decode_pod_single_device, encode_pod_single_device

log = logging.getLogger("hami.node.allocate")

#: ``(pod, container_index, devices) -> ContainerAllocation``; container_index counts init containers first.
AllocateFn = Callable[[Mapping[str, Any], int, Sequence[ContainerDevice]], ContainerAllocation | None]

_REPLICA = re.compile(r"-(\d+)$")
#: Attempts per API call, and the first backoff (doubled each time).
API_ATTEMPTS = 3
API_BACKOFF_S = 0.05

T = TypeVar("T")


def with_retries(what: str, call: Callable[[], T], *, attempts: int = API_ATTEMPTS, backoff_s: float = API_BACKOFF_S,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, retried on any error but a permanent one (404); the last error propagates."""
    delay = backoff_s
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except PermanentError:
            raise
        except Exception as exc:
            if attempt == attempts:
                raise
            log.info("%s: attempt %d failed (%s); retrying", what, attempt, exc)
            sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")


class AllocateError(HamiError):
    """Allocate cannot serve the request; kubelet fails the pod's admission with this message."""


@dataclass(frozen=True, slots=True)
class PreferredRequest:
    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


def physical_device_id(device_id: str) -> str:
    """The physical UUID of an advertised ID: before ``::``; else ``<uuid>-<n>`` with 6 dashes loses ``-<n>``."""
    if "::" in device_id:
        return device_id.split("::", 1)[0]
    if device_id.count("-") == 6 and _REPLICA.search(device_id):
        return device_id.rsplit("-", 1)[0]
    return device_id


def pod_name(pod: Mapping[str, Any]) -> str:
    meta = metadata(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def find_pending_pod(cluster: Cluster, node_name: str, *, retry: Callable[..., Any] = with_retries) -> dict[str, Any]:
    """The pod being allocated on ``node_name`` (HAMi ``GetPendingPod``); raises :class:`AllocateError`."""
    return find_pending(cluster, node_name, retry=retry)[0]


def find_pending(cluster: Cluster, node_name: str, *,
                 retry: Callable[..., Any] = with_retries) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod being allocated on ``node_name``, the Node as read to find it); raises :class:`AllocateError`."""
    node = retry(f"get node {node_name}", lambda: cluster.get_node(node_name))
    return _pending_pod(cluster, node_name, node, retry), node


def _pending_pod(cluster: Cluster, node_name: str, node: Mapping[str, Any],
                 retry: Callable[..., Any]) -> dict[str, Any]:
    lock = annotations(node).get(keys.NODE_LOCK)
    if lock:
        try:
            value = decode_node_lock(lock, key=keys.NODE_LOCK)
        except WireFormatError as exc:
            log.warning("node %s: ignoring unreadable lock: %s", node_name, exc)
        else:
            if not value.legacy:
                ns, name = value.namespace or "default", value.name or ""
                try:
                    return retry(f"get pod {ns}/{name}", lambda: cluster.get_pod(ns, name))
                except NotFoundError:
                    # a stale lock of a deleted pod (the scheduler breaks it on its next bind): look further
                    log.warning("node %s: lock %r names pod %s/%s, which is gone", node_name, lock, ns, name)
    # this node's pods only (HAMi lists every pod of the cluster, from every node's plugin)
    for pod in retry(f"list pods on node {node_name}", lambda: cluster.pods_on_node(node_name)):
        spec = pod.get("spec") or {}
        annos = annotations(pod)
        if (spec.get("nodeName") == node_name and (pod.get("status") or {}).get("phase") == "Pending"
                and keys.BIND_TIME in annos
                and annos.get(keys.BIND_PHASE) in (keys.BIND_PHASE_ALLOCATING, keys.BIND_PHASE_SUCCESS)
                and annos.get(keys.VGPU_NODE) == node_name):
            return pod
    raise AllocateError(f"no binding pod found on node {node_name}")


class Allocator:
    """Serves Allocate for one backend on one node; all calls are serialised (the bookkeeping is node-global)."""

    def __init__(self, cluster: Cluster, node_name: str, backend: DeviceBackend, allocate: AllocateFn, *,
                 node_lock: NodeLocker | None = None, prefer_kubelet_ids: bool = False,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.backend = backend
        self.allocate_fn = allocate
        self.node_lock = node_lock or NodeLocker(cluster)
        self.prefer_kubelet_ids = prefer_kubelet_ids
        self.annotation = backend.to_allocate_annotation or keys.VGPU_DEVICES_TO_ALLOCATE
        self.lock_spec = LockSpec(backend.lock_annotation or keys.NODE_LOCK)
        self._mutex = threading.Lock()
        self.sleep = sleep

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        return with_retries(what, call, sleep=self.sleep)

    # ----------------------------------------------------------------------------------- allocate
    def allocate(self, requests: Sequence[Sequence[str]]) -> list[ContainerAllocation]:
        """One :class:`ContainerAllocation` per kubelet container request (its device IDs)."""
        with self._mutex:
            pod, node = find_pending(self.cluster, self.node_name, retry=self._retry)
            try:
                return self._allocate(pod, requests, node)
            except Exception as exc:
                self._finish(pod, keys.BIND_PHASE_FAILED)
                if isinstance(exc, AllocateError):
                    raise
                raise AllocateError(f"allocate for pod {pod_name(pod)} failed: {exc}") from exc

    def _allocate(self, pod: dict[str, Any], requests: Sequence[Sequence[str]],
                  node: Mapping[str, Any] | None = None) -> list[ContainerAllocation]:
        raw = annotations(pod).get(self.annotation)
        if raw is None:
            raise AllocateError(f"pod {pod_name(pod)} has no {self.annotation} annotation")
        try:
            slots = list(decode_pod_single_device(raw, key=self.annotation))
        except WireFormatError as exc:
            raise AllocateError(f"pod {pod_name(pod)}: {exc}") from None
        results: list[ContainerAllocation] = []
        try:
            pod_annotations = self._allocate_containers(pod, slots, requests, results)
            meta = metadata(pod)
            ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
            # The consumed slots are written before kubelet gets its answer: a retried or repeated Allocate after
            # a crash finds them gone and fails clearly instead of handing the devices out a second time. The last
            # container's Allocate writes bind-phase success in the same patch.
            done = not any(slots)
            patch: dict[str, Any] = {"metadata": {"annotations": {
                **pod_annotations, self.annotation: encode_pod_single_device(slots),
                **({keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS} if done else {})}}}
            if pod_annotations and meta.get("resourceVersion"):
                # The vendor computed these from the pod as read: a compare-and-swap, so a concurrent change of
                # the same annotations fails the call (and rolls back) instead of being overwritten.
                patch["metadata"]["resourceVersion"] = meta.get("resourceVersion")
            written = self._retry(f"patch pod {ns}/{name}", lambda: self.cluster.patch_pod(ns, name, patch))
        except Exception:
            _roll_back(results)
            raise
        if self._all_consumed(written):
            if not done:  # written by someone else meanwhile (no CAS without vendor annotations): finish it
                self._set_phase(pod, keys.BIND_PHASE_SUCCESS)
            self._release(pod, node)
            log.info("pod %s/%s: %s=%s", ns, name, keys.BIND_PHASE, keys.BIND_PHASE_SUCCESS)
        return results

    def _allocate_containers(self, pod: dict[str, Any], slots: list[tuple[ContainerDevice, ...]],
                             requests: Sequence[Sequence[str]], results: list[ContainerAllocation]) -> dict[str, str]:
        """Pop a slot and call the vendor per request, appending to ``results``; the merged pod annotations.

        Each hook sees the pod with the earlier containers' ``pod_annotations`` applied (on a copy).
        """
        merged: dict[str, str] = {}
        view = pod
        for ids in requests:
            index = next((i for i, slot in enumerate(slots) if slot), None)
            if index is None:
                raise AllocateError(f"pod {pod_name(pod)}: no devices left to allocate in {self.annotation}")
            devices = slots[index]
            slots[index] = ()
            if len(devices) != len(ids):
                raise AllocateError(f"pod {pod_name(pod)}: device number not matched "
                                    f"(annotation {len(devices)}, kubelet {len(ids)})")
            if self.prefer_kubelet_ids:
                devices = tuple(_with_uuid(d, physical_device_id(i)) for d, i in zip(devices, ids, strict=True))
            result = self.allocate_fn(view, index, devices)
            if result is None:
                raise AllocateError(f"no plugin implements hami_allocate for backend {self.backend.name}")
            results.append(result)
            extra = getattr(result, "pod_annotations", None)  # duck-typed results (test doubles) have none
            if extra:
                merged.update(extra)
                meta = dict(metadata(view))
                meta["annotations"] = {**annotations(view), **extra}
                view = {**view, "metadata": meta}
        return merged

    def _all_consumed(self, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` (as the API server answered the patch) has no device left to allocate."""
        try:
            return not any(decode_pod_single_device(annotations(pod).get(self.annotation, ""), key=self.annotation))
        except WireFormatError:
            return False

    def _set_phase(self, pod: Mapping[str, Any], phase: str) -> None:
        meta = metadata(pod)
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        try:
            self._retry(f"patch pod {ns}/{name}", lambda: self.cluster.patch_pod(
                ns, name, {"metadata": {"annotations": {keys.BIND_PHASE: phase}}}))
        except Exception as exc:
            log.error("pod %s/%s: cannot set %s=%s: %s", ns, name, keys.BIND_PHASE, phase, exc)

    def _release(self, pod: Mapping[str, Any], node: Mapping[str, Any] | None = None) -> None:
        """Release the node lock if ``pod`` holds it (``node``: the Node as read by this Allocate, so that the
        release is one compare-and-swap write); errors are logged only."""
        try:
            self.node_lock.release(self.node_name, pod, self.lock_spec, seen=node)
        except Exception as exc:
            log.error("node %s: cannot release the lock of pod %s: %s", self.node_name, pod_name(pod), exc)

    def _finish(self, pod: Mapping[str, Any], phase: str) -> None:
        """Mark ``bind-phase`` and release the node lock if this pod holds it; errors are logged only."""
        self._set_phase(pod, phase)
        self._release(pod)
        log.info("pod %s: %s=%s", pod_name(pod), keys.BIND_PHASE, phase)

    # --------------------------------------------------------------------------- preferred allocation
    def preferred(self, requests: Sequence[PreferredRequest]) -> list[list[str] | None]:
        """Kubelet IDs matching the annotation's devices, per request; ``None`` where no answer (never raises)."""
        with self._mutex:
            try:
                pod = find_pending_pod(self.cluster, self.node_name, retry=self._retry)
                slots = [s for s in decode_pod_single_device(annotations(pod).get(self.annotation, ""),
                                                             key=self.annotation) if s]
            except Exception as exc:
                log.info("preferred allocation without annotations: %s", exc)
                slots = []
        out: list[list[str] | None] = []
        for k, req in enumerate(requests):
            out.append(_prefer(req, slots[k]) if k < len(slots) else None)
        return out


def _roll_back(results: Sequence[ContainerAllocation]) -> None:
    """Call the vendors' rollbacks, newest first; a failing rollback is logged and the others still run."""
    for result in reversed(results):
        rollback = getattr(result, "rollback", None)
        if rollback is None:
            continue
        try:
            rollback()
        except Exception as exc:
            log.error("rolling back an allocation failed: %s", exc)


def _with_uuid(device: ContainerDevice, uuid: str) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, type=device.type, usedmem=device.usedmem, usedcores=device.usedcores,
                           idx=device.idx, slots=device.slots, custom_info=device.custom_info)


def _prefer(req: PreferredRequest, slot: Sequence[ContainerDevice]) -> list[str] | None:
    chosen = list(req.must_include)
    must = [physical_device_id(i) for i in req.must_include]
    used = set(chosen)
    for device in slot[:req.size]:
        if device.uuid in must:
            must.remove(device.uuid)
            continue
        pick = next((i for i in req.available if i not in used and physical_device_id(i) == device.uuid), None)
        if pick is None:
            log.info("preferred allocation: no available ID for %s", device.uuid)
            return None
        chosen.append(pick)
        used.add(pick)
    if len(chosen) != req.size:
        log.info("preferred allocation: got %d IDs, want %d", len(chosen), req.size)
        return None
    return chosen
