"""What the engine knows of the cluster: :class:`ClusterState`.

Nodes and their registered devices (with the :class:`~hami_core.engine.table.NodeTable` the planner reads), the
ledger of device bookings, every placed pod's CPU and memory on its node, the nodes quarantined by undecodable
allocations, ResourceQuota limits and usage, and the pod versions already applied. It changes only through its
methods; the search (:mod:`hami_core.engine.planner`) reads it and changes nothing.

A state needs no planner: bind's over-commit check keeps one-node states (:mod:`hami_core.engine.bindcheck`) that
book the pods bound to a node and are never asked to schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hami_core.engine.config import EngineConfig
from hami_core.engine.inventory import NodeState
from hami_core.engine.ledger import Booking, Ledger, mig_from_allocations, mig_from_devices
from hami_core.engine.pods import (
    annotations,
    host_requests,
    init_containers_done,
    is_terminal,
    metadata,
    pod_key,
    pod_priority,
    pod_ref,
)
from hami_core.engine.quota import QuotaCache, QuotaUsage
from hami_core.engine.requests import pod_requests
from hami_core.engine.table import NodeTable
from hami_core.plugins.errors import AdmissionDenied, PluginError, WireFormatError
from hami_core.plugins.fit import collapse
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.types import (
    ContainerRequests,
    DeviceBackend,
    DeviceInfo,
    HealthReport,
    MigInstance,
    PodDevices,
)
from hami_core.wire import keys
from hami_core.wire.mig import decode_mig_allocations

log = logging.getLogger("hami.engine")

__all__ = ["ClusterState", "NodeStatus"]


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """What :meth:`Engine.upsert_node` made of a node.

    ``devices`` counts registered devices per healthy backend; ``unhealthy`` maps dropped backends to
    the reason; ``errors`` maps backends whose registration could not be read to the error (their
    previous devices are kept); ``patch`` is the node-annotation merge patch the caller should write.
    """

    name: str
    devices: Mapping[str, int] = field(default_factory=dict)
    unhealthy: Mapping[str, str] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    patch: Mapping[str, str | None] = field(default_factory=dict)


class HostBookings:
    """Every placed pod's CPU and memory requests on its node (fragmentation-aware policies read what a node has
    left). Kept by pod, so that a node deleted and added again gets back the pods booked while it was away."""

    def __init__(self) -> None:
        # pod key → (node, CPU milli, memory MiB) it requests there; node → keys booked on it
        self._by_pod: dict[str, tuple[str, int, int]] = {}
        self._by_node: dict[str, set[str]] = {}

    def book(self, key: str, node: str, need: tuple[int, int], nodes: Mapping[str, NodeState]) -> None:
        """Count ``need`` (CPU milli, memory MiB) on ``node`` for the pod (replacing an earlier booking of it)."""
        cpu, mem = need
        if self._by_pod.get(key) == (node, cpu, mem):
            return
        self.unbook(key, nodes)
        self._by_pod[key] = (node, cpu, mem)
        self._by_node.setdefault(node, set()).add(key)
        state = nodes.get(node)
        if state is not None:
            state.add_host(cpu, mem, 1)

    def unbook(self, key: str, nodes: Mapping[str, NodeState]) -> None:
        entry = self._by_pod.pop(key, None)
        if entry is None:
            return
        node, cpu, mem = entry
        keys_on_node = self._by_node.get(node)
        if keys_on_node is not None:
            keys_on_node.discard(key)
            if not keys_on_node:
                del self._by_node[node]
        state = nodes.get(node)
        if state is not None:
            state.add_host(cpu, mem, -1)

    def restore(self, state: NodeState) -> None:
        """A node (re-)added: count the pods that were booked on it while it was away."""
        for key in self._by_node.get(state.name, ()):
            _, cpu, mem = self._by_pod[key]
            state.add_host(cpu, mem, 1)


class Quarantines:
    """Nodes no new pod may go to because a pod's allocation there cannot be decoded: pod key → (node, reason).
    Kept by pod, so that a node deleted and added again stays quarantined."""

    def __init__(self) -> None:
        self._by_pod: dict[str, tuple[str, str]] = {}

    def mark(self, key: str, state: NodeState, reason: str) -> None:
        self._by_pod[key] = (state.name, reason)
        state.quarantine[key] = reason

    def lift(self, key: str) -> str | None:
        """Forget the pod's quarantine; returns the node it was on (``None``: it quarantined none)."""
        entry = self._by_pod.pop(key, None)
        return entry[0] if entry is not None else None

    def restore(self, state: NodeState) -> None:
        for key, (node, reason) in self._by_pod.items():
            if node == state.name:
                state.quarantine[key] = reason


class ClusterState:
    """Nodes, the ledger, pods' host bookings, quarantine, quotas and pod versions of one engine.

    :param config: the loaded device configuration.
    :param plugins: the plugin manager; the state builds its own backends from it (``hami_device_backends``), so
        backends' per-engine state is never shared between two states.
    :param clock: returns Unix seconds (health checks read it).
    """

    def __init__(self, config: EngineConfig, plugins: Any, clock: Callable[[], float]) -> None:
        self.config = config
        self._keep_lost = config.scheduler.lost_registration == "keep"
        self.plugins = plugins
        self.clock = clock
        self.backends: dict[str, DeviceBackend] = {b.name: b for b in plugins.backends(config.devices)}
        #: ``plugins.hook`` with each backend's hooks routed to that backend alone
        self.hook = RoutedHooks(plugins, self.backends.values())
        #: the backends in name order (the order every per-backend hook is called in)
        self.backend_list = tuple(self.backends[n] for n in sorted(self.backends))
        #: node annotations that are node locks (a change of only these reads no registration again)
        self.lock_annotations = frozenset({keys.NODE_LOCK} | {b.lock_annotation for b in self.backend_list
                                                               if b.lock_annotation})
        self.nodes: dict[str, NodeState] = {}
        self.table = NodeTable()
        #: ResourceQuota limits and the usage the ledger books against them (spec §11)
        self.quotas = QuotaCache(self.backend_list)
        self.ledger = Ledger(self.quotas)
        self.host = HostBookings()
        self.quarantines = Quarantines()
        self._health_state: dict[str, dict[str, Any]] = {name: {} for name in self.backends}
        # pod key → resourceVersion of the pod object last applied by upsert_pod (the same version again is a no-op)
        self._versions: dict[str, str] = {}
        #: pod key → spec.priority of every pod whose allocation is written (placed pods: preemption's candidates)
        self.priorities: dict[str, int] = {}

    def requests(self, pod: Mapping[str, Any]) -> ContainerRequests:
        """Every container's device requests (init containers first)."""
        return pod_requests(self.hook, self.backend_list, pod)

    # ------------------------------------------------------------------------------- nodes
    def node(self, name: str) -> NodeState:
        """The node's state, made (empty) if it is not known yet."""
        state = self.nodes.get(name)
        if state is None:
            state = self.nodes[name] = NodeState(name)
            self.table.add(state)
            self.quarantines.restore(state)  # a node deleted and re-added stays quarantined
            self.host.restore(state)
        return state

    def upsert_node(self, node: Mapping[str, Any]) -> NodeStatus:
        """:meth:`Engine.upsert_node <hami_core.engine.facade.Engine.upsert_node>`."""
        name = metadata(node).get("name")
        if not name or not isinstance(name, str):
            raise WireFormatError("node: metadata.name is missing")
        state = self.node(name)
        state.update_object(node)
        now = self.clock()
        new: dict[str, list[DeviceInfo]] = {}
        unhealthy: dict[str, str] = {}
        errors: dict[str, str] = {}
        patch: dict[str, str | None] = {}
        # A node update that changes only a node-lock annotation (two per bind) reads the same registrations:
        # reuse what was read from the same content instead of decoding every backend's devices again.
        content = self._registration_content(state)
        memo = state.registration[1] if state.registration is not None and state.registration[0] == content else {}
        read: dict[str, Any] = {}
        for backend in self.backend_list:
            got = memo.get(backend.name)
            if got is None:
                got = read[backend.name] = self._read_devices(backend, node)
            else:
                read[backend.name] = got
            devices, error = got
            if error:
                errors[backend.name] = error
            previous = [d.info for d in state.devices.get(backend.name) or ()]
            reported = devices or []
            # HAMi runs CheckHealth whatever GetNodeDevices said; a backend reads the devices the node reports now
            # (none when its registration is unreadable).
            report = self.hook.hami_node_health(backend=backend, node=node, devices=reported, now=now,
                                                state=self._health_state[backend.name])
            if report is not None and not isinstance(report, HealthReport):
                raise PluginError(f"plugin {backend.plugin!r}: hami_node_health returned {report!r}")
            if report is not None:
                patch.update(report.annotations)
                if not report.healthy:
                    if previous or reported:  # HAMi skips the clean-up of a vendor the node never had
                        unhealthy[backend.name] = report.reason or "registration is stale"
                    if previous and backend.handshake_annotation and backend.cleanup_handshake:
                        # HAMi's NodeCleanUp: a node dropped from the cache loses its handshake mark.
                        patch[backend.handshake_annotation] = None
                    self.hook.hami_node_removed(backend=backend, node_name=name,
                                                state=self._health_state[backend.name])
                    continue
            if reported:
                new[backend.name] = reported
            elif previous and devices is None:
                # Unreadable (malformed, or HAMi's "no gpu found on node" for a registration listing none): HAMi's
                # GetNodeDevices fails and, the health check above having passed, its scheduler keeps the cache.
                if backend.name not in memo:  # once per registration change, not on every lock update
                    log.warning("node %s: cannot read %s registration, keeping its %d cached device(s): %s",
                                name, backend.name, len(previous), error)
                new[backend.name] = previous
            elif previous and self._keep_lost:
                # An absent registration (or no capacity) keeps the cached devices while the health check passes
                # under `scheduler.lostRegistration: keep`, HAMi's rule ("annos not found" is a GetNodeDevices
                # error there); the default forgets them. docs/devices.md, "Lost registrations", says why.
                if backend.name not in memo:
                    log.info("node %s: no %s registration; keeping its %d cached device(s) while it is healthy",
                             name, backend.name, len(previous))
                new[backend.name] = previous
        state.registration = (content, read)
        state.errors = errors
        if new != state.infos:
            # Devices changed: rebuild them and re-book the node's pods (unchanged devices keep their usage).
            state.set_devices(new)
            self.ledger.reapply(state)
        return NodeStatus(name, {b: len(d) for b, d in new.items()}, unhealthy, errors, patch)

    def _read_devices(self, backend: DeviceBackend, node: Mapping[str, Any]) -> tuple[list[DeviceInfo] | None, str]:
        """One backend's registered devices on ``node`` and an error text (devices ``None``: unreadable)."""
        try:
            devices = self.hook.hami_node_devices(backend=backend, node=node)
        except WireFormatError as exc:
            return None, str(exc)
        devices = [self._stamp(backend, d) for d in (devices or ())]
        word = backend.name.lower()
        foreign = [d for d in devices if word not in d.type.lower()]
        if foreign:
            # HAMi hands a backend only devices whose type contains its common word (spec A.3).
            return [d for d in devices if d not in foreign], (
                f"{len(foreign)} device(s) ignored: type {foreign[0].type!r} does not contain {backend.name!r}")
        return devices, ""

    def _registration_content(self, state: NodeState) -> tuple[Any, ...]:
        """What device registrations are read from (HAMi's ``GetNodeDevices`` reads annotations): the node's
        annotations without its lock annotations, its labels, allocatable and capacity. ``state`` holds fresh
        copies of these from :meth:`NodeState.update_object`, so a caller changing its node object in place
        cannot change them behind the engine's back."""
        annos = state.annotations
        locks = self.lock_annotations
        if any(k in annos for k in locks):
            annos = {k: v for k, v in annos.items() if k not in locks}
        return annos, state.labels, state.allocatable, state.capacity

    @staticmethod
    def _stamp(backend: DeviceBackend, device: DeviceInfo) -> DeviceInfo:
        if not isinstance(device, DeviceInfo):
            raise PluginError(f"plugin {backend.plugin!r}: hami_node_devices returned {device!r}, "
                              "expected DeviceInfo")
        return device if device.vendor == backend.name else replace(device, vendor=backend.name)

    def remove_node(self, name: str) -> None:
        """Forget a node. Bookings of its pods are kept, so they reappear if the node comes back."""
        state = self.nodes.pop(name, None)
        if state is not None:
            self.table.remove(state)
            for backend in self.backend_list:
                self.hook.hami_node_removed(backend=backend, node_name=name, state=self._health_state[backend.name])

    # ------------------------------------------------------------------------------- pods
    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        """:meth:`Engine.upsert_pod <hami_core.engine.facade.Engine.upsert_pod>`."""
        key = pod_key(pod)
        meta = pod.get("metadata")
        raw_version = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
        version = str(raw_version) if raw_version else None
        if version is not None and self._versions.get(key) == version:
            return
        self._apply_pod(key, pod)
        if version is not None and not is_terminal(pod):
            self._versions[key] = version

    def _apply_pod(self, key: str, pod: Mapping[str, Any]) -> None:
        if is_terminal(pod):
            self.remove_pod(pod)
            return
        node = annotations(pod).get(keys.VGPU_NODE)
        spec = pod.get("spec")
        bound = spec.get("nodeName") if isinstance(spec, Mapping) else None
        if bound or node:  # every placed pod's CPU and memory count (fragmentation-aware policies read them)
            self.host.book(key, str(bound or node), host_requests(pod), self.nodes)
        if not node:
            return
        try:
            devices = self.decode_pod(pod)
        except WireFormatError as exc:
            reason = f"pod {pod_ref(pod)} has an undecodable allocation: {exc}"
            log.error("node %s quarantined: %s", node, reason)
            self._quarantine(key, node, reason)
            return
        self._release_quarantine(key)
        init_count = len(((pod.get("spec") or {}).get("initContainers")) or [])
        booked = collapse(devices, init_count, app_only=init_count > 0 and init_containers_done(pod))
        # Negative cores are HAMi's own (gpucores: -1 under its int32 arithmetic) and are booked as it books them;
        # negative memory no HAMi component writes: booked, it would hand the device's memory to the next pod.
        negative = next((d for devs in booked.values() for d in devs if d.usedmem < 0), None)
        if negative is not None:
            reason = (f"pod {pod_ref(pod)} has an undecodable allocation: device {negative.uuid or '<no uuid>'} books "
                      f"{negative.usedmem} MiB of memory (no HAMi component writes negative memory)")
            log.error("node %s quarantined: %s", node, reason)
            self._quarantine(key, node, reason)
            return
        booking = Booking(key, pod_ref(pod), node, booked, self._pod_mig(pod))
        self.priorities[key] = pod_priority(pod)
        if self.ledger.get(key) == booking:
            # Every update of a scheduled pod (bind-phase patch, binding, status) repeats its allocation:
            # re-booking it would only churn the node's usage and invalidate its per-node caches.
            return
        self.ledger.book(booking, self.nodes)

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        """Release everything the pod holds (deleted or finished)."""
        key = pod_key(pod)
        self._versions.pop(key, None)
        self.priorities.pop(key, None)
        self._release_quarantine(key)
        self.host.unbook(key, self.nodes)
        self.ledger.unbook(key, self.nodes)

    def book(self, pod: Mapping[str, Any], node: str, devices: PodDevices, init_count: int) -> None:
        """Book ``devices`` (a decision's) for ``pod`` on ``node``, replacing any earlier booking of the pod."""
        key = pod_key(pod)
        booked = collapse(devices, init_count)
        self._versions.pop(key, None)  # the ledger no longer follows the pod's stored version
        self.ledger.book(Booking(key, pod_ref(pod), node, booked, mig_from_devices(devices)), self.nodes)
        self.host.book(key, node, host_requests(pod), self.nodes)

    def unbook(self, pod: Mapping[str, Any]) -> None:
        """Drop a reservation (idempotent)."""
        key = pod_key(pod)
        self._versions.pop(key, None)
        self.host.unbook(key, self.nodes)
        self.ledger.unbook(key, self.nodes)

    def decode_pod(self, pod: Mapping[str, Any]) -> PodDevices:
        """The pod's allocation annotations, decoded by each backend; raises :class:`WireFormatError`."""
        out = {}
        for backend in self.backend_list:
            devices = self.hook.hami_decode_allocation(backend=backend, pod=pod)
            if devices:
                out[backend.name] = devices
        return out

    @staticmethod
    def _pod_mig(pod: Mapping[str, Any]) -> dict[str, tuple[MigInstance, ...]]:
        """The pod's MIG instances per GPU from ``hami.io/vgpu-mig-allocations`` (spec §6.3 step 3).

        As in HAMi, an annotation that cannot be decoded books no instance (logged, naming the pod and the key):
        the MIG GPUs the pod uses then count as used without a reservation and stay unhealthy while it is booked,
        so nothing is placed over instances the scheduler cannot see.
        """
        raw = annotations(pod).get(keys.VGPU_MIG_ALLOCATIONS)
        if not raw:
            return {}
        try:
            return mig_from_allocations(decode_mig_allocations(raw, key=keys.VGPU_MIG_ALLOCATIONS))
        except WireFormatError as exc:
            log.error("pod %s: ignoring its MIG allocations: %s", pod_ref(pod), exc)
            return {}

    def _quarantine(self, key: str, node: str, reason: str) -> None:
        state = self.node(node)
        self.quarantines.mark(key, state, reason)
        self.table.dirty.add(state.row)  # its ``ok`` flag may change

    def _release_quarantine(self, key: str) -> None:
        node = self.quarantines.lift(key)
        if node is not None and node in self.nodes:
            state = self.nodes[node]
            state.quarantine.pop(key, None)
            self.table.dirty.add(state.row)

    # ------------------------------------------------------------------------------- quota
    def upsert_quota(self, quota: Mapping[str, Any]) -> None:
        self.quotas.upsert(quota)

    def remove_quota(self, quota: Mapping[str, Any]) -> None:
        self.quotas.remove(quota)

    def quota_usage(self) -> list[QuotaUsage]:
        return self.quotas.usage()

    def check_admission_quota(self, pod: Mapping[str, Any], namespace: str) -> None:
        """HAMi's admission pre-check (spec §11.3): the pod's request alone must fit its namespace's quota.

        Per backend: the app containers' ``memreq x nums`` (resp. ``coresreq x nums``) summed, the init containers'
        peak, the larger of the two; a memory given only as a percentage counts 0 here (its size depends on the
        card). Denied "exceeding resource quota".
        """
        view = self.quotas.view(namespace)
        if view is None:
            return
        requests = self.requests(pod)
        for backend in self.backend_list:
            names = backend.resource_names
            if not view.limited(names):
                continue
            app_mem = app_cores = init_mem = init_cores = 0
            for pos, container in enumerate(requests.containers):
                req = container.get(backend.name)
                if req is None:
                    continue
                mem, cores = req.memreq * req.nums, req.coresreq * req.nums
                if requests.is_init(pos):
                    init_mem, init_cores = max(init_mem, mem), max(init_cores, cores)
                else:
                    app_mem, app_cores = app_mem + mem, app_cores + cores
            mem, cores = max(app_mem, init_mem), max(app_cores, init_cores)
            if (mem or cores) and not view.fits(names, mem, cores):
                log.info("pod %s denied: %s would exceed the ResourceQuota of namespace %s (memory %d, cores %d)",
                         pod_ref(pod), backend.name, namespace, mem, cores)
                raise AdmissionDenied("exceeding resource quota")
