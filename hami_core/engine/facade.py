"""The embedding API: :class:`Engine`.

>>> from hami_core import Engine
>>> engine = Engine()                      # built-in plugins + installed vendor plugins, default config
>>> engine.upsert_node(node)               # Kubernetes Node JSON with HAMi registration annotations
>>> decision = engine.schedule(pod)        # changes nothing
>>> engine.reserve(pod, decision)          # books the devices, as HAMi's Filter does

Nodes and pods are plain Kubernetes JSON dicts. The engine does no I/O: node patches it would like
written (handshake marks) are returned by :meth:`Engine.upsert_node`.

An engine is its state and its planner: :class:`~hami_core.engine.state.ClusterState` (nodes, the ledger,
bookings, quarantine, quotas, pod versions) and :class:`~hami_core.engine.planner.Planner` (candidates, prefilter,
best-first, explain). This class is the public face of both, plus the two transactions a scheduler runs on them:
the filter's (:meth:`Engine.refilter`: unreserve, schedule, reserve) and bind's fit check
(:meth:`Engine.check_bind`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from hami_core.engine import admission
from hami_core.engine.bindcheck import BoundLedgers, Overcommit
from hami_core.engine.config import HAMI_SECTIONS, EngineConfig, load_config
from hami_core.engine.decision import Decision
from hami_core.engine.plan import PodPlan
from hami_core.engine.planner import Planner
from hami_core.engine.pods import metadata
from hami_core.engine.quota import QuotaUsage
from hami_core.engine.state import ClusterState, NodeStatus
from hami_core.engine.workload import PodObservers
from hami_core.plugins.errors import ConfigError, HamiError, PluginError
from hami_core.plugins.objects import pod_key
from hami_core.plugins.types import ContainerRequests, LockSpec, PolicyInfo

log = logging.getLogger("hami.engine")

__all__ = ["Decision", "Engine", "NodeStatus", "Overcommit", "PodPlan"]


class Engine:
    """HAMi's scheduling engine: inventory, usage ledger, fit, scores and decisions.

    :param config: device-config.yaml content (mapping), a path to it, or ``None`` for the defaults.
    :param plugins: a plugin manager from :func:`hami_core.plugins.manager.get_plugin_manager`; by default
        a fresh one with the built-in plugins and every installed ``hami.devices`` entry point.
    :param clock: returns Unix seconds (tests pass a fake clock).

    ``nodes``, ``table``, ``ledger``, ``quotas``, ``backends`` and ``hook`` are the state's, for reading.
    """

    def __init__(self, config: Mapping[str, Any] | str | Path | EngineConfig | None = None, plugins: Any = None,
                 *, clock: Callable[[], float] = time.time) -> None:
        config = load_config(config)
        if plugins is None:
            from hami_core.plugins.manager import get_plugin_manager

            plugins = get_plugin_manager(blocked=config.blocked_plugins)
        #: nodes, the ledger, bookings, quarantine, quotas and pod versions
        self.state = ClusterState(config, plugins, clock)
        self.plugins = plugins
        self.clock = clock
        # preemption holds: pod key → (node, devices, init count) booked for a preemptor (see hold())
        self._holds: dict[str, tuple[str, Any, int]] = {}
        self.backends = self.state.backends
        #: ``plugins.hook`` with each backend's hooks routed to that backend alone
        self.hook = self.state.hook
        self.nodes = self.state.nodes
        self.table = self.state.table
        #: ResourceQuota limits and the usage the ledger books against them (spec §11)
        self.quotas = self.state.quotas
        self.ledger = self.state.ledger
        vendors = {b.vendor for b in self.state.backend_list}
        for section in self.config.devices:
            if section not in HAMI_SECTIONS and section not in vendors:
                log.warning("config %s: section %r is neither a HAMi device section nor read by an installed "
                            "plugin; check its spelling", self.config.source, section)
        node_policies = {p.name for p in self.policies() if p.kind == "node"}
        if self.config.scheduler.node_scheduler_policy not in node_policies:
            raise ConfigError(f"scheduler.nodeSchedulerPolicy: unknown node policy "
                              f"{self.config.scheduler.node_scheduler_policy!r}; the loaded plugins offer "
                              f"{', '.join(sorted(node_policies))}")
        #: What plugins learn from the pods the engine is asked about (``hami_observe_pod``; the ``fgd`` policy's
        #: request mix), set up from the configuration (``hami_policy_setup``).
        self.workload = PodObservers(self.hook, self.config.scheduler)
        #: candidates, prefilter, best-first and explain, over :attr:`state`
        self.planner = Planner(self.state, self.workload, self.policies)
        #: Plugins' caches that live as long as this engine (``NodeBatch.cache``).
        self.plugin_cache = self.planner.plugin_cache
        #: one-node mirrors of the pods bound to recently bound nodes, for :meth:`check_bind`
        self._bound = BoundLedgers(self)

    @property
    def config(self) -> EngineConfig:
        """The loaded device configuration."""
        return self.state.config

    @config.setter
    def config(self, value: EngineConfig) -> None:
        self.state.config = value

    @property
    def lock_annotations(self) -> frozenset[str]:
        """Node annotations that are node locks (every backend's, and HAMi's own)."""
        return self.state.lock_annotations

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
        return self.state.upsert_node(node)

    def remove_node(self, name: str) -> None:
        """Forget a node. Bookings of its pods are kept, so they reappear if the node comes back."""
        self.state.remove_node(name)

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
        self.state.upsert_pod(pod)

    def remove_pod(self, pod: Mapping[str, Any]) -> None:
        """Release everything the pod holds (deleted or finished), its preemption hold included."""
        self._holds.pop(pod_key(pod), None)
        self.state.remove_pod(pod)

    def mark_placed(self, pod: Mapping[str, Any]) -> None:
        """Count a reserved pod as placed: a candidate victim of preemption at its ``spec.priority``. A scheduler's
        watch does this when the pod's allocation is written; an embedder that never writes one (the simulator)
        calls this after :meth:`reserve`."""
        from hami_core.engine.pods import pod_priority

        self.state.priorities[pod_key(pod)] = pod_priority(pod)

    # ------------------------------------------------------------------------------- preemption holds
    def hold(self, pod: Mapping[str, Any], decision: Decision) -> None:
        """Reserve ``decision`` for a preemptor while its victims terminate: booked like :meth:`reserve` (on top of
        the victims' usage, so that nobody else can take what they free), and kept across :meth:`refilter` calls
        that find no room yet, until the pod is placed, removed, or :meth:`release_hold` is called."""
        self.reserve(pod, decision)
        requests = decision.requests
        self._holds[pod_key(pod)] = (decision.node or "", decision.devices,
                                     requests.init_count if requests is not None else 0)

    def held_node(self, pod: Mapping[str, Any]) -> str | None:
        """The node holding room for ``pod`` (a preemptor), or ``None``."""
        held = self._holds.get(pod_key(pod))
        return held[0] if held is not None else None

    def holds(self) -> dict[str, str]:
        """Every preemption hold: pod key → node."""
        return {key: node for key, (node, _, _) in self._holds.items()}

    def release_hold(self, pod: Mapping[str, Any]) -> None:
        """Drop the pod's preemption hold and its booking (idempotent; a pod without a hold is left alone)."""
        if self._holds.pop(pod_key(pod), None) is not None:
            self.state.unbook(pod)

    # ------------------------------------------------------------------------------- quota
    def upsert_quota(self, quota: Mapping[str, Any]) -> None:
        """Add or update a ResourceQuota (Kubernetes JSON): its ``limits.<memory or core resource>`` entries limit
        what pods of its namespace may book (spec §11). A quantity that is not an exact integer is ignored with a
        warning naming the object and the key."""
        self.state.upsert_quota(quota)

    def remove_quota(self, quota: Mapping[str, Any]) -> None:
        """Forget a deleted ResourceQuota's limits (usage booked in the namespace is kept)."""
        self.state.remove_quota(quota)

    def quota_usage(self) -> list[QuotaUsage]:
        """Per namespace and resource: booked usage and the limit in force (``None``: none), for metrics."""
        return self.state.quota_usage()

    # ------------------------------------------------------------------------------- decisions
    def requests(self, pod: Mapping[str, Any]) -> ContainerRequests:
        """Every container's device requests (init containers first)."""
        return self.state.requests(pod)

    def plan(self, pod: Mapping[str, Any], *, requests: ContainerRequests | None = None) -> PodPlan:
        """What the engine makes of ``pod`` before looking at any node: its requests, policy, request shapes, CPU
        and memory needs and quota view (:class:`~hami_core.engine.plan.PodPlan`), for :meth:`schedule`.
        ``requests``: ``self.requests(pod)`` when the caller has just computed it."""
        return self.planner.plan(pod, requests)

    def admit(self, pod: Mapping[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """The pod as HAMi's mutating webhook would admit it (defaults, scheduler name, quota pre-check).

        Raises :class:`~hami_core.plugins.errors.AdmissionDenied` or ``AdmissionFailed`` as the webhook
        would refuse it; a pod whose request alone exceeds its namespace's ResourceQuota is denied with
        "exceeding resource quota" (spec §11.3). ``namespace``: the AdmissionReview's, for a pod object that
        carries none. The input is not modified.
        """
        admitted = admission.admit(self.hook, self.state.backend_list, pod, self.config.scheduler)
        # HAMi lets pods for other schedulers through before its quota check (spec §4.3 step 3)
        if not admission.for_other_scheduler(pod, self.config.scheduler):
            meta = metadata(admitted)
            self.state.check_admission_quota(admitted, str(meta.get("namespace") or namespace or "default"))
        return admitted

    def schedule(self, pod: Mapping[str, Any], node_names: Iterable[str] | None = None, *,
                 limit: int | None = None, requests: ContainerRequests | None = None,
                 plan: PodPlan | None = None) -> Decision:
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

        ``requests``: ``self.requests(pod)`` when the caller has just computed it (saves parsing it twice);
        ``plan``: ``self.plan(pod)`` likewise (then ``pod`` and ``requests`` are the plan's).
        """
        if plan is None:
            plan = self.planner.plan(pod, requests)
        return self.planner.schedule(plan, node_names, limit)

    def reserve(self, pod: Mapping[str, Any], decision: Decision) -> None:
        """Book ``decision``'s devices for ``pod`` (replacing any earlier reservation of the pod)."""
        if decision.node is None:
            raise HamiError(f"pod {decision.pod}: cannot reserve a decision without a node")
        requests = decision.requests
        self.state.book(pod, decision.node, decision.devices, requests.init_count if requests is not None else 0)

    def unreserve(self, pod: Mapping[str, Any]) -> None:
        """Drop a reservation (idempotent)."""
        self.state.unbook(pod)

    # ------------------------------------------------------------------------------- transactions
    def refilter(self, pod: Mapping[str, Any], node_names: list[str], *, avoid: Collection[str] = (),
                 limit: int = 1, requests: ContainerRequests | None = None) -> Decision:
        """HAMi's filter of a pod with device requests (spec §6.1 step 4): drop its earlier reservation (it no
        longer counts), choose among ``node_names``, and reserve the choice.

        ``avoid``: nodes that should not take a pod now (``--node-inflight-limit``): the policy's best among the
        other named nodes is taken if one fits, else the best of all of them. The pod is planned once, after its
        reservation is dropped (its quota view then leaves it out). A pod without device requests has nothing
        to reserve: callers pass it without asking (its decision here is ``skipped``).
        """
        self.unreserve(pod)
        plan = self.planner.plan(pod, requests)
        decision = None
        if avoid and any(n in avoid for n in node_names):
            idle = [n for n in node_names if n not in avoid]
            if idle:  # the policy's best among nodes that can take a pod now; else the busy ones too
                first = self.planner.schedule(plan, idle, limit)
                decision = first if first.ok else None
        if decision is None:
            decision = self.planner.schedule(plan, node_names, limit)
        held = self._holds.get(pod_key(pod))
        if decision.ok:
            self._holds.pop(pod_key(pod), None)  # placed: the reservation replaces the hold
            self.reserve(pod, decision)
        elif held is not None:  # the victims have not gone yet: the room stays the preemptor's
            node, devices, init_count = held
            self.state.book(pod, node, devices, init_count)
        return decision

    def simulate(self, pod: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]], *,
                 requests: ContainerRequests | None = None) -> Decision:
        """§6.11: fit ``pod`` onto ``nodes`` (Node objects) alone, on a throwaway engine of this configuration and
        these plugins: this engine's nodes, usage and caches are neither read nor changed."""
        scratch = Engine(self.config, plugins=self.plugins, clock=self.clock)
        names: dict[str, None] = {}
        for node in nodes:
            scratch.upsert_node(node)
            names[str(metadata(node).get("name") or "")] = None
        return scratch.schedule(pod, list(names), limit=1, requests=requests)

    def lock_specs(self, pod: Mapping[str, Any], *, requests: ContainerRequests | None = None) -> list[LockSpec]:
        """Every backend's node lock for binding ``pod`` (``hami_node_lock``), sorted by backend name."""
        if requests is None:
            requests = self.requests(pod)
        specs: list[LockSpec] = []
        for name in sorted(self.backends):
            spec = self.hook.hami_node_lock(backend=self.backends[name], pod=pod, requests=requests)
            if spec is not None:
                specs.append(spec)
        return specs

    def check_bind(self, pod: Mapping[str, Any], node: str, node_obj: Mapping[str, Any],
                   bound: list[Mapping[str, Any]]) -> None:
        """Bind's fit check: raise :class:`~hami_core.engine.bindcheck.Overcommit` unless ``pod``'s allocation for
        ``node`` fits next to ``bound``, the other pods bound there, as read fresh under the node lock
        (``node_obj``: the Node as read then). It is judged on a mirror of that node alone
        (:class:`~hami_core.engine.bindcheck.BoundLedgers`): nothing of this engine's state is read or changed,
        so a caller that guards the engine with a lock need not hold it here."""
        self._bound.check(pod, node, node_obj, bound)

    def pod_bound(self, pod: Mapping[str, Any], node: str) -> None:
        """Tell the plugins that ``pod`` was bound to ``node`` (``hami_pod_bound``)."""
        self.hook.hami_pod_bound(pod=pod, node=node)

