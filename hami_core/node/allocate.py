"""Allocate and GetPreferredAllocation, independent of gRPC (spec node.md §2.6, §2.7, §2.9, §2.10).

kubelet's Allocate names no pod: it carries the device IDs (``<uuid>-<i>``) it picked for one container, and
nothing else. The plugin ties it to a pod in three steps (docs/device-plugin.md, "Which pod an Allocate serves"):

1. **At most one pod can be waiting.** The scheduler binds a pod only under the node lock
   (``hami.io/mutex.lock = <time>,<ns>,<name>``), keeps the lock until that pod's Allocate (an expired lock too,
   while its holder still waits: :func:`~hami_core.scheduler.nodelock.awaits_allocate`), so a node has one pod
   between bind and Allocate per lock.
2. **The plugin checks that this is so.** It reads the Node and lists the node's pods. The candidates are the
   pods waiting for this backend's Allocate (HAMi's ``GetPendingPod`` rule: Pending, ``bind-time`` set,
   ``bind-phase=allocating`` only, ``vgpu-node`` = this node, not being deleted, a container slot left in this
   backend's ``…-to-allocate`` annotation). A lock naming a candidate makes it the only one (HAMi #3095); without
   one, exactly one candidate must exist. Any other Pending pod on the node that asks for this resource and is
   waiting too, or that no hami scheduler bound (created with ``spec.nodeName``), could be the pod kubelet is
   admitting: the Allocate is refused (:class:`Refused`), naming them, rather than served to either.
3. **kubelet's device IDs must be that pod's booking.** The IDs are checked against the devices the plugin
   advertised (by the server), then mapped to physical devices, which must be exactly the devices of the pod's
   next slot (HAMi ignores them). GetPreferredAllocation steered kubelet to those IDs, from the same pod; IDs for
   other devices mean kubelet is not admitting the pod the plugin would serve, or its accounting disagrees with
   the scheduler's: refused.

A refusal writes nothing: kubelet fails the admission of the pod it was admitting, the scheduler frees a Failed
pod's devices and breaks its lock, and the pod the plugin would have served keeps its booking for its own
Allocate. Once a pod is chosen and its IDs match, each Allocate pops its first non-empty slot; when none is left
the pod is marked ``success`` and the lock released. An error from there on marks it ``failed`` and releases the
lock (owner-checked).

Every API call here is idempotent (reads, and merge patches that set a value computed under the node-global
mutex), so a 409, a 500 or a lost response is retried a few times before the pod is failed; a pod that is gone
(404) is not retried.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hami_core.cluster.base import Cluster
from hami_core.cluster.retry import permanent, retry
from hami_core.engine.pods import annotations, containers, metadata
from hami_core.plugins.errors import HamiError, WireFormatError
from hami_core.plugins.types import ContainerAllocation, ContainerDevice, DeviceBackend, LockSpec
from hami_core.scheduler.nodelock import NodeLocker
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock
from hami_core.wire.pods import decode_pod_single_device, encode_pod_single_device

log = logging.getLogger("hami.node.allocate")

#: ``(pod, container_index, devices) -> ContainerAllocation``; container_index counts init containers first.
AllocateFn = Callable[[Mapping[str, Any], int, Sequence[ContainerDevice]], ContainerAllocation | None]
#: A kubelet device ID → the physical device it is a replica of (the advertised ``DeviceInfo.id``).
DeviceOf = Callable[[str], str]

_REPLICA = re.compile(r"-(\d+)$")
#: Attempts per API call, and the first backoff (doubled each time).
API_ATTEMPTS = 3
API_BACKOFF_S = 0.05
#: Pods named in a refusal's message, at most.
MAX_NAMED = 5

T = TypeVar("T")


def with_retries(what: str, call: Callable[[], T], *, attempts: int = API_ATTEMPTS, backoff_s: float = API_BACKOFF_S,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, retried on any error but a permanent one (404), with a doubling backoff and no jitter; the last
    error propagates as it is (:func:`hami_core.cluster.retry.retry`)."""
    return retry(what, call, attempts=attempts, backoff_s=backoff_s, sleep=sleep, final=permanent, jitter=0.0,
                 wrap=False, level=logging.INFO, logger=log)


class AllocateError(HamiError):
    """Allocate cannot serve the request; kubelet fails the pod's admission with this message."""


class Refused(AllocateError):
    """Allocate refused before anything was written: no pod is marked and no lock released, since the pod kubelet
    is admitting may not be the one the plugin would have served."""


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


def replica_of(device_id: str, uuids: Iterable[str]) -> str:
    """The device among ``uuids`` that an ID names without the advertised list at hand (an Allocator used without
    the gRPC server): the device itself, or its replica ``<uuid>-<n>`` / ``<uuid>::<n>``; else
    :func:`physical_device_id`."""
    known = set(uuids)
    if device_id in known:
        return device_id
    for sep in ("::", "-"):
        head, found, tail = device_id.rpartition(sep)
        if found and tail.isdigit() and head in known:
            return head
    return physical_device_id(device_id)


def pod_name(pod: Mapping[str, Any]) -> str:
    meta = metadata(pod)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _names(pods: Sequence[Mapping[str, Any]]) -> str:
    shown = ", ".join(pod_name(p) for p in pods[:MAX_NAMED])
    return shown + (f" and {len(pods) - MAX_NAMED} more" if len(pods) > MAX_NAMED else "")


def asks_for(pod: Mapping[str, Any], resource: str) -> bool:
    """Whether a container of ``pod`` (init containers too) requests or limits ``resource``."""
    init, app = containers(pod)
    for ctr in (*init, *app):
        res = ctr.get("resources")
        if not isinstance(res, Mapping):
            continue
        for group in ("limits", "requests"):
            values = res.get(group)
            if isinstance(values, Mapping) and str(values.get(resource, "0")).strip() not in ("", "0"):
                return True
    return False


def _waiting(pod: Mapping[str, Any], node_name: str, annotation: str) -> bool:
    """HAMi's ``GetPendingPod`` rule, ``allocating`` only (a ``success`` pod was allocated: taking it would hand its
    devices out again, or flip it to ``failed``), and a slot of ``annotation`` left (an undecodable value counts:
    the pod is then failed with the decoding error, as HAMi does)."""
    annos = annotations(pod)
    if not (annos.get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING and keys.BIND_TIME in annos
            and annos.get(keys.VGPU_NODE) == node_name and (pod.get("spec") or {}).get("nodeName") == node_name
            and (pod.get("status") or {}).get("phase") == "Pending" and not metadata(pod).get("deletionTimestamp")):
        return False
    raw = annos.get(annotation)
    if raw is None:
        return False
    try:
        return any(decode_pod_single_device(raw, key=annotation))
    except WireFormatError:
        return True


def _lock_holder(node: Mapping[str, Any], node_name: str, lock_annotation: str | None) -> tuple[str, str] | None:
    """``(namespace, name)`` of the pod the node's lock names; ``None`` for no lock, an owner-less or unreadable
    one."""
    value = annotations(node).get(lock_annotation) if lock_annotation else None
    if not value:
        return None
    try:
        lock = decode_node_lock(value, key=lock_annotation or "")
    except WireFormatError as exc:
        log.warning("node %s: ignoring unreadable lock: %s", node_name, exc)
        return None
    return None if lock.legacy else (lock.namespace or "default", lock.name or "")


def _unbooked_claimant(pod: Mapping[str, Any], resource: str | None) -> bool:
    """A Pending pod asking for ``resource`` that no hami scheduler bound (no bind phase: created with
    ``spec.nodeName``, past the webhook): kubelet admits it like any other, so an Allocate may be for it."""
    return bool(resource) and keys.BIND_PHASE not in annotations(pod) and asks_for(pod, resource or "") and (
        (pod.get("status") or {}).get("phase") == "Pending" and not metadata(pod).get("deletionTimestamp"))


def choose_pod(node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], node_name: str, *,
               annotation: str = keys.VGPU_DEVICES_TO_ALLOCATE, lock_annotation: str | None = keys.NODE_LOCK,
               resource: str | None = None) -> dict[str, Any]:
    """The one pod an Allocate on ``node_name`` can be for, from the Node and the pods bound to it (module
    docstring, step 2); raises :class:`Refused`."""
    candidates = [p for p in pods if _waiting(p, node_name, annotation)]
    holder = _lock_holder(node, node_name, lock_annotation)
    chosen = next((p for p in candidates if holder is not None and
                   (str(metadata(p).get("namespace") or "default"), str(metadata(p).get("name") or "")) == holder),
                  None)
    if chosen is None:
        if not candidates:
            raise Refused(f"no binding pod found on node {node_name}")
        if len(candidates) > 1:
            raise Refused(f"pods {_names(candidates)} all wait for their Allocate on node {node_name}"
                          f"{'' if holder is None else f' and the node lock names {holder[0]}/{holder[1]}'}; "
                          "kubelet's request names no pod, so it is refused rather than served to the wrong one")
        chosen = candidates[0]
        if holder is not None:  # a dangling lock (its pod gone, finished, or done with Allocate): no claim left
            log.info("node %s: the lock names %s/%s, which waits for no Allocate; serving %s, the one pod that "
                     "does", node_name, *holder, pod_name(chosen))
    others = [p for p in pods if p is not chosen and (
        any(p is c for c in candidates) or _unbooked_claimant(p, resource))]
    if others:
        one = len(others) == 1
        raise Refused(f"{'pod' if one else 'pods'} {_names(others)} on node {node_name} {'waits' if one else 'wait'} "
                      f"for {resource or 'these devices'} beside {pod_name(chosen)}; kubelet's request names no "
                      "pod, so it is refused rather than served to the wrong one")
    return dict(chosen)


def find_pending_pod(cluster: Cluster, node_name: str, *, retry: Callable[..., Any] = with_retries) -> dict[str, Any]:
    """The pod being allocated on ``node_name`` (HAMi ``GetPendingPod``, made strict); raises
    :class:`AllocateError`."""
    return find_pending(cluster, node_name, retry=retry)[0]


def find_pending(cluster: Cluster, node_name: str, *, retry: Callable[..., Any] = with_retries,
                 annotation: str = keys.VGPU_DEVICES_TO_ALLOCATE, lock_annotation: str | None = keys.NODE_LOCK,
                 resource: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the pod being allocated on ``node_name``, the Node as read to find it): one read of the Node and one list
    of the node's pods (the pod named by the lock is among them if it is bound here); raises
    :class:`AllocateError`."""
    node = retry(f"get node {node_name}", lambda: cluster.get_node(node_name))
    pods = retry(f"list pods on node {node_name}", lambda: cluster.pods_on_node(node_name))
    return choose_pod(node, pods, node_name, annotation=annotation, lock_annotation=lock_annotation,
                      resource=resource), node


def check_devices(pod: Mapping[str, Any], devices: Sequence[ContainerDevice], ids: Sequence[str],
                  device_of: DeviceOf | None = None) -> None:
    """kubelet's IDs for one container must be replicas of exactly the devices booked for it (module docstring,
    step 3); raises :class:`Refused`. ``device_of``: the advertised replicas (default :func:`replica_of`)."""
    booked = Counter(d.uuid for d in devices)
    given = Counter(_resolve(device_of, devices)(i) for i in ids)
    if booked == given:
        return
    what = ("device number not matched" if len(devices) != len(ids) else "devices not matched")
    raise Refused(f"pod {pod_name(pod)}: {what}: kubelet's IDs {', '.join(ids) or '(none)'} are devices "
                  f"{', '.join(sorted(given)) or '(none)'}, but the pod's next container is booked on "
                  f"{', '.join(sorted(booked)) or '(none)'}; kubelet is admitting another pod, or its device "
                  "accounting disagrees with the scheduler's; nothing was written")


def _resolve(device_of: DeviceOf | None, devices: Sequence[ContainerDevice]) -> DeviceOf:
    if device_of is not None:
        return device_of
    uuids = [d.uuid for d in devices]
    return lambda device_id: replica_of(device_id, uuids)


def _in_kubelet_order(devices: Sequence[ContainerDevice], ids: Sequence[str],
                      device_of: DeviceOf | None) -> tuple[ContainerDevice, ...]:
    """The booked devices in the order of kubelet's IDs (each keeps its own memory and cores)."""
    device_of = _resolve(device_of, devices)
    left = list(devices)
    out = []
    for i in ids:
        k = next(k for k, d in enumerate(left) if d.uuid == device_of(i))
        out.append(left.pop(k))
    return tuple(out)


class Allocator:
    """Serves Allocate for one backend on one node; all calls are serialised (the bookkeeping is node-global).

    :param prefer_kubelet_ids: hand each container its booked devices in the order of kubelet's IDs (HAMi's
        ``enablegetpreferredallocation`` alignment; the IDs must name the booked devices either way).
    """

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
        self.resource = backend.resource_names.count or None
        self._mutex = threading.Lock()
        self.sleep = sleep

    def _retry(self, what: str, call: Callable[[], T]) -> T:
        return with_retries(what, call, sleep=self.sleep)

    def find(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the one pod an Allocate on this node can be for, the Node as read); raises :class:`Refused`."""
        # this backend's own lock: a backend without one (Mthreads) must not take another vendor's holder for its own
        return find_pending(self.cluster, self.node_name, retry=self._retry, annotation=self.annotation,
                            lock_annotation=self.backend.lock_annotation, resource=self.resource)

    # ----------------------------------------------------------------------------------- allocate
    def allocate(self, requests: Sequence[Sequence[str]], *,
                 device_of: DeviceOf | None = None) -> list[ContainerAllocation]:
        """One :class:`ContainerAllocation` per kubelet container request (its device IDs); ``device_of`` maps an
        ID to its physical device (the server passes its advertised replicas; default :func:`replica_of`)."""
        with self._mutex:
            pod, node = self.find()
            try:
                return self._allocate(pod, requests, node, device_of)
            except Refused:
                raise
            except Exception as exc:
                self._finish(pod, keys.BIND_PHASE_FAILED)
                if isinstance(exc, AllocateError):
                    raise
                raise AllocateError(f"allocate for pod {pod_name(pod)} failed: {exc}") from exc

    def _allocate(self, pod: dict[str, Any], requests: Sequence[Sequence[str]],
                  node: Mapping[str, Any] | None = None,
                  device_of: DeviceOf | None = None) -> list[ContainerAllocation]:
        raw = annotations(pod).get(self.annotation)
        if raw is None:
            raise AllocateError(f"pod {pod_name(pod)} has no {self.annotation} annotation")
        try:
            slots = list(decode_pod_single_device(raw, key=self.annotation))
        except WireFormatError as exc:
            raise AllocateError(f"pod {pod_name(pod)}: {exc}") from None
        picks = self._pick(pod, slots, requests, device_of)  # before anything is called or written
        results: list[ContainerAllocation] = []
        try:
            pod_annotations = self._allocate_containers(pod, picks, results)
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

    def _pick(self, pod: Mapping[str, Any], slots: list[tuple[ContainerDevice, ...]],
              requests: Sequence[Sequence[str]], device_of: DeviceOf | None
              ) -> list[tuple[int, tuple[ContainerDevice, ...]]]:
        """Pop a slot per request, checking kubelet's IDs against it: ``(container index, devices)`` per request.
        ``slots`` is emptied in place only once every request matched (:class:`Refused` leaves it as it was)."""
        picks: list[tuple[int, tuple[ContainerDevice, ...]]] = []
        taken: set[int] = set()
        for ids in requests:
            index = next((i for i, slot in enumerate(slots) if slot and i not in taken), None)
            if index is None:
                raise Refused(f"pod {pod_name(pod)}: no devices left to allocate in {self.annotation} "
                              f"(kubelet asked for {len(requests)} containers)")
            devices = slots[index]
            check_devices(pod, devices, ids, device_of)
            if self.prefer_kubelet_ids:
                devices = _in_kubelet_order(devices, ids, device_of)
            taken.add(index)
            picks.append((index, devices))
        for index in taken:
            slots[index] = ()
        return picks

    def _allocate_containers(self, pod: dict[str, Any], picks: Sequence[tuple[int, tuple[ContainerDevice, ...]]],
                             results: list[ContainerAllocation]) -> dict[str, str]:
        """Call the vendor per picked slot, appending to ``results``; the merged pod annotations.

        Each hook sees the pod with the earlier containers' ``pod_annotations`` applied (on a copy).
        """
        merged: dict[str, str] = {}
        view = pod
        for index, devices in picks:
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
    def preferred(self, requests: Sequence[PreferredRequest], *,
                  device_of: DeviceOf | None = None) -> list[list[str] | None]:
        """Kubelet IDs matching the annotation's devices, per request; ``None`` where no answer (never raises).
        The pod is chosen as for Allocate, so kubelet is steered to the IDs its Allocate will be checked against."""
        with self._mutex:
            try:
                pod, _ = self.find()
                slots = [s for s in decode_pod_single_device(annotations(pod).get(self.annotation, ""),
                                                             key=self.annotation) if s]
            except Exception as exc:
                log.info("preferred allocation without annotations: %s", exc)
                slots = []
        out: list[list[str] | None] = []
        for k, req in enumerate(requests):
            out.append(_prefer(req, slots[k], device_of) if k < len(slots) else None)
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


def _prefer(req: PreferredRequest, slot: Sequence[ContainerDevice],
            device_of: DeviceOf | None = None) -> list[str] | None:
    device_of = _resolve(device_of, slot)
    chosen = list(req.must_include)
    must = [device_of(i) for i in req.must_include]
    used = set(chosen)
    for device in slot[:req.size]:
        if device.uuid in must:
            must.remove(device.uuid)
            continue
        pick = next((i for i in req.available if i not in used and device_of(i) == device.uuid), None)
        if pick is None:
            log.info("preferred allocation: no available ID for %s", device.uuid)
            return None
        chosen.append(pick)
        used.add(pick)
    if len(chosen) != req.size:
        log.info("preferred allocation: got %d IDs, want %d", len(chosen), req.size)
        return None
    return chosen
