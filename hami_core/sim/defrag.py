"""``hami simulate --defrag``: the defragmenter run inside a replay, and what it moved.

Two triggers, given as ``--defrag AT`` (a comma list, see :class:`DefragSpec`):

* ``pending``: when a pod that asks for devices fits nowhere, make room for it at once (KAI scheduler's
  *consolidation*). A survey finds the placed pods that have room elsewhere as things are, and the one-card pods
  that would have room two hops away (a card that moving pods of the first kind off opens enough). Then: pods
  without devices move off a node whose devices could take the pod but whose CPU or memory is short; else, on the
  nodes closest to fitting it (the fewest device milli short on the cards those pods can empty enough), the fewest
  victims covering the shortfall (and the node's CPU and memory; for a two-hop victim, the pods that make way for
  it) are evicted, the pod is placed, and each evicted pod's replacement is placed through the engine's own fit and
  policy, as its owner's replacement would be. If a replacement fits nowhere the whole step is undone and the next
  set is tried: a move never loses a pod and never over-allocates a device or a node (every booking is a decision
  of the engine's fit). A rescue before the cluster is full changes which pods get the capacity rather than how
  much is used; docs/defrag.md, "In the simulator", has the figures.
* a percent (``70``): when the arrived GPU demand reaches that share of the capacity, run the planner of
  :mod:`hami_core.defrag.planner` on the replay's engine (whole devices freed, then FGD fragmentation cut), restricted
  to the least used devices so that it scales to the openb cluster, and apply its moves.

The budget (``--defrag-percent K``, default 5) is for the whole run: the moves made so far never exceed K % of the
pods that hold devices at that moment (rounded down), so at 100 % arrived demand at most K % of the running pods
have been moved. A pod labelled ``hami.io/defrag: "false"`` is never moved; in the simulator every other pod is
taken to have a controller that recreates it (the openb traces name none), and there are no PodDisruptionBudgets.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hami_core.defrag.measure import idle_devices, workload_mix
from hami_core.defrag.planner import Budget, MoveSearch, greedy_moves
from hami_core.defrag.safety import pinned
from hami_core.engine.decision import Decision
from hami_core.engine.pods import host_requests, pod_key
from hami_core.engine.preempt import without
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.sim.errors import PolicyError
from hami_core.sim.fragmentation import FULL
from hami_core.sim.replay import INSUFFICIENT_CPU_MEMORY, Placed, Replay
from hami_core.sim.survey import Survey
from hami_core.sim.workload import SimPod

PENDING = "pending"
#: ``pending``: nodes on which a victim set is worked out, the fewest milli short of fitting the pod first
PENDING_NODES = 96
#: ... at most this many pods per card (the fewest that cover what the card is short)
PENDING_VICTIMS = 6
#: ... and the sets with the fewest victims are tried (fitted by the engine, replacements placed) on this many nodes
PENDING_TRIES = 12
#: a percent point: groups (the pods of one device) the planner tries per round, those of the least used devices
MAX_GROUPS = 8


class DefragError(PolicyError):
    """A ``--defrag`` or ``--defrag-percent`` value that cannot be used."""


@dataclass(frozen=True, slots=True)
class DefragSpec:
    """When the defragmenter runs (``points``: arrived-demand percents; ``pending``: for each pod that fits
    nowhere) and its budget (``percent`` of the running pods that hold devices, over the whole run)."""

    points: tuple[float, ...] = ()
    pending: bool = False
    percent: float = 5.0

    @classmethod
    def parse(cls, text: str, percent: float = 5.0) -> DefragSpec:
        """``70,80,90``, ``pending`` or both (``pending,90``)."""
        if not math.isfinite(percent) or not 0 <= percent <= 100:
            raise DefragError(f"--defrag-percent: expected a percentage from 0 to 100, got {percent:g}")
        points: list[float] = []
        pending = False
        for item in (s.strip() for s in text.split(",")):
            if not item:
                continue
            if item == PENDING:
                pending = True
                continue
            try:
                value = float(item)
            except ValueError:
                raise DefragError(f"--defrag {text}: {item!r} is neither a percentage of arrived demand nor "
                                  f"{PENDING!r}") from None
            if not math.isfinite(value) or not 0 < value <= 1000:
                raise DefragError(f"--defrag {text}: {item} is not a percentage of arrived demand above 0")
            points.append(value)
        if not points and not pending:
            raise DefragError(f"--defrag {text!r}: no point given")
        return cls(tuple(sorted(set(points))), pending, percent)

    def label(self) -> str:
        parts = ([PENDING] if self.pending else []) + [f"{p:g}" for p in self.points]
        return ",".join(parts)


@dataclass(slots=True)
class DefragStats:
    """What the defragmenter did in one run."""

    moves: int = 0
    #: of ``moves``: pods without devices moved to free a node's CPU or memory (``pending``)
    host_moves: int = 0
    #: of ``moves``: pods moved to make way for another moved pod (the second hop, ``pending``)
    way_moves: int = 0
    #: pods that fitted nowhere and were placed after moves (``pending``)
    rescued: int = 0
    attempts: int = 0
    #: at 100 % arrived demand: moves made so far, and the pods holding devices then
    moves_at_100: int | None = None
    running_at_100: int | None = None
    #: per point: (arrived %, moves, whole devices freed)
    points: list[tuple[float, int, int]] = field(default_factory=list)
    #: ``pending`` attempts that moved nothing, by why
    misses: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    @property
    def moved_percent_at_100(self) -> float | None:
        if self.moves_at_100 is None or not self.running_at_100:
            return None
        return 100.0 * self.moves_at_100 / self.running_at_100

    def as_json(self, spec: DefragSpec) -> dict[str, Any]:
        pct = self.moved_percent_at_100
        return {"at": spec.label(), "budget_percent": spec.percent, "moves": self.moves,
                "host_moves": self.host_moves, "way_moves": self.way_moves, "rescued": self.rescued,
                "attempts": self.attempts, "moves_at_100": self.moves_at_100, "running_at_100": self.running_at_100,
                "moved_percent_at_100": None if pct is None else round(pct, 3),
                "points": [{"arrived": a, "moves": m, "gpus_freed": g} for a, m, g in self.points],
                "misses": dict(sorted(self.misses.items())),
                "wall_s": round(self.wall_s, 3)}


class DefragReplay(Replay):
    """A :class:`Replay` that runs the defragmenter as :class:`DefragSpec` says."""

    def __init__(self, *args: Any, defrag: DefragSpec, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec = defrag
        self.stats = DefragStats()
        self.result.defrag = self.stats.as_json(defrag)
        self._points = list(defrag.points)
        #: pod shapes (class, CPU, memory) no move could help since the last move
        self._hopeless: set[tuple[Any, int, int]] = set()
        #: placed pods without devices (key -> task, node) and their keys per node: ``pending`` moves them off a
        #: node whose devices could take a pod that is short of CPU or memory there
        self.hosted: dict[str, tuple[SimPod, str]] = {}
        self.hosted_on: dict[str, set[str]] = {}
        #: within one attempt: the cluster as it is (:meth:`_survey`)
        self.survey = Survey([], {}, lambda key: None, np.zeros(0), np.zeros(0), self.device_share)
        #: pods chosen to make way for a two-hop victim (counted as ``way_moves`` once their step is kept)
        self._ways: set[str] = set()

    # ------------------------------------------------------------------------------------ budget
    def moves_left(self) -> int:
        return Budget(self.spec.percent).moves(len(self.live)) - self.stats.moves

    def movable(self, key: str) -> bool:
        return key in self.live and not pinned(self.live[key][1])

    # ------------------------------------------------------------------------------------ the replay's hooks
    def place(self, task: SimPod) -> Placed:
        placed = super().place(task)
        r = self.result
        arrived = 100.0 * r.arrived_milli / r.capacity_milli if r.capacity_milli else 0.0
        if self.stats.moves_at_100 is None and arrived >= 100.0:
            self.stats.moves_at_100, self.stats.running_at_100 = self.stats.moves, len(self.live)
        while self._points and arrived >= self._points[0]:
            point = self._points.pop(0)
            t0 = time.perf_counter()
            # each point gets an equal share of what is left of the budget (the later points' shares stay)
            moved, freed = self.run_planner(self.moves_left() // (len(self._points) + 1))
            self.stats.moves += moved
            if moved:
                self._hopeless.clear()
            self.stats.points.append((point, moved, freed))
            self.stats.wall_s += time.perf_counter() - t0
        r.defrag = self.stats.as_json(self.spec)
        return placed

    def _place(self, task: SimPod) -> Placed:
        placed = super()._place(task)
        if placed.node is not None and task.gpu_demand == 0:
            self._host(task, placed.node)
        elif (placed.node is None and self.spec.pending and task.gpu_demand > 0 and self.moves_left() > 0
              and (placed.reason == INSUFFICIENT_CPU_MEMORY or (
                  placed.decision is not None and not placed.decision.skipped and not placed.decision.error))):
            t0 = time.perf_counter()
            self.stats.attempts += 1
            rescued = self._consolidate(task)
            self.stats.wall_s += time.perf_counter() - t0
            if rescued is not None:
                self.stats.rescued += 1
                return rescued
        return placed

    # ------------------------------------------------------------------------------------ pods without devices
    def _host(self, task: SimPod, node: str) -> None:
        """Remember a placed pod without devices (a victim for a pod short of CPU or memory on ``node``)."""
        key = pod_key(task.pod)
        self.hosted[key] = (task, node)
        self.hosted_on.setdefault(node, set()).add(key)

    def _unhost(self, key: str) -> tuple[SimPod, str]:
        """Take a pod without devices off its node (its CPU and memory freed, the engine told)."""
        task, node = self.hosted.pop(key)
        self.hosted_on[node].discard(key)
        self.engine.remove_pod(task.pod)
        i = self.row[node]
        self.cpu_free[i] += task.cpu_milli
        self.mem_free[i] += task.memory_mib
        return task, node

    def _rehost(self, task: SimPod, node: str) -> None:
        """Put a pod without devices (back) on ``node``."""
        pod = self.engine.admit(task.pod)
        self._consume(node, task)
        self.engine.upsert_pod({**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}})
        self._host(task, node)

    def _free_host(self, task: SimPod, pod: Mapping[str, Any]) -> Placed | None:
        """Make room for ``task`` on a node whose devices could take it but whose CPU or memory is short, by moving
        pods without devices (the fewest, largest CPU first) to nodes with room for them; the placement, or
        ``None``. Pods without devices on a node with free device share keep GPU pods off it once its CPU runs
        out; their replacements go where the scheduler puts such pods (under ``fgd``, whose growth counts the
        device share a pod's CPU strands, to nodes whose devices are taken)."""
        short = (self.cpu_free < task.cpu_milli) | (self.mem_free < task.memory_mib)
        names: list[str] = []
        victims: dict[str, list[str]] = {}
        for i in np.flatnonzero(short).tolist():
            node = self.names[i]
            keys = sorted((k for k in self.hosted_on.get(node, ()) if not pinned(self.hosted[k][0].pod)),
                          key=lambda k: (-self.hosted[k][0].cpu_milli, k))
            cpu_short = task.cpu_milli - self.cpu_free[i]
            mem_short = task.memory_mib - self.mem_free[i]
            chosen: list[str] = []
            for k in keys:
                if cpu_short <= 0 and mem_short <= 0:
                    break
                victim = self.hosted[k][0]
                if victim.cpu_milli <= 0 and victim.memory_mib <= 0:
                    continue
                chosen.append(k)
                cpu_short -= victim.cpu_milli
                mem_short -= victim.memory_mib
            if cpu_short <= 0 and mem_short <= 0 and len(chosen) <= self.moves_left():
                names.append(node)
                victims[node] = chosen
        if not names:
            return None
        decision = self.engine.schedule(pod, names, limit=1)  # the devices' fit and the policy's pick among them
        if not decision.ok or decision.node is None:
            return None
        node = decision.node
        moved = [self._unhost(k) for k in victims[node]]
        self.book(task, pod, decision, Placed(task.name, node, "", decision))
        placed = self.live[pod_key(pod)][3]
        done: list[str] = []
        for victim, _ in moved:  # each replacement where the scheduler puts a pod without devices (the replay's rule)
            again = Replay._place(self, victim)
            if again.node is None:
                for k in done:
                    self._unhost(k)
                self.evict(pod_key(pod))
                for v, old in moved:
                    self._rehost(v, old)
                return None
            self._host(victim, again.node)
            done.append(pod_key(victim.pod))
        self.stats.moves += len(moved)
        self.stats.host_moves += len(moved)
        self._hopeless.clear()
        return placed

    # ------------------------------------------------------------------------------------ moving pods
    def evict(self, key: str) -> tuple[SimPod, Mapping[str, Any], str, Placed]:
        """Unbook a placed pod (its CPU and memory too); returns what :meth:`restore` needs."""
        entry = self.live.pop(key)
        task, pod, node, _ = entry
        self.engine.unreserve(pod)
        i = self.row[node]
        self.cpu_free[i] += task.cpu_milli
        self.mem_free[i] += task.memory_mib
        self._reshare(node)
        return entry

    def book(self, task: SimPod, pod: Mapping[str, Any], decision: Decision, placed: Placed) -> None:
        assert decision.node is not None
        self.engine.reserve(pod, decision)
        self.engine.mark_placed(pod)
        placed.node, placed.decision = decision.node, decision
        self.live[pod_key(pod)] = (task, pod, decision.node, placed)
        self._consume(decision.node, task)
        self._reshare(decision.node)

    def restore(self, entry: tuple[SimPod, Mapping[str, Any], str, Placed], decision: Decision) -> None:
        """Put an evicted pod back exactly where it was (``decision``: its original one)."""
        task, pod, _, placed = entry
        self.book(task, pod, decision, placed)

    def replace_pod(self, task: SimPod, pod: Mapping[str, Any], placed: Placed) -> bool:
        """Place an evicted pod's replacement through the engine, on any node with room for its CPU and memory."""
        fits = (self.cpu_free >= task.cpu_milli) & (self.mem_free >= task.memory_mib)
        candidates = list(self.names_arr[fits])
        if not candidates:
            return False
        decision = self.engine.schedule(pod, candidates, limit=1)
        if decision.node is None:
            return False
        self.book(task, pod, decision, placed)
        return True

    def move_all(self, keys: Sequence[str], first: tuple[SimPod, Mapping[str, Any], Decision] | None = None,
                 accept: Callable[[Sequence[str]], bool] | None = None) -> bool:
        """Evict ``keys``, place ``first`` (a pending pod, on its decision) if given, then every evicted pod's
        replacement, largest first. All or nothing: when a replacement fits nowhere, or ``accept`` (given the moved
        keys, once every replacement is placed) says no, everything is put back."""
        originals = {k: self.live[k][3].decision for k in keys}
        evicted = [self.evict(k) for k in keys]
        placed_first: Mapping[str, Any] | None = None
        if first is not None:
            task, pod, decision = first
            decision = self.engine.schedule(pod, [decision.node or ""])  # fitted again on the emptied node
            i = self.row.get(decision.node or "")
            if (not decision.ok or i is None or self.cpu_free[i] < task.cpu_milli
                    or self.mem_free[i] < task.memory_mib):
                self._undo(evicted, originals, [])
                return False
            self.book(task, pod, decision, Placed(task.name, decision.node, "", decision))
            placed_first = pod
        redone: list[str] = []
        for entry in sorted(evicted, key=lambda e: (-e[0].gpu_demand, e[0].name)):
            task, pod, _, placed = entry
            if not self.replace_pod(task, pod, placed):
                if placed_first is not None:
                    self.evict(pod_key(placed_first))
                self._undo(evicted, originals, redone)
                return False
            redone.append(pod_key(pod))
        if accept is not None and not accept(keys):
            if placed_first is not None:
                self.evict(pod_key(placed_first))
            self._undo(evicted, originals, redone)
            return False
        self.stats.moves += len(keys)
        self.stats.way_moves += sum(1 for k in keys if k in self._ways)
        self._hopeless.clear()
        return True

    def _undo(self, evicted: Sequence[tuple[SimPod, Mapping[str, Any], str, Placed]],
              originals: Mapping[str, Decision | None], redone: Sequence[str]) -> None:
        for key in redone:
            self.evict(key)
        for entry in evicted:
            decision = originals[pod_key(entry[1])]
            assert decision is not None
            self.restore(entry, decision)

    # ------------------------------------------------------------------------------------ pending
    def _consolidate(self, task: SimPod) -> Placed | None:
        """Make room for ``task`` (which fits nowhere) by moving the fewest pods; the placement, or ``None``."""
        shape = (task.klass, task.cpu_milli, task.memory_mib)
        if shape in self._hopeless:
            self.stats.misses["shape already found hopeless"] += 1
            return None
        try:
            pod = self.engine.admit(task.pod)
        except (AdmissionDenied, AdmissionFailed):
            return None
        hosted = self._free_host(task, pod)
        if hosted is not None:
            return hosted
        left = self.moves_left()
        options = []
        self._survey()
        for node, gaps in self._closest_nodes(task):
            victims = self._victims(task, node, gaps, left)
            if victims is not None:
                options.append((len(victims), sum(self.live[k][0].gpu_demand for k in victims), node, victims))
        if not options:
            self.stats.misses["no movable pods make room"] += 1
        models = tuple(m.upper() for m in task.models)
        # A model-constrained pod's victims should not land on its models again (the next pod asking for them would
        # need the same moves): such a step is kept only when no other option works.
        accept = (lambda keys: not any(self._on_models(k, models) for k in keys)) if models else None
        for check in ([accept, None] if accept is not None else [None]):
            for _, _, node, keys in sorted(options)[:PENDING_TRIES]:
                with without(self.engine, keys):
                    decision = self.engine.schedule(pod, [node])
                if not decision.ok:
                    self.stats.misses["the engine's fit refuses the freed node"] += 1
                    continue
                if self.move_all(keys, (task, pod, decision), check):
                    return self.live[pod_key(pod)][3]
                self.stats.misses["a replacement fits nowhere" if check is None
                                  else "a victim's replacement takes the pod's models"] += 1
        # Usage only grows between moves (pods never leave), so a shape that no move helps now stays hopeless
        # until a move changes the picture: not trying it again saves most of the cost once the cluster is full.
        self._hopeless.add(shape)
        return None

    def run_planner(self, allowed: int) -> tuple[int, int]:
        """Plan at most ``allowed`` moves on the replay's state and apply them; (moves made, whole devices freed).

        The planner works on the replay's own engine (no copy of 1,213 nodes and thousands of pods): its trials book
        and unbook there and are undone by re-booking each pod's decision. To scale, each round tries only the groups
        on the :data:`MAX_GROUPS` least used devices (a device with few milli used is the cheapest to free), and a pod
        only goes to nodes with room for its CPU and memory as the engine counts them (kube-scheduler's
        NodeResourcesFit, which the replay plays). The moves are then applied in the planner's order through the
        engine's fit on the planned node; a move that no longer fits there (an earlier move took the room) is placed
        where the engine's policy puts it."""
        if allowed <= 0:
            return 0, 0
        engine, live = self.engine, self.live
        pods = {key: entry[1] for key, entry in live.items()}
        movable = {key for key in live if self.movable(key)}
        originals = {key: entry[3].decision for key, entry in live.items()}
        idle0 = idle_devices(engine)

        def restore(key: str) -> None:
            decision = originals[key]
            assert decision is not None
            engine.reserve(pods[key], decision)

        def targets(key: str, source: str) -> list[str]:
            cpu, mem = host_requests(pods[key])
            return [name for name, state in engine.nodes.items() if name != source
                    and state.host_total[0] - state.host_used[0] >= cpu
                    and state.host_total[1] - state.host_used[1] >= mem]

        search = MoveSearch(engine, pods, workload_mix(engine, pods.values()), restore=restore, targets=targets,
                            max_groups=MAX_GROUPS)
        planned = greedy_moves(search, pods, movable, allowed)
        for key, _, _ in planned:  # back to the replay's state, then the moves through the replay's books
            restore(key)
        moved = 0
        for key, _, target in planned:
            if key not in live:
                continue
            task, pod, _, placed = self.evict(key)
            fits = self.cpu_free[self.row[target]] >= task.cpu_milli and \
                self.mem_free[self.row[target]] >= task.memory_mib
            decision = engine.schedule(pod, [target]) if fits else None
            if decision is not None and decision.ok:
                self.book(task, pod, decision, placed)
            elif not self.replace_pod(task, pod, placed):
                restore_decision = originals[key]
                assert restore_decision is not None
                self.book(task, pod, restore_decision, placed)
                continue
            moved += 1
        return moved, idle_devices(engine) - idle0

    def _on_models(self, key: str, models: Sequence[str]) -> bool:
        """Does the placed pod hold a card of one of ``models``?"""
        booking = self.engine.ledger.get(key)
        if booking is None:
            return False
        usage = self.engine.nodes[booking.node].by_uuid
        return any(d.uuid in usage and any(m in usage[d.uuid].type.upper() for m in models)
                   for devs in booking.devices.values() for d in devs)

    def _victims(self, task: SimPod, node: str, gaps: Mapping[str, tuple[float, bool]],
                 left: int) -> list[str] | None:
        """The fewest movable pods whose shares on each card of ``gaps`` (card → milli short, whether its slots are
        all taken) cover what is short there (one pod at least on a card without a free slot), fewest milli moved
        among those, then as many more as the node's CPU and memory need for ``task`` (largest CPU first);
        ``None``: none within ``left`` moves and :data:`PENDING_VICTIMS` per card."""
        on_card: dict[str, list[tuple[str, float]]] = {}
        others: list[str] = []  # movable pods on the node's other cards (for its CPU and memory)
        for booking in self.engine.ledger.on_node(node):
            if booking.key not in self.survey.movers and booking.key not in self.survey.hops:
                continue
            share = float(self.live[booking.key][0].per_gpu)
            mine = False
            for devs in booking.devices.values():
                for d in devs:
                    if d.uuid in gaps:
                        on_card.setdefault(d.uuid, []).append((booking.key, share))
                        mine = True
            if not mine:
                others.append(booking.key)
        chosen: set[str] = set()
        for uuid, (short, slot) in sorted(gaps.items()):
            # pods already chosen for another card (a multi-card pod) count here too
            mine = [(k, sh) for k, sh in on_card.get(uuid, ()) if k in chosen]
            rest = [(k, sh) for k, sh in on_card.get(uuid, ()) if k not in chosen]
            need = short - sum(sh for _, sh in mine)
            if need <= 1e-9 and (mine or not slot):
                continue
            best: tuple[int, float, tuple[str, ...]] | None = None
            for size in range(1, min(PENDING_VICTIMS, len(rest)) + 1):
                for combo in itertools.combinations(rest, size):
                    total = sum(sh for _, sh in combo)
                    if total + 1e-9 >= need and (best is None or total < best[1]):
                        best = (size, total, tuple(k for k, _ in combo))
                if best is not None:
                    break
            if best is None:
                return None
            chosen.update(best[2])
        # the node's CPU and memory must take the pod once the victims are gone: more victims, largest CPU first
        i = self.row[node]
        cpu_short = task.cpu_milli - self.cpu_free[i] - sum(self.live[k][0].cpu_milli for k in chosen)
        mem_short = task.memory_mib - self.mem_free[i] - sum(self.live[k][0].memory_mib for k in chosen)
        if cpu_short > 0 or mem_short > 0:
            spare = sorted(({k for pods in on_card.values() for k, _ in pods} | set(others)) - chosen,
                           key=lambda k: (-self.live[k][0].cpu_milli, k))
            for k in spare:
                if cpu_short <= 0 and mem_short <= 0:
                    break
                chosen.add(k)
                cpu_short -= self.live[k][0].cpu_milli
                mem_short -= self.live[k][0].memory_mib
            if cpu_short > 0 or mem_short > 0:
                return None
        # two-hop victims: the pods that make way for them on another card go too
        avoid = {d.id for d in self.devices[i]}
        spent: dict[str, float] = {}
        for key in sorted(k for k in chosen if k in self.survey.hops):
            way = self.survey.make_way(key, avoid, chosen, spent)
            if way is None:
                return None
            card, pods = way
            chosen.update(pods)
            self._ways.update(pods)
            spent[card] = spent.get(card, 0.0) + float(self.live[key][0].per_gpu)
        if not chosen or len(chosen) > left:
            return None
        return sorted(chosen)

    def _survey(self) -> None:
        """The cluster as one attempt sees it (:class:`~hami_core.sim.survey.Survey`)."""

        def cards_of(key: str) -> list[str] | None:
            booking = self.engine.ledger.get(key) if self.movable(key) else None
            return None if booking is None else [d.uuid for devs in booking.devices.values() for d in devs]

        self._ways = set()
        self.survey = Survey(self.devices, self.live, cards_of, self.cpu_free, self.mem_free, self.device_share)

    def _closest_nodes(self, task: SimPod) -> list[tuple[str, dict[str, tuple[float, bool]]]]:
        """The :data:`PENDING_NODES` nodes the fewest device milli short of fitting the pod, with the cards it would
        take there (those short the least, among the cards the survey's movable pods can empty enough) and what each
        is short (a card whose slots are all taken counts one milli more: one pod must go). A node short of CPU or
        memory ranks after those short of device milli alone (victims may free CPU and memory too, :meth:`_victims`)."""
        models = tuple(m.upper() for m in task.models)
        need, k = task.per_gpu, max(task.num_gpu, 1)
        scored: list[tuple[float, str, dict[str, tuple[float, bool]]]] = []
        for i, devs in enumerate(self.devices):
            short: list[tuple[float, str, float, bool]] = []
            for d in devs:
                if not d.health or (models and not any(m in d.type.upper() for m in models)):
                    continue
                milli, slot = max(need - (FULL - self.device_share(d)), 0.0), d.used >= d.count
                movable = self.survey.movable_share
                if milli > movable.get(d.id, 0.0) + 1e-9 or (slot and d.id not in movable):
                    continue  # the pods that could go elsewhere do not free enough of this card (survey)
                short.append((milli + (1.0 if slot else 0.0), d.id, milli, slot))
            if len(short) < k:
                continue
            short.sort()
            best = short[:k]
            total = sum(g for g, _, _, _ in best)
            total += 0.0 if self.cpu_free[i] >= task.cpu_milli and self.mem_free[i] >= task.memory_mib else FULL
            if total > 0:
                scored.append((total, self.names[i], {u: (m, sl) for _, u, m, sl in best}))
        scored.sort(key=lambda s: (s[0], s[1]))
        return [(name, gaps) for _, name, gaps in scored[:PENDING_NODES]]


__all__ = ["PENDING", "DefragError", "DefragReplay", "DefragSpec", "DefragStats"]
