"""The search: from a pod's :class:`~hami_core.engine.plan.PodPlan` and the
:class:`~hami_core.engine.state.ClusterState` to a :class:`~hami_core.engine.decision.Decision` (spec §6-§7).
The planner changes no state (its caches aside).

Candidates are the named nodes that can take pods, looked up as array operations on the node table; with a
``limit`` they are pre-filtered by capacity summaries and fitted best-first by their state-only scores, and when
nothing fits every pruned node is explained (HAMi's exact reason, cached per node and pod shape).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from hami_core.engine.cycle import Cycle
from hami_core.engine.decision import Decision
from hami_core.engine.inventory import NodeState
from hami_core.engine.plan import PodPlan
from hami_core.engine.pods import annotations, host_requests, metadata, pod_key, pod_ref
from hami_core.engine.policy import effective_policy
from hami_core.engine.state import ClusterState
from hami_core.engine.workload import PodObservers, pod_shapes
from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerRequests, PolicyInfo
from hami_core.wire import keys
from hami_core.wire.common import parse_go_bool
from hami_core.wire.reasons import NODE_UNREGISTERED

#: Pod shapes :meth:`Planner._reason_key` numbers before it starts afresh (a bound on its memory).
_REASON_KEYS = 4096

__all__ = ["Planner"]


class Planner:
    """Plans pods and searches the nodes of ``state`` for them.

    :param state: the cluster state searched (read only).
    :param workload: the request mix seen so far, for fragmentation-aware policies (each planned pod is counted).
    :param policies: every scheduling policy the loaded plugins offer (``Engine.policies``).
    """

    def __init__(self, state: ClusterState, workload: PodObservers,
                 policies: Callable[[], list[PolicyInfo]]) -> None:
        self.state = state
        self.workload = workload
        self._policies = policies
        self._all_pod_policies: frozenset[str] | None = None
        #: Plugins' caches that live as long as this engine (``NodeBatch.cache``).
        self.plugin_cache: dict[str, Any] = {}
        # (table version, node names, rows, states, unusable names) of the last named candidate set
        self._last_candidates: tuple[int, list[str], np.ndarray, list[NodeState], list[str]] | None = None
        #: the number of each pod shape nodes cache their reasons under (:meth:`_reason_key`)
        self._reason_keys: dict[tuple[object, ...], int] = {}
        self._reason_numbers = itertools.count()

    # ------------------------------------------------------------------------------- plan
    def plan(self, pod: Mapping[str, Any], requests: ContainerRequests | None = None) -> PodPlan:
        """The pod's :class:`PodPlan` (``requests``: already computed by the caller)."""
        state = self.state
        ref, key = pod_ref(pod), pod_key(pod)
        namespace = str(metadata(pod).get("namespace") or "default")
        if requests is None:
            requests = state.requests(pod)
        if requests.empty:
            return PodPlan(pod, ref, key, namespace, requests)
        annos = annotations(pod)
        sched = state.config.scheduler
        try:
            numa_bind = parse_go_bool(annos.get(keys.NVIDIA_NUMA_BIND, "false") or "false")
        except WireFormatError:
            numa_bind = False
        try:
            policy = effective_policy(annos, node_default=sched.node_scheduler_policy,
                                      gpu_default=sched.gpu_scheduler_policy, numa_bind=numa_bind)
        except WireFormatError as exc:
            return PodPlan(pod, ref, key, namespace, requests, error=f"calcScore failed {exc} for pod {ref}")
        quota = state.quotas.view(namespace, own=key) if state.quotas.limited(namespace) else None
        return PodPlan(pod, ref, key, namespace, requests, policy, shapes=pod_shapes(pod, requests, state.backends),
                       host_need=host_requests(pod), quota=quota)

    # ------------------------------------------------------------------------------- search
    def schedule(self, plan: PodPlan, node_names: Iterable[str] | None, limit: int | None) -> Decision:
        """:meth:`Engine.schedule <hami_core.engine.facade.Engine.schedule>` of a planned pod."""
        state = self.state
        pod, ref, requests = plan.pod, plan.ref, plan.requests
        if requests.empty:
            names = sorted(state.nodes) if node_names is None else sorted(node_names)
            return self._rank_deviceless(pod, ref, names, requests, limit)
        if plan.error is not None or plan.policy is None:
            return Decision(pod=ref, requests=requests, error=plan.error)
        shapes = plan.shapes
        self.workload.observe(plan.key, shapes, plan.host_need)
        workload = self.workload.snapshot()
        cycle = Cycle(hook=state.hook, backends=state.backends, pod=pod, key=plan.key, requests=requests,
                      policy=plan.policy, own=state.ledger.get(plan.key), shapes=shapes, workload=workload,
                      host_need=plan.host_need, quota=plan.quota)
        state.table.refresh()
        rows, alive = self._candidates(cycle, node_names)
        if cycle.own is not None and cycle.own.node in state.nodes:
            cycle.exclude_own(state.nodes[cycle.own.node])
        if not alive:
            return cycle.decision(None, (), {}, state.clock(), ref)
        own_at = -1
        if cycle.own is not None:
            own_state = state.nodes.get(cycle.own.node)
            if own_state is not None:
                hit = np.flatnonzero(rows == own_state.row)
                own_at = int(hit[0]) if len(hit) else -1
        placement_scored = self._scores_placement(requests)
        best_first = limit is not None and not placement_scored
        possible = self._possible(cycle, rows, own_at) if best_first else None
        if possible is not None and not possible.any():
            # no node has the capacity (a saturated cluster's usual failure): the prescore would order nothing
            self._explain(cycle, alive)
            return cycle.decision(None, (), {}, state.clock(), ref)
        pre = cycle.prescore(alive, state.table.totals[rows], own_at=own_at, rows=rows,
                             generations=state.table.generation[rows], shapes=shapes, workload=workload,
                             cache=self.plugin_cache, host=plan.host_need, possible=possible)
        if possible is None or limit is None:
            picked = cycle.fit_indices(alive)
        else:
            picked = self._fit_best_first(cycle, alive, possible, pre, limit)
        if not picked:
            return cycle.decision(None, (), {}, state.clock(), ref)
        pre_at = pre.tolist() if len(picked) > 32 else pre  # many nodes: all floats at once, not one numpy read each
        scores = cycle.score([alive[i] for i in picked], {alive[i].name: float(pre_at[i]) for i in picked},
                             placement=placement_scored)
        ranked = cycle.rank(scores)
        if limit is not None:
            ranked = ranked[:limit]
            scores = {n: scores[n] for n in ranked}
        return cycle.decision(state.nodes[ranked[0]], ranked, scores, state.clock(), ref)

    def _rank_deviceless(self, pod: Mapping[str, Any], ref: str, names: list[str],
                         requests: ContainerRequests, limit: int | None = None) -> Decision:
        """A pod without managed devices: any candidate will do, listed best first when its node policy
        ranks every pod (``PolicyInfo.ranks_all_pods``), by the prescore of its CPU and memory alone; with
        ``limit``, the best ``limit`` of them (the first in name order among equal scores)."""
        state = self.state
        sched = state.config.scheduler
        node_policy = annotations(pod).get(keys.NODE_SCHEDULER_POLICY) or sched.node_scheduler_policy
        if self._all_pod_policies is None:
            self._all_pod_policies = frozenset(p.name for p in self._policies()
                                               if p.kind == "node" and p.ranks_all_pods)
        if node_policy not in self._all_pod_policies:
            return Decision(pod=ref, nodes=tuple(names), requests=requests, skipped=True)
        try:
            policy = effective_policy(annotations(pod), node_default=sched.node_scheduler_policy,
                                      gpu_default=sched.gpu_scheduler_policy)
        except WireFormatError:
            return Decision(pod=ref, nodes=tuple(names), requests=requests, skipped=True)
        state.table.refresh()
        # the usable names' rows and states in name order, looked up as array operations (the table's ``ok`` is
        # ``by_uuid and not quarantine`` once refreshed); a list naming a node twice keeps the per-name walk
        rows, alive, _ = self._lookup(names) if len(set(names)) == len(names) else self._walk(names)
        if not alive:
            return Decision(pod=ref, nodes=tuple(names), requests=requests, skipped=True)
        cycle = Cycle(hook=state.hook, backends=state.backends, pod=pod, key=pod_key(pod), requests=requests,
                      policy=policy, own=None)
        pre = cycle.prescore(alive, state.table.totals[rows], rows=rows, generations=state.table.generation[rows],
                             shapes=(), workload=self.workload.snapshot(), cache=self.plugin_cache)
        key = pre if policy.node == "spread" else -pre
        # with limit 1 the best alone: the first minimum, the lowest name among equal scores (as the sort)
        order = [int(np.argmin(key))] if limit == 1 else np.argsort(key, kind="stable").tolist()[:limit]
        ranked = [alive[i].name for i in order]
        scores = dict(zip(ranked, np.asarray(pre, dtype=float)[order].tolist(), strict=True))
        rest = (n for n in names if n not in scores) if limit is None and len(ranked) < len(names) else ()
        return Decision(pod=ref, nodes=(*ranked, *rest), scores=scores, requests=requests, policy=policy,
                        skipped=True)

    def _walk(self, names: list[str]) -> tuple[np.ndarray, list[NodeState], list[str]]:
        """:meth:`_lookup` name by name, keeping a name given twice twice (its rows, usable states, no reasons)."""
        nodes = self.state.nodes
        alive = [s for s in (nodes.get(n) for n in names) if s is not None and s.by_uuid and not s.quarantine]
        return self.state.table.rows(alive), alive, []

    def _candidates(self, cycle: Cycle, node_names: Iterable[str] | None) -> tuple[np.ndarray, list[NodeState]]:
        """The nodes that can take pods among ``node_names``, in name order: their table rows and states.

        Every other named node gets its reason in ``cycle.failed`` (in name order). No Python work is done per
        candidate: names map to rows in one pass, and the registered/quarantine test and the name order are
        array operations on the table (``ok``, ``rank``); naming every node reuses a cached candidate list.
        """
        nodes = self.state.nodes
        table = self.state.table
        if node_names is None:
            rows, alive = table.every_ok()
            bad = sorted(s.name for s in nodes.values() if not table.ok[s.row]) if len(rows) < len(nodes) else []
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
            state = nodes.get(name)
            if state is None or not state.by_uuid:
                cycle.failed[name] = NODE_UNREGISTERED
            else:
                cycle.failed[name] = "node quarantined: " + "; ".join(sorted(state.quarantine.values()))
        return rows, alive  # type: ignore[return-value]

    def _lookup(self, names: list[str]) -> tuple[np.ndarray, list[NodeState], list[str]]:
        """Rows and states of the usable ``names`` in name order, and the other names (sorted, once each)."""
        table = self.state.table
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
        return bool(self.state.hook.score_callers(requests.backends()))

    def _reason_key(self, cycle: Cycle) -> int:
        """The number of what a node's reason for ``cycle``'s pod depends on besides the node: its requests,
        policy, namespace, annotations and quota usage. Numbers are never reused (a node's cached reason under a
        number dropped from the table is simply never asked for again)."""
        meta = metadata(cycle.pod)
        shape = (tuple(tuple(sorted((b, r.nums, r.memreq, r.mem_percentage, r.coresreq) for b, r in c.items()))
                       for c in cycle.requests.containers),
                 cycle.requests.init_count, cycle.policy, meta.get("namespace"),
                 tuple(sorted((annotations(cycle.pod)).items())),
                 # quota usage changes without the node changing: a ResourceQuotaNotFit holds only for that state
                 tuple(sorted(cycle.quota.entries.items())) if cycle.quota is not None else ())
        number = self._reason_keys.get(shape)
        if number is None:
            if len(self._reason_keys) >= _REASON_KEYS:
                self._reason_keys.clear()
            number = self._reason_keys[shape] = next(self._reason_numbers)
        return number

    def _possible(self, cycle: Cycle, rows: np.ndarray, own_at: int) -> np.ndarray:
        """The capacity prefilter: which of ``rows`` the pod's requests could fit by the table's summaries (a node
        it leaves out cannot take the pod; one it keeps still has to pass the fit)."""
        possible = np.ones(len(rows), dtype=bool)
        for container in cycle.requests.containers:
            for name, request in container.items():
                if self.state.backends[name].standard_capacity:
                    possible &= self.state.table.feasible(rows, name, request)
        if own_at >= 0:  # its own reservation is in the summaries; never prune that node
            possible[own_at] = True
        return possible

    def _fit_best_first(self, cycle: Cycle, alive: list[NodeState], possible: np.ndarray, pre: np.ndarray,
                        limit: int) -> list[int]:
        """Fit the ``possible`` candidates (:meth:`_possible`) best-first until ``limit`` fit.

        Best first is by prescore (descending, ascending for spread), ties in name order (``alive`` is in name
        order and the sort is stable). Returns the positions in ``alive`` of the nodes that fit.
        """
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

    def _explain(self, cycle: Cycle, pruned: list[NodeState]) -> None:
        """Nothing fits: give each pruned node HAMi's exact reason, fitting it or reusing a cached reason.

        A saturated cluster rejects the same kinds of pods over and over; a node's reason for a pod of
        the same shape stays valid until the node changes (its generation), so it is kept per node, under the
        shape's number (:meth:`_reason_key`: the shape's tuple is hashed once per pod, not once per node).
        """
        key = self._reason_key(cycle)
        todo = []
        failed = cycle.failed
        for state in pruned:
            hit = state.reason_cache.get(key)
            if hit is not None and hit[0] == state.generation:
                failed[state.name] = hit[1]
            else:
                todo.append(state)
        if todo:
            cycle.fit(todo)
            for state in todo:
                reason = failed.get(state.name)
                if reason is not None:
                    if len(state.reason_cache) > 64:
                        state.reason_cache.clear()
                    state.reason_cache[key] = (state.generation, reason)
