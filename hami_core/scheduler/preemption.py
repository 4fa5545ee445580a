"""Device-aware preemption in the scheduler: a high-priority pod evicts exactly the pods whose devices it needs.

Why hami preempts by itself, and also answers kube-scheduler's preempt verb
---------------------------------------------------------------------------
kube-scheduler's DefaultPreemption dry-runs its own filters on each node with the lower-priority pods removed and
keeps a node as a candidate only when that needs at least one victim
(``pkg/scheduler/framework/preemption/preemption.go``: ``if status.IsSuccess() && len(pods) != 0``). It does not
see hami's resources (``ignoredByScheduler``), so a node full of GPU memory but with CPU to spare needs no victim
in its eyes, is no candidate, and an extender's ``preemptVerb`` is never even asked about it. Two paths therefore:

* :meth:`Preemption.after_no_fit`: when ``/filter`` finds no node for a pod that may preempt, hami picks the node
  and the victims itself (:func:`~hami_core.engine.preempt.choose_victims`, the engine's own fit), holds the room
  the victims will free for the preemptor (:meth:`Engine.hold <hami_core.engine.facade.Engine.hold>`), deletes the
  victims (UID precondition, their own grace period, as kube-scheduler does), nominates the node
  (``status.nominatedNodeName``) and posts kube-scheduler's ``Preempted`` event on each victim. kube-scheduler then
  retries the pod when the victims are gone, and the hold makes the room still be there.
* :meth:`Preemption.verb`: ``POST /preempt`` (``ExtenderPreemptionArgs`` → ``ExtenderPreemptionResult``), for the
  nodes where kube-scheduler does find victims of its own (for CPU or memory): hami keeps those, which kube needs
  for the resources it sees, and adds the fewest lower-priority pods whose devices the pod needs; nodes where no
  set of victims lets hami's fit place the pod are dropped.

Either way, once a node is nominated the room stays the preemptor's: :meth:`Preemption.adopt` rebuilds a hold from
``status.nominatedNodeName`` (kube-scheduler's nominations, and this scheduler's after a restart) by fitting the
pod with that node's terminating lower-priority pods left out.

``/filter`` also reports, as ``FailedAndUnresolvableNodes``, the failed nodes that no preemption can fix (too few
cards of the asked type, unhealthy cards), so kube-scheduler does not dry-run them (:meth:`Preemption.unresolvable`).
PodDisruptionBudgets count as kube-scheduler counts them (:mod:`.pdb`): nodes whose victims break fewer are
preferred; ``preemptionPolicy: Never`` pods never preempt.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hami_core.cluster.base import ConflictError, NotFoundError
from hami_core.engine.pods import metadata, pod_priority
from hami_core.engine.preempt import (
    Candidate,
    VictimChoice,
    choose_victims,
    helpful_nodes,
    placed_candidates,
    rank_choice,
    without,
)
from hami_core.plugins.errors import HamiError
from hami_core.plugins.objects import pod_key, pod_ref
from hami_core.scheduler.extwire import BadRequest, lower_keys
from hami_core.scheduler.pdb import violations

if TYPE_CHECKING:
    from hami_core.cluster.base import Cluster
    from hami_core.engine.facade import Engine

log = logging.getLogger("hami.scheduler")

__all__ = ["PREEMPTION_RESULTS", "Preempted", "Preemption"]

#: kube-scheduler's event on each victim (reason, and the message format with the preemptor's UID and the node)
PREEMPTED_REASON = "Preempted"
PREEMPTED_MESSAGE = "Preempted by pod {uid} on node {node}"
#: How many of the best nodes are checked against PodDisruptionBudgets (each costs one read of the node's pods).
PDB_NODES = 5
#: Exact victim search up to this many useful candidates per node in a request (2**8 fits at worst).
EXACT_LIMIT = 8
#: The most nodes whose victims one request works out (kube-scheduler's minCandidateNodesAbsolute).
MAX_NODES = 100
#: The words preemption decisions are counted under (``hami_preemption_decisions_total{result}``).
PREEMPTION_RESULTS = ("preempted", "no_victims", "not_eligible", "held", "failed", "verb_node_kept",
                      "verb_node_dropped")


@dataclass(frozen=True, slots=True)
class Preempted:
    """What :meth:`Preemption.after_no_fit` did: the node it holds for the pod and the pods it evicted."""

    node: str
    victims: tuple[Candidate, ...]
    pdb_violations: int


class Preemption:
    """Preemption for one scheduler: its engine (guarded by ``lock``), its cluster, and ``event(obj, type, reason,
    message)`` to post events with."""

    def __init__(self, engine: Engine, cluster: Cluster, lock: threading.RLock, *,
                 event: Callable[[Mapping[str, Any], str, str, str], None], exact_limit: int = EXACT_LIMIT,
                 max_nodes: int = MAX_NODES) -> None:
        self.engine = engine
        self.cluster = cluster
        self.lock = lock
        self.event = event
        self.exact_limit = exact_limit
        self.max_nodes = max_nodes
        #: decisions by result (:data:`PREEMPTION_RESULTS`) and pods evicted, for /metrics
        self.results: Counter[str] = Counter()
        self.victims_total = 0
        # (pod key, node) of the nominations on_pending has tried to hold room for
        self._tried: set[tuple[str, str]] = set()
        # preemptors whose hold's nomination a watch event has shown (a later event without it releases the hold)
        self._nominated: set[str] = set()

    # ------------------------------------------------------------------------------------ eligibility
    @staticmethod
    def ineligible(pod: Mapping[str, Any]) -> str | None:
        """Why ``pod`` may not preempt (``None``: it may)."""
        spec = pod.get("spec")
        if isinstance(spec, Mapping) and spec.get("preemptionPolicy") == "Never":
            return "preemptionPolicy is Never"
        return None

    # ------------------------------------------------------------------------------------ /filter
    def unresolvable(self, pod: Mapping[str, Any], failed: Mapping[str, str]) -> dict[str, str]:
        """The failed nodes that no preemption can fix, with their reasons (for ``FailedAndUnresolvableNodes``).
        Call with the engine lock held. Nothing when the pod may not preempt, or when no failed node has a pod it
        could preempt: the answer is then HAMi's own (FailedNodes only), and kube-scheduler finds no victim anyway."""
        if self.ineligible(pod) is not None:
            return {}
        priority = pod_priority(pod)
        by_node = {node: placed_candidates(self.engine, node, priority) for node in failed}
        if not any(by_node.values()):
            return {}
        return {node: reason for node, reason in failed.items()
                if not by_node[node] or not self._fits_without(pod, node, [c.key for c in by_node[node]])}

    def after_no_fit(self, pod: Mapping[str, Any], failed: Mapping[str, str]) -> Preempted | None:
        """No node fits ``pod``: pick a node and victims, hold the room, evict, nominate. Call without the engine
        lock (it takes it for the choice and the hold; the API writes run outside it)."""
        why = self.ineligible(pod)
        if why is not None:
            self.results["not_eligible"] += 1
            return None
        with self.lock:
            if self.engine.held_node(pod) is not None:  # its victims are still terminating
                self.results["held"] += 1
                return None
            options = self._options(pod, failed)
        if not options:
            self.results["no_victims"] += 1
            return None
        best, pdb = self._with_pdbs(options)
        with self.lock:  # the cluster may have moved on while the PDBs were read: fit once more, then hold
            keys = [v.key for v in best.victims]
            with without(self.engine, keys):
                decision = self.engine.schedule(pod, [best.node])
            if not decision.ok:
                self.results["failed"] += 1
                return None
            self.engine.hold(pod, decision)
        self._evict(pod, best)
        self._nominate(pod, best.node)
        self.results["preempted"] += 1
        self.victims_total += len(best.victims)
        names = ", ".join(v.ref for v in best.victims)
        self.event(pod, "Normal", "Preempting",
                   f"preempting {len(best.victims)} lower-priority pod(s) on node {best.node} for its devices: {names}")
        log.info("pod %s: preempting %s on node %s (%d PDB violation(s))", pod_ref(pod), names, best.node, pdb)
        return Preempted(best.node, best.victims, pdb)

    def _options(self, pod: Mapping[str, Any], failed: Mapping[str, str]) -> list[VictimChoice]:
        options = []
        # one batched fit finds the nodes where any preemption helps; the victims are then worked out on those alone
        for node, candidates in helpful_nodes(self.engine, pod, sorted(failed)[: self.max_nodes]).items():
            choice = choose_victims(self.engine, pod, node, candidates, exact_limit=self.exact_limit, helpful=True)
            if choice.fits and choice.victims:
                options.append(choice)
        return sorted(options, key=rank_choice)

    def _with_pdbs(self, options: list[VictimChoice]) -> tuple[VictimChoice, int]:
        try:
            pdbs = self.cluster.list_pod_disruption_budgets()
        except HamiError as exc:
            log.warning("preemption: cannot read PodDisruptionBudgets (%s); choosing as if there were none", exc)
            pdbs = []
        if not pdbs:
            return options[0], 0
        ranked = []
        for choice in options[:PDB_NODES]:
            count = sum(violations(self._victim_objects(choice), pdbs))
            ranked.append((rank_choice(choice, count), choice, count))
        ranked.sort(key=lambda item: item[0])
        return ranked[0][1], ranked[0][2]

    def _victim_objects(self, choice: VictimChoice) -> list[Mapping[str, Any]]:
        try:
            pods = {str(metadata(p).get("uid") or ""): p for p in self.cluster.pods_on_node(choice.node)}
        except HamiError:
            pods = {}
        return [pods.get(v.uid) or {"metadata": {"name": v.ref.partition("/")[2],
                                                 "namespace": v.ref.partition("/")[0]}} for v in choice.victims]

    def _evict(self, pod: Mapping[str, Any], choice: VictimChoice) -> None:
        uid = str(metadata(pod).get("uid") or "")
        for victim in choice.victims:
            namespace, _, name = victim.ref.partition("/")
            try:
                self.cluster.delete_pod(namespace, name, victim.uid)
            except NotFoundError:
                continue  # gone already: what it held is freed
            except ConflictError:
                log.info("preemption: %s was re-created since it was chosen; left alone", victim.ref)
                continue
            except HamiError as exc:
                log.warning("preemption: cannot delete victim %s of %s: %s", victim.ref, pod_ref(pod), exc)
                continue
            self.event({"kind": "Pod", "metadata": {"name": name, "namespace": namespace, "uid": victim.uid}},
                       "Normal", PREEMPTED_REASON, PREEMPTED_MESSAGE.format(uid=uid, node=choice.node))

    def _nominate(self, pod: Mapping[str, Any], node: str) -> None:
        meta = metadata(pod)
        try:
            self.cluster.patch_pod_status(str(meta.get("namespace") or "default"), str(meta.get("name")),
                                          {"status": {"nominatedNodeName": node}})
        except HamiError as exc:  # the hold is what keeps the room; the nomination tells users
            log.warning("preemption: cannot nominate node %s for %s: %s", node, pod_ref(pod), exc)

    # ------------------------------------------------------------------------------------ nominations
    def adopt(self, pod: Mapping[str, Any], terminating: Sequence[str] = ()) -> bool:
        """Hold room for a pending pod nominated to a node (``status.nominatedNodeName``) that holds none: fit it
        there with ``terminating`` (keys of that node's pods being deleted) left out. Call with the lock held."""
        status = pod.get("status")
        node = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
        if not isinstance(node, str) or not node or node not in self.engine.nodes:
            return False
        if self.engine.held_node(pod) == node:
            return True
        priority = pod_priority(pod)
        going = [c.key for c in placed_candidates(self.engine, node, priority) if c.key in set(terminating)]
        with without(self.engine, going):
            decision = self.engine.schedule(pod, [node])
        if not decision.ok:
            return False
        self.engine.hold(pod, decision)
        log.info("pod %s: holding its room on nominated node %s", pod_ref(pod), node)
        return True

    def on_pending(self, pod: Mapping[str, Any]) -> None:
        """A Pod watch event: a pending pod nominated to a node where it holds no room (kube-scheduler's own
        nomination, or ours before a restart) gets a hold, with that node's terminating pods left out. Tried once
        per pod and node (it reads the node's pods), not on every update."""
        status = pod.get("status")
        node = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
        node = node if isinstance(node, str) and node else None
        spec = pod.get("spec")
        key = pod_key(pod)
        if isinstance(spec, Mapping) and spec.get("nodeName"):
            self.forget(pod)  # bound: the placement took the hold over
            return
        with self.lock:
            held = self.engine.held_node(pod)
            if held is not None and held == node:
                self._nominated.add(key)  # the nomination that backs the hold has been seen
                return
            if held is not None and (node is not None or key in self._nominated):
                # the nomination went (kube-scheduler cleared it, or nominated another node): so does the room.
                # A hold whose nomination was never seen yet is our own, whose status patch is still on its way.
                self.engine.release_hold(pod)
                self._nominated.discard(key)
                log.info("pod %s: nomination to %s gone; its held room is released", pod_ref(pod), held)
        if node is None:
            return
        attempt = (key, node)
        with self.lock:
            if attempt in self._tried or self.engine.held_node(pod) == node or self.engine.requests(pod).empty:
                return
            self._tried.add(attempt)
            if len(self._tried) > 10_000:  # bounded memo: forget the oldest attempts' set wholesale
                self._tried = {attempt}
        try:
            going = terminating_keys(self.cluster.pods_on_node(node))
        except HamiError as exc:
            log.warning("preemption: cannot read the pods of node %s for %s: %s", node, pod_ref(pod), exc)
            return
        with self.lock:
            self.adopt(pod, going)

    def forget(self, pod: Mapping[str, Any]) -> None:
        """The pod is bound or gone: drop what :meth:`on_pending` remembers of it."""
        with self.lock:
            self._nominated.discard(pod_key(pod))

    # ------------------------------------------------------------------------------------ /preempt
    def verb(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /preempt``: kube-scheduler's victims per node, kept, plus the fewest device victims the pod needs;
        nodes where nothing helps are dropped. Both the meta-victim (``nodeCacheCapable``) and the full-victim
        forms are read, keys case-insensitively; the answer is always meta victims, as kube-scheduler expects."""
        low = lower_keys(args, "ExtenderPreemptionArgs")
        pod = low.get("pod")
        if not isinstance(pod, Mapping):
            raise BadRequest("ExtenderPreemptionArgs.Pod must be a Pod object")
        by_node = _victims_by_node(low)
        out: dict[str, Any] = {}
        priority = pod_priority(pod)
        with self.lock:
            for node, (uids, kube_pdb) in sorted(by_node.items()):
                if node not in self.engine.nodes:
                    continue  # not a node hami knows: kube's choice stands unchanged
                with without(self.engine, list(uids)):
                    others = [c for c in placed_candidates(self.engine, node, priority) if c.key not in uids]
                    choice = choose_victims(self.engine, pod, node, others, exact_limit=self.exact_limit)
                if not choice.fits:
                    self.results["verb_node_dropped"] += 1
                    continue
                self.results["verb_node_kept"] += 1
                victims = [*uids, *(v.uid for v in choice.victims if v.uid not in uids)]
                out[node] = {"Pods": [{"UID": uid} for uid in victims], "NumPDBViolations": kube_pdb}
        return {"NodeNameToMetaVictims": out}

    def _fits_without(self, pod: Mapping[str, Any], node: str, keys: Sequence[str]) -> bool:
        with without(self.engine, keys):
            return self.engine.schedule(pod, [node]).ok


def _victims_by_node(low: Mapping[str, Any]) -> dict[str, tuple[list[str], int]]:
    """node → (kube-scheduler's victim UIDs, its PDB violation count), from either form of the args."""
    meta = low.get("nodenametometavictims")
    full = low.get("nodenametovictims")
    source, field = (meta, "NodeNameToMetaVictims") if meta is not None else (full, "NodeNameToVictims")
    if source is None:
        return {}
    if not isinstance(source, Mapping):
        raise BadRequest(f"ExtenderPreemptionArgs.{field} must be an object of node names")
    out = {}
    for node, victims in source.items():
        if victims is None:
            continue
        entry = lower_keys(victims, f"ExtenderPreemptionArgs.{field}[{node}]")
        pods = entry.get("pods")
        pods = [] if pods is None else pods
        if not isinstance(pods, list):
            raise BadRequest(f"ExtenderPreemptionArgs.{field}[{node}].Pods must be a list")
        uids = []
        for i, item in enumerate(pods):
            if not isinstance(item, Mapping):
                raise BadRequest(f"ExtenderPreemptionArgs.{field}[{node}].Pods[{i}] must be an object")
            uid = lower_keys(item, "MetaPod").get("uid") if meta is not None else metadata(item).get("uid")
            if not isinstance(uid, str) or not uid:
                raise BadRequest(f"ExtenderPreemptionArgs.{field}[{node}].Pods[{i}] has no UID")
            uids.append(uid)
        pdb = entry.get("numpdbviolations", 0)
        out[str(node)] = (uids, pdb if isinstance(pdb, int) and not isinstance(pdb, bool) else 0)
    return out


def passthrough_victims(args: Mapping[str, Any]) -> dict[str, Any]:
    """kube-scheduler's own victims as an ``ExtenderPreemptionResult`` (preemption off: hami changes nothing)."""
    low = lower_keys(args, "ExtenderPreemptionArgs")
    return {"NodeNameToMetaVictims": {node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb}
                                      for node, (uids, pdb) in sorted(_victims_by_node(low).items())}}


def pod_is_terminating(pod: Mapping[str, Any]) -> bool:
    return bool(metadata(pod).get("deletionTimestamp"))


def terminating_keys(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ledger keys of the pods among ``pods`` that are being deleted."""
    return [pod_key(p) for p in pods if pod_is_terminating(p)]
