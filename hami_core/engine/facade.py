"""The embedding API: :class:`Engine`.

>>> from hami_core import Engine
>>> engine = Engine()                      # built-in plugins + installed vendor plugins, default config
>>> engine.upsert_node(node)               # Kubernetes Node JSON with HAMi registration annotations
>>> decision = engine.schedule(pod)        # changes nothing
>>> engine.reserve(pod, decision)          # books the devices, as HAMi's Filter does

Nodes and pods are plain Kubernetes JSON dicts. The engine does no I/O: node patches it would like
written (handshake marks) are returned by :meth:`Engine.upsert_node`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hami_core.engine import admission
from hami_core.engine.config import HAMI_SECTIONS, EngineConfig, load_config
from hami_core.engine.cycle import Cycle
from hami_core.engine.decision import Decision
from hami_core.engine.inventory import NodeState
from hami_core.engine.ledger import Booking, Ledger, mig_from_allocations, mig_from_devices
from hami_core.engine.pods import (
    annotations,
    host_requests,
    init_containers_done,
    is_terminal,
    metadata,
    pod_key,
    pod_ref,
)
from hami_core.engine.policy import effective_policy
from hami_core.engine.quota import QuotaCache, QuotaUsage
from hami_core.engine.requests import pod_requests
from hami_core.engine.table import NodeTable
from hami_core.engine.workload import WorkloadModel, pod_shapes
from hami_core.plugins.errors import AdmissionDenied, ConfigError, HamiError, PluginError, WireFormatError
from hami_core.plugins.fit import collapse
from hami_core.plugins.relay import RoutedHooks
from hami_core.plugins.types import (
    ContainerRequests,
    DeviceBackend,
    DeviceInfo,
    HealthReport,
    MigInstance,
    PodDevices,
    PolicyInfo,
)
from hami_core.wire import keys
from hami_core.wire.common import parse_go_bool
from hami_core.wire.mig import decode_mig_allocations
from hami_core.wire.reasons import NODE_UNREGISTERED

log = logging.getLogger("hami.engine")

__all__ = ["Decision", "Engine", "NodeStatus"]


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


class Engine:
    """HAMi's scheduling engine: inventory, usage ledger, fit, scores and decisions.

    :param config: device-config.yaml content (mapping), a path to it, or ``None`` for the defaults.
    :param plugins: a plugin manager from :func:`hami_core.plugins.manager.get_plugin_manager`; by default
        a fresh one with the built-in plugins and every installed ``hami.devices`` entry point.
    :param clock: returns Unix seconds (tests pass a fake clock).
    """

    def __init__(self, config: Mapping[str, Any] | str | Path | EngineConfig | None = None, plugins: Any = None,
                 *, clock: Callable[[], float] = time.time) -> None:
        if plugins is None:
            from hami_core.plugins.manager import get_plugin_manager

            plugins = get_plugin_manager()
        self.config = load_config(config)
        self.plugins = plugins
        self.clock = clock
        self.backends: dict[str, DeviceBackend] = {b.name: b for b in plugins.backends(self.config.devices)}
        #: ``plugins.hook`` with each backend's hooks routed to that backend alone
        self.hook = RoutedHooks(plugins, self.backends.values())
        self._backend_list = tuple(self.backends[n] for n in sorted(self.backends))
        self._lock_annotations = frozenset({keys.NODE_LOCK} | {b.lock_annotation for b in self._backend_list
                                                                if b.lock_annotation})
        vendors = {b.vendor for b in self._backend_list}
        for section in self.config.devices:
            if section not in HAMI_SECTIONS and section not in vendors:
                log.warning("config %s: section %r is neither a HAMi device section nor read by an installed "
                            "plugin; check its spelling", self.config.source, section)
        node_policies = {p.name for p in self.policies() if p.kind == "node"}
        if self.config.scheduler.node_scheduler_policy not in node_policies:
            raise ConfigError(f"scheduler.nodeSchedulerPolicy: unknown node policy "
                              f"{self.config.scheduler.node_scheduler_policy!r}; the loaded plugins offer "
                              f"{', '.join(sorted(node_policies))}")
        self.nodes: dict[str, NodeState] = {}
        self.table = NodeTable()
        #: ResourceQuota limits and the usage the ledger books against them (spec §11)
        self.quotas = QuotaCache(self._backend_list)
        self.ledger = Ledger(self.quotas)
        self._health_state: dict[str, dict[str, Any]] = {name: {} for name in self.backends}
        # pod key → node it quarantined (undecodable allocation)
        self._quarantined_by: dict[str, str] = {}
        self._quarantine_reason: dict[str, str] = {}
        # pod key → (node, CPU milli, memory MiB) it requests there; node → keys booked on it
        self._host: dict[str, tuple[str, int, int]] = {}
        self._host_by_node: dict[str, set[str]] = {}
        # pod key → resourceVersion of the pod object last applied by upsert_pod (the same version again is a no-op)
        self._versions: dict[str, str] = {}
        fgd = self.config.scheduler.fgd
        #: The request mix seen so far (or given in config), for fragmentation-aware policies.
        self.workload = WorkloadModel(fgd.window, tolerance=fgd.tolerance, coverage=fgd.coverage,
                                      fixed=fgd.fixed_mix(), score_steps=fgd.score_steps,
                                      cache_mib=fgd.cache_mib, ties=fgd.ties)
        self._all_pod_policies: frozenset[str] | None = None
        #: Plugins' caches that live as long as this engine (``NodeBatch.cache``).
        self.plugin_cache: dict[str, Any] = {}
        # (table version, node names, rows, states, unusable names) of the last named candidate set
        self._last_candidates: tuple[int, list[str], np.ndarray, list[NodeState], list[str]] | None = None

    def policies(self) -> list[PolicyInfo]:
        """Every scheduling policy the loaded plugins offer (``hami_scheduling_policies``), sorted."""
        out: dict[tuple[str, str], PolicyInfo] = {}
        for answer in self.hook.hami_scheduling_policies():
            for info in answer or ():
                if not isinstance(info, PolicyInfo):
                    raise PluginError(f"hami_scheduling_policies returned {info!r}, expected PolicyInfo")
                out.setdefault((info.kind, info.name), info)
        return [out[k] for k in sorted(out)]

    # ------------------------------------------------------------------------------- inventory
    def upsert_node(self, node: Mapping[str, Any]) -> NodeStatus:
        """Add or refresh a node from its Kubernetes JSON: parse every backend's registration, check health.

        A backend whose registration is malformed keeps its previous devices (the error is reported);
        a backend whose handshake is stale (spec §9.2) loses its devices on this node. Registrations are read
        again only when the node's annotations (other than node-lock ones), labels, allocatable or capacity
        changed; health is checked on every call.
        """
        name = metadata(node).get("name")
        if not name or not isinstance(name, str):
            raise WireFormatError("node: metadata.name is missing")
        state = self._state(name)
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
        for backend in self._backend_list:
            got = memo.get(backend.name)
            if got is None:
                got = read[backend.name] = self._read_devices(backend, node)
            else:
                read[backend.name] = got
            devices, error = got
            if devices is None:  # unreadable: keep the previous devices
                errors[backend.name] = error
                previous = state.devices.get(backend.name)
                if previous:
                    new[backend.name] = [d.info for d in previous]
                log.warning("node %s: cannot read %s registration, keeping previous devices: %s",
                            name, backend.name, error)
                continue
            if error:
                errors[backend.name] = error
            report = self.hook.hami_node_health(backend=backend, node=node, devices=devices, now=now,
                                                state=self._health_state[backend.name])
            if report is not None and not isinstance(report, HealthReport):
                raise PluginError(f"plugin {backend.plugin!r}: hami_node_health returned {report!r}")
            if report is not None:
                patch.update(report.annotations)
                if not report.healthy:
                    unhealthy[backend.name] = report.reason or "registration is stale"
                    if state.devices.get(backend.name) and backend.handshake_annotation and backend.cleanup_handshake:
                        # HAMi's NodeCleanUp: a node dropped from the cache loses its handshake mark.
                        patch[backend.handshake_annotation] = None
                    self.hook.hami_node_removed(backend=backend, node_name=name,
                                                state=self._health_state[backend.name])
                    continue
            if devices:
                new[backend.name] = devices
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
        locks = self._lock_annotations
        if any(k in annos for k in locks):
            annos = {k: v for k, v in annos.items() if k not in locks}
        return annos, state.labels, state.allocatable, state.capacity

    @staticmethod
    def _stamp(backend: DeviceBackend, device: DeviceInfo) -> DeviceInfo:
        if not isinstance(device, DeviceInfo):
            raise PluginError(f"plugin {backend.plugin!r}: hami_node_devices returned {device!r}, "
                              "expected DeviceInfo")
        return device if device.vendor == backend.name else replace(device, vendor=backend.name)

    def _state(self, name: str) -> NodeState:
        state = self.nodes.get(name)
        if state is None:
            state = self.nodes[name] = NodeState(name)
            self.table.add(state)
            for key, node in self._quarantined_by.items():  # a node deleted and re-added stays quarantined
                if node == name:
                    state.quarantine[key] = self._quarantine_reason[key]
            for key in self._host_by_node.get(name, ()):  # pods that were booked while the node was away
                _, cpu, mem = self._host[key]
                state.add_host(cpu, mem, 1)
        return state

    def _book_host(self, key: str, node: str, pod: Mapping[str, Any]) -> None:
        """Count the pod's CPU and memory requests on ``node`` (replacing an earlier booking of the pod)."""
        cpu, mem = host_requests(pod)
        if self._host.get(key) == (node, cpu, mem):
            return
        self._unbook_host(key)
        self._host[key] = (node, cpu, mem)
        self._host_by_node.setdefault(node, set()).add(key)
        state = self.nodes.get(node)
        if state is not None:
            state.add_host(cpu, mem, 1)

    def _unbook_host(self, key: str) -> None:
        entry = self._host.pop(key, None)
        if entry is None:
            return
        node, cpu, mem = entry
        keys_on_node = self._host_by_node.get(node)
        if keys_on_node is not None:
            keys_on_node.discard(key)
            if not keys_on_node:
                del self._host_by_node[node]
        state = self.nodes.get(node)
        if state is not None:
            state.add_host(cpu, mem, -1)

    def remove_node(self, name: str) -> None:
        """Forget a node. Bookings of its pods are kept, so they reappear if the node comes back."""
        state = self.nodes.pop(name, None)
        if state is not None:
            self.table.remove(state)
            for backend in self._backend_list:
                self.hook.hami_node_removed(backend=backend, node_name=name, state=self._health_state[backend.name])

    # ------------------------------------------------------------------------------- ledger
    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        """Book a scheduled pod's devices (from its allocated annotations), or release a finished one.

        Pods without ``hami.io/vgpu-node`` book no device (as in HAMi); every placed pod (``spec.nodeName`` or
        ``hami.io/vgpu-node``) has its CPU and memory requests counted on its node, for fragmentation-aware
        policies. Succeeded/Failed pods release what they hold; terminating pods keep it until
        :meth:`remove_pod`. An allocation annotation that cannot be decoded quarantines the node (no new pods)
        instead of being ignored.

        A pod whose ``metadata.resourceVersion`` equals the one last applied is skipped: the API server gives a
        changed object a new version, and the same version arrives again and again (watch replays, relists, and
        every bind's fresh read of the pods on its node).
        """
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
            self._book_host(key, str(bound or node), pod)
        if not node:
            return
        try:
            devices = self._decode_pod(pod)
        except WireFormatError as exc:
            reason = f"pod {pod_ref(pod)} has an undecodable allocation: {exc}"
            log.error("node %s quarantined: %s", node, reason)
            self._quarantine(key, node, reason)
            return
        self._release_quarantine(key)
        init_count = len(((pod.get("spec") or {}).get("initContainers")) or [])
        booked = collapse(devices, init_count, app_only=init_count > 0 and init_containers_done(pod))
        booking = Booking(key, pod_ref(pod), node, booked, self._pod_mig(pod))
        if self.ledger.get(key) == booking:
            # Every update of a scheduled pod (bind-phase patch, binding, status) repeats its allocation:
            # re-booking it would only churn the node's usage and invalidate its per-node caches.
            return
        self.ledger.book(booking, self.nodes)

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        """Release everything the pod holds (deleted or finished)."""
        key = pod_key(pod)
        self._versions.pop(key, None)
        self._release_quarantine(key)
        self._unbook_host(key)
        self.ledger.unbook(key, self.nodes)

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

    def _decode_pod(self, pod: Mapping[str, Any]) -> PodDevices:
        out = {}
        for backend in self._backend_list:
            devices = self.hook.hami_decode_allocation(backend=backend, pod=pod)
            if devices:
                out[backend.name] = devices
        return out

    def _quarantine(self, key: str, node: str, reason: str) -> None:
        self._quarantined_by[key] = node
        self._quarantine_reason[key] = reason
        state = self._state(node)
        state.quarantine[key] = reason
        self.table.dirty.add(state.row)  # its ``ok`` flag may change

    def _release_quarantine(self, key: str) -> None:
        node = self._quarantined_by.pop(key, None)
        self._quarantine_reason.pop(key, None)
        if node is not None and node in self.nodes:
            state = self.nodes[node]
            state.quarantine.pop(key, None)
            self.table.dirty.add(state.row)

    # ------------------------------------------------------------------------------- quota
    def upsert_quota(self, quota: Mapping[str, Any]) -> None:
        """Add or update a ResourceQuota (Kubernetes JSON): its ``limits.<memory or core resource>`` entries limit
        what pods of its namespace may book (spec §11). A quantity that is not an exact integer is ignored with a
        warning naming the object and the key."""
        self.quotas.upsert(quota)

    def remove_quota(self, quota: Mapping[str, Any]) -> None:
        """Forget a deleted ResourceQuota's limits (usage booked in the namespace is kept)."""
        self.quotas.remove(quota)

    def quota_usage(self) -> list[QuotaUsage]:
        """Per namespace and resource: booked usage and the limit in force (``None``: none), for metrics."""
        return self.quotas.usage()

    def _check_admission_quota(self, pod: Mapping[str, Any], namespace: str) -> None:
        """HAMi's admission pre-check (spec §11.3): the pod's request alone must fit its namespace's quota.

        Per backend: the app containers' ``memreq x nums`` (resp. ``coresreq x nums``) summed, the init containers'
        peak, the larger of the two; a memory given only as a percentage counts 0 here (its size depends on the
        card). Denied "exceeding resource quota".
        """
        view = self.quotas.view(namespace)
        if view is None:
            return
        requests = self.requests(pod)
        for backend in self._backend_list:
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

    # ------------------------------------------------------------------------------- decisions
    def requests(self, pod: Mapping[str, Any]) -> ContainerRequests:
        """Every container's device requests (init containers first)."""
        return pod_requests(self.hook, self._backend_list, pod)

    def admit(self, pod: Mapping[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """The pod as HAMi's mutating webhook would admit it (defaults, scheduler name, quota pre-check).

        Raises :class:`~hami_core.plugins.errors.AdmissionDenied` or ``AdmissionFailed`` as the webhook
        would refuse it; a pod whose request alone exceeds its namespace's ResourceQuota is denied with
        "exceeding resource quota" (spec §11.3). ``namespace``: the AdmissionReview's, for a pod object that
        carries none. The input is not modified.
        """
        admitted = admission.admit(self.hook, self._backend_list, pod, self.config.scheduler)
        # HAMi lets pods for other schedulers through before its quota check (spec §4.3 step 3)
        if not admission.for_other_scheduler(pod, self.config.scheduler):
            meta = metadata(admitted)
            self._check_admission_quota(admitted, str(meta.get("namespace") or namespace or "default"))
        return admitted

    def schedule(self, pod: Mapping[str, Any], node_names: Iterable[str] | None = None, *,
                 limit: int | None = None, requests: ContainerRequests | None = None) -> Decision:
        """Choose a node and devices for ``pod`` among ``node_names`` (default: every known node).

        Changes no state. A pod that holds a reservation is evaluated as if it did not (HAMi drops a
        pod's reservation when it is filtered again).

        By default every candidate is fitted, so ``decision.nodes`` lists every feasible node and
        ``decision.failed`` every rejected one. With ``limit=k`` the engine may stop once it has the ``k``
        best feasible nodes: candidates are fitted best-first by their state-only scores
        (``hami_prescore_nodes``), after skipping nodes whose capacity summaries rule them out. The
        chosen node is the same; ``nodes`` and ``failed`` then cover only what was examined, except that
        when nothing fits every candidate is examined so each gets its reason. (When a plugin scores
        by the placement itself, ``hami_score_nodes``, every node is fitted anyway.)

        ``requests``: ``self.requests(pod)`` when the caller has just computed it (saves parsing it twice).
        """
        ref = pod_ref(pod)
        if requests is None:
            requests = self.requests(pod)
        if requests.empty:
            names = sorted(self.nodes) if node_names is None else sorted(node_names)
            return self._rank_deviceless(pod, ref, names, requests)
        annos = annotations(pod)
        sched = self.config.scheduler
        try:
            numa_bind = parse_go_bool(annos.get(keys.NVIDIA_NUMA_BIND, "false") or "false")
        except WireFormatError:
            numa_bind = False
        try:
            policy = effective_policy(annos, node_default=sched.node_scheduler_policy,
                                      gpu_default=sched.gpu_scheduler_policy, numa_bind=numa_bind)
        except WireFormatError as exc:
            return Decision(pod=ref, requests=requests, error=f"calcScore failed {exc} for pod {ref}")
        key = pod_key(pod)
        shapes = pod_shapes(pod, requests, self.backends)
        host_need = host_requests(pod)
        self.workload.observe(key, shapes, host_need)
        workload = self.workload.snapshot()
        namespace = str(metadata(pod).get("namespace") or "default")
        quota = self.quotas.view(namespace, own=key) if self.quotas.limited(namespace) else None
        cycle = Cycle(hook=self.hook, backends=self.backends, pod=pod, key=key, requests=requests, policy=policy,
                      own=self.ledger.get(key), shapes=shapes, workload=workload, host_need=host_need, quota=quota)
        self.table.refresh()
        rows, alive = self._candidates(cycle, node_names)
        if cycle.own is not None and cycle.own.node in self.nodes:
            cycle.exclude_own(self.nodes[cycle.own.node])
        if not alive:
            return cycle.decision(None, (), {}, self.clock(), ref)
        own_at = -1
        if cycle.own is not None:
            own_state = self.nodes.get(cycle.own.node)
            if own_state is not None:
                hit = np.flatnonzero(rows == own_state.row)
                own_at = int(hit[0]) if len(hit) else -1
        pre = cycle.prescore(alive, self.table.totals[rows], own_at=own_at, rows=rows,
                             generations=self.table.generation[rows], shapes=shapes, workload=workload,
                             cache=self.plugin_cache)
        placement_scored = self._scores_placement(requests)
        if limit is None or placement_scored:
            fit = {id(s) for s in cycle.fit(alive)}
            picked = [i for i, s in enumerate(alive) if id(s) in fit]
        else:
            picked = self._fit_best_first(cycle, alive, rows, pre, limit, own_at)
        if not picked:
            return cycle.decision(None, (), {}, self.clock(), ref)
        scores = cycle.score([alive[i] for i in picked], {alive[i].name: float(pre[i]) for i in picked},
                             placement=placement_scored)
        ranked = cycle.rank(scores)
        if limit is not None:
            ranked = ranked[:limit]
            scores = {n: scores[n] for n in ranked}
        return cycle.decision(self.nodes[ranked[0]], ranked, scores, self.clock(), ref)

    def _rank_deviceless(self, pod: Mapping[str, Any], ref: str, names: list[str],
                         requests: ContainerRequests) -> Decision:
        """A pod without managed devices: any candidate will do, listed best first when its node policy
        ranks every pod (``PolicyInfo.ranks_all_pods``), by the prescore of its CPU and memory alone."""
        sched = self.config.scheduler
        node_policy = annotations(pod).get(keys.NODE_SCHEDULER_POLICY) or sched.node_scheduler_policy
        if self._all_pod_policies is None:
            self._all_pod_policies = frozenset(p.name for p in self.policies() if p.kind == "node" and p.ranks_all_pods)
        if node_policy not in self._all_pod_policies:
            return Decision(pod=ref, nodes=tuple(names), requests=requests, skipped=True)
        try:
            policy = effective_policy(annotations(pod), node_default=sched.node_scheduler_policy,
                                      gpu_default=sched.gpu_scheduler_policy)
        except WireFormatError:
            return Decision(pod=ref, nodes=tuple(names), requests=requests, skipped=True)
        alive = [s for s in (self.nodes.get(n) for n in names) if s is not None and s.by_uuid and not s.quarantine]
        if not alive:
            return Decision(pod=ref, nodes=tuple(names), requests=requests, skipped=True)
        cycle = Cycle(hook=self.hook, backends=self.backends, pod=pod, key=pod_key(pod), requests=requests,
                      policy=policy, own=None)
        self.table.refresh()
        rows = self.table.rows(alive)
        pre = cycle.prescore(alive, self.table.totals[rows], rows=rows, generations=self.table.generation[rows],
                             shapes=(), workload=self.workload.snapshot(), cache=self.plugin_cache)
        order = np.argsort(pre if policy.node == "spread" else -pre, kind="stable")
        ranked = [alive[int(i)].name for i in order]
        scores = {alive[int(i)].name: float(pre[int(i)]) for i in order}
        seen = set(ranked)
        return Decision(pod=ref, nodes=(*ranked, *(n for n in names if n not in seen)), scores=scores,
                        requests=requests, policy=policy, skipped=True)

    def _candidates(self, cycle: Cycle, node_names: Iterable[str] | None) -> tuple[np.ndarray, list[NodeState]]:
        """The nodes that can take pods among ``node_names``, in name order: their table rows and states.

        Every other named node gets its reason in ``cycle.failed`` (in name order). No Python work is done per
        candidate: names map to rows in one pass, and the registered/quarantine test and the name order are
        array operations on the table (``ok``, ``rank``); naming every node reuses a cached candidate list.
        """
        table = self.table
        if node_names is None:
            rows, alive = table.every_ok()
            bad = sorted(s.name for s in self.nodes.values() if not table.ok[s.row]) if len(rows) < len(
                self.nodes) else []
        else:
            names = node_names if isinstance(node_names, list) else list(node_names)
            last = self._last_candidates
            if last is not None and last[0] == table.version and last[1] == names:
                # kube-scheduler names the same nodes in every request: comparing the list is a fraction of
                # looking every name up again
                rows, alive, bad = last[2], last[3], last[4]
            else:
                rows, alive, bad = self._lookup(names)
                self._last_candidates = (table.version, list(names), rows, alive, bad)
        for name in bad:
            state = self.nodes.get(name)
            if state is None or not state.by_uuid:
                cycle.failed[name] = NODE_UNREGISTERED
            else:
                cycle.failed[name] = "node quarantined: " + "; ".join(sorted(state.quarantine.values()))
        return rows, alive  # type: ignore[return-value]

    def _lookup(self, names: list[str]) -> tuple[np.ndarray, list[NodeState], list[str]]:
        """Rows and states of the usable ``names`` in name order, and the other names (sorted, once each)."""
        table = self.table
        found = table.lookup(names)
        usable = found >= 0
        usable[usable] = table.ok[found[usable]]
        good = found[usable]
        bad: list[str] = []
        if len(good) < len(names):  # unknown, unregistered or quarantined names: each gets its reason
            bad = sorted({names[i] for i in np.flatnonzero(~usable).tolist()})
        ranks = np.sort(table.rank[good])
        if len(ranks) > 1:
            ranks = ranks[np.concatenate(([True], ranks[1:] != ranks[:-1]))]  # a name given twice counts once
        rows = table.by_rank[ranks]
        every, every_states = table.every_ok()
        if len(rows) == len(every):
            return every, every_states, bad  # the common case: every node is named
        states = table.states
        return rows, [states[r] for r in rows.tolist()], bad  # type: ignore[misc]

    def _scores_placement(self, requests: ContainerRequests) -> bool:
        """Whether some ``hami_score_nodes`` implementation may score this pod's placement.

        A vendor plugin's implementation only scores its own backends, so it matters only when the pod
        requests one of them; any other plugin (a policy, a topology scorer) always matters.
        """
        return bool(self.hook.score_callers(requests.backends()))

    def _fit_best_first(self, cycle: Cycle, alive: list[NodeState], rows: np.ndarray, pre: np.ndarray,
                        limit: int, own_at: int) -> list[int]:
        """Fit candidates best-first until ``limit`` fit; prefilter by capacity.

        Best first is by prescore (descending, ascending for spread), ties in name order (``alive`` is in name
        order and the sort is stable). Returns the positions in ``alive`` of the nodes that fit.
        """
        possible = np.ones(len(alive), dtype=bool)
        for container in cycle.requests.containers:
            for name, request in container.items():
                if self.backends[name].standard_capacity:
                    possible &= self.table.feasible(rows, name, request)
        if own_at >= 0:  # its own reservation is in the summaries; never prune that node
            possible[own_at] = True
        key = pre if cycle.policy.node == "spread" else -pre
        feasible: list[int] = []
        start, size = 0, 1
        candidates = np.flatnonzero(possible)
        if len(candidates) and not np.isnan(key[candidates]).any():
            # The first batch is one node: the best candidate is an argmin (first minimum = lowest name on a tie),
            # so the common case (it fits) needs no sort of every candidate.
            best = int(candidates[int(np.argmin(key[candidates]))])
            if alive[best] in cycle.fit([alive[best]]):
                feasible.append(best)
            start, size = 1, 4
            if len(feasible) >= limit:
                return feasible
        order = np.argsort(key, kind="stable")
        ordered = order[possible[order]]
        while start < len(ordered) and len(feasible) < limit:
            batch = [int(i) for i in ordered[start:start + size]]
            fit = {id(s) for s in cycle.fit([alive[i] for i in batch])}
            feasible.extend(i for i in batch if id(alive[i]) in fit)
            start += size
            size *= 4
        if not feasible:
            self._explain(cycle, [alive[i] for i in order[~possible[order]].tolist()])
        return feasible

    @staticmethod
    def _explain(cycle: Cycle, pruned: list[NodeState]) -> None:
        """Nothing fits: give each pruned node HAMi's exact reason, fitting it or reusing a cached reason.

        A saturated cluster rejects the same kinds of pods over and over; a node's reason for a pod of
        the same shape stays valid until the node changes (its generation), so it is kept per node.
        """
        meta = metadata(cycle.pod)
        key = (tuple(tuple(sorted((b, r.nums, r.memreq, r.mem_percentage, r.coresreq) for b, r in c.items()))
                     for c in cycle.requests.containers),
               cycle.requests.init_count, cycle.policy, meta.get("namespace"),
               tuple(sorted((annotations(cycle.pod)).items())),
               # quota usage changes without the node changing: a ResourceQuotaNotFit holds only for the same state
               tuple(sorted(cycle.quota.entries.items())) if cycle.quota is not None else ())
        todo = []
        for state in pruned:
            hit = state.reason_cache.get(key)
            if hit is not None and hit[0] == state.generation:
                cycle.failed[state.name] = hit[1]
            else:
                todo.append(state)
        if todo:
            cycle.fit(todo)
            for state in todo:
                reason = cycle.failed.get(state.name)
                if reason is not None:
                    if len(state.reason_cache) > 64:
                        state.reason_cache.clear()
                    state.reason_cache[key] = (state.generation, reason)

    def reserve(self, pod: Mapping[str, Any], decision: Decision) -> None:
        """Book ``decision``'s devices for ``pod`` (replacing any earlier reservation of the pod)."""
        if decision.node is None:
            raise HamiError(f"pod {decision.pod}: cannot reserve a decision without a node")
        requests = decision.requests
        init_count = requests.init_count if requests is not None else 0
        booked = collapse(decision.devices, init_count)
        self._versions.pop(pod_key(pod), None)  # the ledger no longer follows the pod's stored version
        self.ledger.book(Booking(pod_key(pod), pod_ref(pod), decision.node, booked, mig_from_devices(decision.devices)),
                         self.nodes)
        self._book_host(pod_key(pod), decision.node, pod)

    def unreserve(self, pod: Mapping[str, Any]) -> None:
        """Drop a reservation (idempotent)."""
        self._versions.pop(pod_key(pod), None)
        self._unbook_host(pod_key(pod))
        self.ledger.unbook(pod_key(pod), self.nodes)
