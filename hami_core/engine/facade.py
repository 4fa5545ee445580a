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
from hami_core.engine.ledger import Booking, Ledger, collapse
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
from hami_core.engine.requests import pod_requests
from hami_core.engine.table import NodeTable
from hami_core.engine.workload import WorkloadModel, pod_shapes
from hami_core.plugins.errors import HamiError, PluginError, WireFormatError
from hami_core.plugins.types import (
    ContainerRequests,
    DeviceBackend,
    DeviceInfo,
    HealthReport,
    PodDevices,
    PolicyInfo,
)
from hami_core.wire import keys
from hami_core.wire.common import parse_go_bool
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
        self.hook = plugins.hook
        self.clock = clock
        self.backends: dict[str, DeviceBackend] = {b.name: b for b in plugins.backends(self.config.devices)}
        self._backend_list = tuple(self.backends[n] for n in sorted(self.backends))
        vendors = {b.vendor for b in self._backend_list}
        for section in self.config.devices:
            if section not in HAMI_SECTIONS and section not in vendors:
                log.warning("config %s: section %r is neither a HAMi device section nor read by an installed "
                            "plugin; check its spelling", self.config.source, section)
        self.nodes: dict[str, NodeState] = {}
        self.table = NodeTable()
        self.ledger = Ledger()
        self._health_state: dict[str, dict[str, Any]] = {name: {} for name in self.backends}
        # pod key → node it quarantined (undecodable allocation)
        self._quarantined_by: dict[str, str] = {}
        self._quarantine_reason: dict[str, str] = {}
        # pod key → (node, CPU milli, memory MiB) it requests there; node → keys booked on it
        self._host: dict[str, tuple[str, int, int]] = {}
        self._host_by_node: dict[str, set[str]] = {}
        fgd = self.config.scheduler.fgd
        #: The request mix seen so far (or given in config), for fragmentation-aware policies.
        self.workload = WorkloadModel(fgd.window, tolerance=fgd.tolerance, coverage=fgd.coverage,
                                      fixed=fgd.fixed_mix(), score_steps=fgd.score_steps)
        self._all_pod_policies: frozenset[str] | None = None
        #: Plugins' caches that live as long as this engine (``NodeBatch.cache``).
        self.plugin_cache: dict[str, Any] = {}

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
        a backend whose handshake is stale (spec §9.2) loses its devices on this node.
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
        for backend in self._backend_list:
            try:
                devices = self.hook.hami_node_devices(backend=backend, node=node)
            except WireFormatError as exc:
                errors[backend.name] = str(exc)
                previous = state.devices.get(backend.name)
                if previous:
                    new[backend.name] = [d.info for d in previous]
                log.warning("node %s: cannot read %s registration, keeping previous devices: %s",
                            name, backend.name, exc)
                continue
            devices = [self._stamp(backend, d) for d in (devices or ())]
            word = backend.name.lower()
            foreign = [d for d in devices if word not in d.type.lower()]
            if foreign:
                # HAMi hands a backend only devices whose type contains its common word (spec A.3).
                errors[backend.name] = (f"{len(foreign)} device(s) ignored: type {foreign[0].type!r} does not "
                                        f"contain {backend.name!r}")
                devices = [d for d in devices if d not in foreign]
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
        state.errors = errors
        state.set_devices(new)
        self.ledger.reapply(state)
        return NodeStatus(name, {b: len(d) for b, d in new.items()}, unhealthy, errors, patch)

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

        Pods without ``hami.io/vgpu-node`` are ignored (as in HAMi). Succeeded/Failed pods release
        their devices; terminating pods keep them until :meth:`remove_pod`. An allocation annotation
        that cannot be decoded quarantines the node (no new pods) instead of being ignored.
        """
        key = pod_key(pod)
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
        self.ledger.book(Booking(key, pod_ref(pod), node, booked), self.nodes)

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        """Release everything the pod holds (deleted or finished)."""
        key = pod_key(pod)
        self._release_quarantine(key)
        self._unbook_host(key)
        self.ledger.unbook(key, self.nodes)

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
        self._state(node).quarantine[key] = reason

    def _release_quarantine(self, key: str) -> None:
        node = self._quarantined_by.pop(key, None)
        self._quarantine_reason.pop(key, None)
        if node is not None and node in self.nodes:
            self.nodes[node].quarantine.pop(key, None)

    # ------------------------------------------------------------------------------- decisions
    def requests(self, pod: Mapping[str, Any]) -> ContainerRequests:
        """Every container's device requests (init containers first)."""
        return pod_requests(self.hook, self._backend_list, pod)

    def admit(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """The pod as HAMi's mutating webhook would admit it (defaults, scheduler name).

        Raises :class:`~hami_core.plugins.errors.AdmissionDenied` or ``AdmissionFailed`` as the webhook
        would refuse it. The input is not modified.
        """
        return admission.admit(self.hook, self._backend_list, pod, self.config.scheduler)

    def schedule(self, pod: Mapping[str, Any], node_names: Iterable[str] | None = None, *,
                 limit: int | None = None) -> Decision:
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
        """
        ref = pod_ref(pod)
        names = sorted(self.nodes) if node_names is None else sorted(node_names)
        requests = self.requests(pod)
        if requests.empty:
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
        cycle = Cycle(hook=self.hook, backends=self.backends, pod=pod, key=key, requests=requests, policy=policy,
                      own=self.ledger.get(key), shapes=shapes, workload=workload, host_need=host_need)
        alive: list[NodeState] = []
        nodes = self.nodes
        for name in names:  # hot: runs for every candidate node, so attribute reads are kept to a minimum
            state = nodes.get(name)
            if state is None or not state.by_uuid:
                cycle.failed[name] = NODE_UNREGISTERED
            elif state.quarantine:
                cycle.failed[name] = "node quarantined: " + "; ".join(sorted(state.quarantine.values()))
            else:
                alive.append(state)
        if cycle.own is not None and cycle.own.node in nodes:
            cycle.exclude_own(nodes[cycle.own.node])
        if not alive:
            return cycle.decision(None, (), {}, self.clock(), ref)
        self.table.refresh()
        rows = self.table.rows(alive)
        pre = cycle.prescore(alive, self.table.totals[rows], rows=rows, generations=self.table.generation[rows],
                             shapes=shapes, workload=workload, cache=self.plugin_cache)
        # Best first; ties keep name order (alive is sorted by name and the sort is stable).
        order = np.argsort(pre if policy.node == "spread" else -pre, kind="stable")
        placement_scored = self._scores_placement(requests)
        if limit is None or placement_scored:
            fit = {id(s) for s in cycle.fit(alive)}
            picked = [i for i, s in enumerate(alive) if id(s) in fit]
        else:
            picked = self._fit_best_first(cycle, alive, rows, order, limit)
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

    def _scores_placement(self, requests: ContainerRequests) -> bool:
        """Whether some ``hami_score_nodes`` implementation may score this pod's placement.

        A vendor plugin's implementation only scores its own backends, so it matters only when the pod
        requests one of them; any other plugin (a policy, a topology scorer) always matters.
        """
        scorers = {impl.plugin_name for impl in self.hook.hami_score_nodes.get_hookimpls()}
        if not scorers:
            return False
        vendors = {impl.plugin_name for impl in self.hook.hami_device_backends.get_hookimpls()}
        if scorers - vendors:
            return True
        return any(self.backends[name].plugin in scorers for name in requests.backends())

    def _fit_best_first(self, cycle: Cycle, alive: list[NodeState], rows: np.ndarray, order: np.ndarray,
                        limit: int) -> list[int]:
        """Fit candidates in ``order`` in growing batches until ``limit`` fit; prefilter by capacity.

        Returns the positions in ``alive`` of the nodes that fit.
        """
        possible = np.ones(len(alive), dtype=bool)
        for container in cycle.requests.containers:
            for name, request in container.items():
                if self.backends[name].standard_capacity:
                    possible &= self.table.feasible(rows, name, request)
        if cycle.own is not None:  # its own reservation is in the summaries; never prune that node
            possible |= np.fromiter((s.name == cycle.own.node for s in alive), dtype=bool, count=len(alive))
        ordered = order[possible[order]]
        feasible: list[int] = []
        start, size = 0, 1
        while start < len(ordered) and len(feasible) < limit:
            batch = [int(i) for i in ordered[start:start + size]]
            fit = {id(s) for s in cycle.fit([alive[i] for i in batch])}
            feasible.extend(i for i in batch if id(alive[i]) in fit)
            start += size
            size *= 4
        if not feasible:
            self._explain(cycle, [alive[i] for i in order if not possible[i]])
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
               tuple(sorted((annotations(cycle.pod)).items())))
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
        self.ledger.book(Booking(pod_key(pod), pod_ref(pod), decision.node, booked), self.nodes)
        self._book_host(pod_key(pod), decision.node, pod)

    def unreserve(self, pod: Mapping[str, Any]) -> None:
        """Drop a reservation (idempotent)."""
        self._unbook_host(pod_key(pod))
        self.ledger.unbook(pod_key(pod), self.nodes)
