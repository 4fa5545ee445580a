"""The defragmentation planner: which running pods to evict so that their owners' replacements free whole devices.

Input: the cluster's Node, Pod and PodDisruptionBudget objects, loaded into a scratch :class:`Engine` (the planner
books and unbooks on it, so it is a copy of the scheduler's state, never the scheduler's own). Output: a
:class:`Plan`, an ordered list of :class:`Move` (pod, from node, the node the engine's fit expects it on) with the
expected gain: idle devices and FGD's fragmentation of the cluster (:mod:`hami_core.defrag.measure`) before and
after.

Design. A *group* is every pod booked on one partly used device: moving the whole group frees the device. Each
round the planner tries every group whose pods may all be moved (:mod:`hami_core.defrag.safety`) within what is
left of the budget, on the scratch engine: each pod (largest first) is unbooked and fitted with the engine's own
``schedule`` on the other nodes, taking the feasible node where it takes no idle card and fragmentation grows least
(the fit refusing a node is final: a move never over-allocates its target); then the group is undone. The group
with the best gain per move (idle devices gained, then fragmentation cut) is booked for good, and the next round
starts from there. Groups that free nothing and cut no fragmentation are never taken, so a cluster nothing helps
gets an empty plan.

Why greedy: the exact problem (fewest moves reaching a packing) is a bin-packing variant, NP-hard, and the budget
is small (5 % of pods by default), so a few rounds of the best local step reach most of the reachable gain; each
step is checked by the engine's fit, so every prefix of the plan is safe to apply and to stop after. Its cost is
rounds x groups x pods per group x :data:`MAX_TARGETS` fits and fragmentation evaluations (about 12 s for 40
nodes of 8 cards and 134 pods on this machine): fine for a live cluster, not tuned for the simulator's thousands.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_core.defrag.measure import cluster_fragmentation, idle_devices, node_fragmentation, workload_mix
from hami_core.defrag.safety import DisruptionBudgets, controller_owner, pinned
from hami_core.engine.facade import Engine
from hami_core.engine.pods import is_terminal, pod_key, pod_ref
from hami_core.policies.fgd.mix import MixClass

#: Target nodes tried per pod: the engine's best-first feasible nodes (its policy's order), so that a round costs
#: groups x this many fits, not groups x nodes; the policy's best node is where a replacement would go anyway.
MAX_TARGETS = 8


@dataclass(frozen=True, slots=True)
class Budget:
    """At most ``percent`` % of running pods moved (rounded down), and at most ``max_moves`` if given."""

    percent: float = 5.0
    max_moves: int | None = None

    def moves(self, running: int) -> int:
        n = math.floor(running * self.percent / 100.0 + 1e-9)
        return n if self.max_moves is None else min(n, self.max_moves)


@dataclass(frozen=True, slots=True)
class Move:
    """Evict ``pod`` (``namespace/name``, ``uid``) from ``from_node``; its owner's replacement is expected on
    ``to_node`` (``None``: anywhere the scheduler puts it)."""

    pod: str
    uid: str
    owner: str
    from_node: str
    to_node: str | None


@dataclass(frozen=True, slots=True)
class Plan:
    moves: tuple[Move, ...]
    budget: int
    running: int
    idle_before: int
    idle_after: int
    frag_before: float
    frag_after: float
    #: pods left alone and why (pod → reason), for the report
    skipped: Mapping[str, str] = field(default_factory=dict)

    @property
    def gpus_freed(self) -> int:
        return self.idle_after - self.idle_before

    def as_dict(self) -> dict[str, Any]:
        return {"moves": [{"pod": m.pod, "uid": m.uid, "owner": m.owner, "from": m.from_node, "to": m.to_node}
                          for m in self.moves],
                "budget": self.budget, "running": self.running, "gpus_freed": self.gpus_freed,
                "idle_before": self.idle_before, "idle_after": self.idle_after,
                "fragmentation_before": round(self.frag_before, 3), "fragmentation_after": round(self.frag_after, 3),
                "skipped": dict(self.skipped)}


def _node_of(pod: Mapping[str, Any]) -> str | None:
    annos = (pod.get("metadata") or {}).get("annotations") or {}
    return (pod.get("spec") or {}).get("nodeName") or annos.get("hami.io/vgpu-node")


def _idle_on(engine: Engine, node: str) -> int:
    return sum(1 for d in engine.nodes[node].by_uuid.values() if d.health and d.used == 0)


def _device_share(d: Any) -> float:
    """A device's used share (0..1): the larger of its memory and cores occupancy."""
    mem = d.usedmem / d.totalmem if d.totalmem else 0.0
    cores = d.usedcores / d.totalcore if d.totalcore else 0.0
    return max(mem, cores)


class MoveSearch:
    """The planner's trials on ``engine``. ``restore(key)`` books a pod back where it was (default: from the
    allocation its annotations hold); ``targets(key, source)`` lists the nodes a pod may go to (default: every other
    node); ``max_groups``: only the groups on that many least used devices are tried each round (the cheapest to
    free; ``None``: every group)."""

    def __init__(self, engine: Engine, pods: Mapping[str, Mapping[str, Any]], mix: Mapping[str, list[MixClass]], *,
                 restore: Callable[[str], None] | None = None,
                 targets: Callable[[str, str], list[str]] | None = None, max_groups: int | None = None) -> None:
        self.engine, self.pods, self.mix = engine, pods, mix
        self.restore = restore or self._rebook
        self.targets = targets or (lambda _key, source: [n for n in sorted(self.engine.nodes) if n != source])
        self.max_groups = max_groups

    def _rebook(self, key: str) -> None:
        self.engine.unreserve(self.pods[key])
        self.engine.upsert_pod(self.pods[key])  # books the allocation its annotations hold

    def frag(self, names: Sequence[str] | None = None) -> float:
        return cluster_fragmentation(self.engine, self.mix, names)

    def groups(self) -> list[tuple[str, list[str]]]:
        """(node, pod keys) booked on each partly used device, one group per distinct set."""
        seen: set[tuple[str, ...]] = set()
        out: list[tuple[float, str, list[str]]] = []
        for node in sorted(self.engine.nodes):
            by_dev: dict[str, list[str]] = {}
            for b in self.engine.ledger.on_node(node):
                for devs in b.devices.values():
                    for d in devs:
                        by_dev.setdefault(d.uuid, []).append(b.key)
            usage = self.engine.nodes[node].by_uuid
            for uuid, keys in by_dev.items():
                group = tuple(sorted(set(keys)))
                if group not in seen:
                    seen.add(group)
                    out.append((_device_share(usage[uuid]) if uuid in usage else 1.0, node, list(group)))
        if self.max_groups is not None:  # the least used devices first: the fewest milli to move to free one
            out = sorted(out, key=lambda g: (g[0], g[1], g[2]))[:self.max_groups]
        return [(node, keys) for _, node, keys in out]

    def place(self, key: str, source: str) -> str | None:
        """Unbook the pod and book it on the other node leaving the least fragmentation; ``None``: nowhere fits
        (the pod is then unbooked: the caller undoes)."""
        pod = self.pods[key]
        self.engine.unreserve(pod)
        decision = self.engine.schedule(pod, self.targets(key, source))
        # a target is judged by the idle cards it takes (none is best: the move then frees one), then by how much
        # its fragmentation grows, then by the policy's order
        best: tuple[int, float, int, str] | None = None
        for rank, node in enumerate(decision.nodes[:MAX_TARGETS]):
            one = self.engine.schedule(pod, [node])
            if not one.ok:
                continue
            before, idle = self.frag([node]), _idle_on(self.engine, node)  # only the target's figures change
            self.engine.reserve(pod, one)
            score = (idle - _idle_on(self.engine, node), self.frag([node]) - before, rank, node)
            self.engine.unreserve(pod)
            best = score if best is None or score < best else best
        if best is None:
            return None
        self.engine.reserve(pod, self.engine.schedule(pod, [best[-1]]))
        return best[-1]

    def undo(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.restore(key)

    def try_group(self, source: str, keys: list[str]) -> list[tuple[str, str]] | None:
        """Move the group; returns (key, target) per pod, or ``None`` (undone) when one pod fits nowhere."""
        order = sorted(keys, key=lambda k: -sum(d.usedmem for devs in self.engine.ledger.get(k).devices.values()
                                                 for d in devs) if self.engine.ledger.get(k) else 0)
        done: list[tuple[str, str]] = []
        for key in order:
            target = self.place(key, source)
            if target is None:
                self.undo([k for k, _ in done] + [key])
                return None
            done.append((key, target))
        return done


def plan_defrag(engine: Engine, nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]],
                pdbs: Sequence[Mapping[str, Any]] = (), budget: Budget = Budget()) -> Plan:
    """Plan moves on ``engine``, a scratch engine of the scheduler's configuration that the planner loads with
    ``nodes`` and ``pods`` and changes (pass a fresh one)."""
    for node in nodes:
        engine.upsert_node(node)
    running = {pod_key(p): p for p in pods if not is_terminal(p) and _node_of(p)}
    for pod in running.values():
        engine.upsert_pod(pod)
    mix = workload_mix(engine, running.values())
    search = MoveSearch(engine, running, mix)
    pdb = DisruptionBudgets(pdbs)
    skipped: dict[str, str] = {}
    for key, pod in running.items():
        if engine.ledger.get(key) is None:
            skipped[pod_ref(pod)] = "books no device"
        elif controller_owner(pod) is None:
            skipped[pod_ref(pod)] = "no controller owns it (nothing would recreate it)"
        elif pinned(pod):
            skipped[pod_ref(pod)] = "labelled hami.io/defrag: \"false\""
    movable = {k for k, p in running.items() if pod_ref(p) not in skipped}
    allowed = budget.moves(len(running))
    idle0, frag0 = idle_devices(engine), search.frag()
    moves: list[Move] = []
    moved: set[str] = set()
    for key, source, target in greedy_moves(search, running, movable, allowed, pdb):
        pod = running[key]
        moves.append(Move(pod_ref(pod), str((pod.get("metadata") or {}).get("uid") or ""),
                          controller_owner(pod) or "", source, target))
        moved.add(key)
    for key in sorted(movable - moved):
        reason = pdb.why_not([running[key]])
        if reason:
            skipped[pod_ref(running[key])] = reason
    return Plan(tuple(moves), allowed, len(running), idle0, idle_devices(engine), frag0, search.frag(), skipped)


def greedy_moves(search: MoveSearch, running: Mapping[str, Mapping[str, Any]], movable: set[str], allowed: int,
                 pdb: DisruptionBudgets | None = None) -> list[tuple[str, str, str]]:
    """The greedy rounds (module docstring) on ``search``'s engine, which is left with the moves booked: (pod key,
    from node, to node) for each, in order, at most ``allowed``."""
    engine, mix = search.engine, search.mix
    out: list[tuple[str, str, str]] = []
    moved: set[str] = set()
    while len(out) < allowed:
        idle = idle_devices(engine)
        base = node_fragmentation(engine, mix)  # a move changes only its nodes' fragmentation
        best: tuple[tuple[float, float], str, list[str]] | None = None
        for source, keys in search.groups():
            if (not set(keys) <= movable or set(keys) & moved or len(out) + len(keys) > allowed
                    or (pdb is not None and pdb.why_not([running[k] for k in keys]) is not None)):
                continue
            done = search.try_group(source, keys)
            if done is None:
                continue
            touched = {source, *(t for _, t in done)}
            cut = sum(base[n] for n in touched) - search.frag(sorted(touched))
            gain = ((idle_devices(engine) - idle) / len(keys), cut / len(keys))
            search.undo(keys)
            if (gain[0] > 0 or gain[1] > 1e-6) and (best is None or gain > best[0]):
                best = (gain, source, keys)
        if best is None:
            break
        _, source, keys = best
        done = search.try_group(source, keys)
        assert done is not None  # the same fits on the same state
        if pdb is not None:
            pdb.spend([running[k] for k in keys])
        for key, target in done:
            out.append((key, source, target))
            moved.add(key)
    return out
