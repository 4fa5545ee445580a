"""One simulation run: place pods one by one through the real engine, never removing them.

The replay plays kube-scheduler's part around the extender: a pod only goes to nodes with enough free
CPU and memory (NodeResourcesFit); a pod without managed devices goes to the most allocated such node
under binpack and the least allocated under spread.
It records GPU allocation as demand arrives, failures by reason, and FGD fragmentation at checkpoints.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hami_core.engine.decision import Decision
from hami_core.engine.facade import Engine
from hami_core.engine.pods import pod_key
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.sim.fragmentation import FULL, FragmentationModel, TaskClass
from hami_core.sim.workload import SimPod
from hami_core.wire.keys import NODE_SCHEDULER_POLICY
from hami_core.wire.quantity import parse_quantity
from hami_core.wire.reasons import parse_reasons

INSUFFICIENT_CPU_MEMORY = "InsufficientCPUOrMemory"
ADMISSION_DENIED = "AdmissionDenied"
#: Arrived-demand steps (percent of capacity) at which the curve and fragmentation are recorded.
CHECKPOINT_STEP = 5.0
#: Where ``hami simulate`` puts pods without devices (``--cpu-pods``): as the node policy would (``policy``: binpack
#: packs them, spread spreads them, ``fgd`` ranks them as the FGD paper's simulator places every task), or as
#: kube-scheduler's default scoring does in a cluster, where HAMi's extender never sees them (``least-allocated``:
#: the node with the most free CPU and memory).
CPU_POD_PLACEMENTS = ("policy", "least-allocated")
#: ``--preemption``: victims are worked out on at most this many nodes per pod (kube-scheduler samples candidate
#: nodes too), each with an exact search over at most this many useful candidates.
PREEMPT_CANDIDATE_NODES = 10
PREEMPT_EXACT_LIMIT = 6
#: ... looked for in batches of this many nodes (kube-scheduler's minCandidateNodesAbsolute), from an offset that
#: moves on by a batch at each preemption, as kube-scheduler's random offset spreads its dry runs
PREEMPT_BATCH = 100


@dataclass(slots=True)
class Placed:
    pod: str
    node: str | None
    reason: str = ""
    decision: Decision | None = None
    #: ``--preemption``: the pods this one evicted to be placed, and the pod that later evicted this one
    preempted: tuple[str, ...] = ()
    evicted_by: str = ""


@dataclass(slots=True)
class RunResult:
    """Everything one run measured. Percentages are of total GPU capacity."""

    policy: str
    seed: int | None
    tasks: int = 0
    placed: int = 0
    failed: int = 0
    failed_by_reason: Counter[str] = field(default_factory=Counter)
    capacity_milli: int = 0
    arrived_milli: int = 0
    allocated_milli: float = 0.0
    ratio_at_100: float | None = None
    fragmentation_at_100: float | None = None
    #: the GPU pods placed at the 100 % reading, counted by what they ask ``(CPU, memory, GPUs, milli per GPU,
    #: models)``: ``--bound``'s ceiling for moves, which keep every one of them placed (hami_core.sim.bound)
    kept_at_100: dict[tuple[int, int, int, int, tuple[str, ...]], int] | None = None
    curve: list[tuple[float, float, float]] = field(default_factory=list)  # arrived %, allocated %, frag %
    per_model: dict[str, dict[str, float]] = field(default_factory=dict)
    node_allocation: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    decisions: int = 0
    placements: list[Placed] = field(default_factory=list)
    #: Device quota use at the end, per (namespace, resource) with a ResourceQuota limit.
    quotas: list[dict[str, Any]] = field(default_factory=list)
    #: The engine that ran, kept with the placements (single detailed runs) so its usage can be shown.
    engine: Any = field(default=None, repr=False)
    #: ``--preemption``: pods placed by evicting lower-priority ones, the pods evicted and the GPU milli they held
    preemptions: int = 0
    evicted: int = 0
    evicted_milli: int = 0
    #: ``--defrag``: what the defragmenter did (hami_core.sim.defrag.DefragStats.as_json)
    defrag: dict[str, Any] | None = None

    @property
    def final_ratio(self) -> float:
        return 100.0 * self.allocated_milli / self.capacity_milli if self.capacity_milli else 0.0

    @property
    def decisions_per_s(self) -> float:
        return self.decisions / self.wall_s if self.wall_s else 0.0


def _qty(value: Any, unit: float) -> float:
    try:
        return float(parse_quantity(value)) / unit if value is not None else 0.0
    except Exception:  # a node with an unreadable quantity offers nothing
        return 0.0


class Replay:
    """Places pods on one engine's cluster and measures; build one per run."""

    def __init__(self, engine: Engine, nodes: Sequence[Mapping[str, Any]], *, policy: str, seed: int | None,
                 classes: Sequence[TaskClass] = (), keep_placements: bool = False,
                 cpu_pods: str = "policy", preemption: bool = False) -> None:
        if cpu_pods not in CPU_POD_PLACEMENTS:
            raise ValueError(f"cpu_pods must be one of {', '.join(CPU_POD_PLACEMENTS)}, got {cpu_pods!r}")
        self.engine = engine
        self.cpu_pods = cpu_pods
        self.keep = keep_placements
        self.preemption = preemption
        # placed GPU pods by ledger key: (task, admitted pod, node, its placement), the victims preemption may pick
        self.live: dict[str, tuple[SimPod, Mapping[str, Any], str, Placed]] = {}
        self._preempt_offset = 0
        self.names: list[str] = []
        cpu, mem = [], []
        for node in nodes:
            status = engine.upsert_node(node)
            self.names.append(status.name)
            alloc = (node.get("status") or {}).get("allocatable") or {}
            cpu.append(_qty(alloc.get("cpu"), 1 / 1000) if "cpu" in alloc else np.inf)
            mem.append(_qty(alloc.get("memory"), 1024 * 1024) if "memory" in alloc else np.inf)
        self.cpu_free = np.array(cpu, dtype=float)
        self.mem_free = np.array(mem, dtype=float)
        self.cpu_total = self.cpu_free.copy()
        self.mem_total = self.mem_free.copy()
        self.row = {name: i for i, name in enumerate(self.names)}
        self.names_arr = np.array(self.names, dtype=object)
        self.devices = [[d for devs in engine.nodes[n].devices.values() for d in devs] for n in self.names]
        self.share: dict[str, float] = {}
        capacity = sum(len(devs) for devs in self.devices) * FULL
        self.use_workload(classes)
        self.result = RunResult(policy=policy, seed=seed, capacity_milli=int(capacity))
        self._next_checkpoint = 0.0

    def use_workload(self, classes: Sequence[TaskClass]) -> None:
        """Measure fragmentation against this workload distribution."""
        self.frag = FragmentationModel([[d.type for d in devs] for devs in self.devices], classes)

    # ------------------------------------------------------------------------------------ measures
    @staticmethod
    def device_share(d: Any) -> float:
        """Allocated share of a device in GPU milli: the larger of its core and memory occupancy."""
        cores = d.usedcores / d.totalcore if d.totalcore else 0.0
        mem = d.usedmem / d.totalmem if d.totalmem else 0.0
        return FULL * min(max(cores, mem), 1.0)

    def free_matrix(self) -> np.ndarray:
        width = self.frag.present.shape[1]
        out = np.zeros((len(self.names), width))
        for i, devs in enumerate(self.devices):
            for j, d in enumerate(devs):
                out[i, j] = FULL - self.device_share(d)
        return out

    def fragmentation(self) -> float:
        """Cluster fragmentation now, in percent of GPU capacity."""
        if not self.result.capacity_milli:
            return 0.0
        frag = self.frag.node_fragments(self.free_matrix(), self.cpu_free, self.mem_free).sum()
        return 100.0 * float(frag) / self.result.capacity_milli

    def _checkpoint(self) -> None:
        r = self.result
        if not r.capacity_milli:
            return
        arrived = 100.0 * r.arrived_milli / r.capacity_milli
        if r.ratio_at_100 is None and arrived >= 100.0:
            r.ratio_at_100 = r.final_ratio
            r.fragmentation_at_100 = self.fragmentation()
            kept = Counter((t.cpu_milli, t.memory_mib, t.num_gpu, t.per_gpu, t.models) for t, *_ in self.live.values()
                           if t.gpu_demand > 0)
            r.kept_at_100 = dict(kept)
            r.per_model = self.per_model()
        if arrived >= self._next_checkpoint:
            r.curve.append((round(arrived, 3), round(r.final_ratio, 3), round(self.fragmentation(), 3)))
            while self._next_checkpoint <= arrived:
                self._next_checkpoint += CHECKPOINT_STEP

    def per_model(self) -> dict[str, dict[str, float]]:
        totals: dict[str, list[float]] = {}
        for devs in self.devices:
            for d in devs:
                entry = totals.setdefault(d.type, [0.0, 0.0])
                entry[0] += 1
                entry[1] += self.device_share(d)
        return {model: {"gpus": int(n), "allocated_gpus": round(alloc / FULL, 3),
                        "allocation_ratio": round(100.0 * alloc / (n * FULL), 3)}
                for model, (n, alloc) in sorted(totals.items())}

    # ------------------------------------------------------------------------------------ placing
    def place(self, task: SimPod) -> Placed:
        r = self.result
        r.tasks += 1
        r.arrived_milli += task.gpu_demand
        placed = self._place(task)
        if placed.node is None:
            r.failed += 1
            r.failed_by_reason[placed.reason] += 1
        else:
            r.placed += 1
        if self.keep:
            r.placements.append(placed)
        self._checkpoint()
        return placed

    def _place(self, task: SimPod) -> Placed:
        engine, r = self.engine, self.result
        try:
            pod = engine.admit(task.pod)
        except (AdmissionDenied, AdmissionFailed) as exc:
            return Placed(task.name, None, f"{ADMISSION_DENIED}: {exc}")
        fits = (self.cpu_free >= task.cpu_milli) & (self.mem_free >= task.memory_mib)
        candidates = list(self.names_arr[fits])
        r.decisions += 1
        if not candidates:
            return Placed(task.name, None, INSUFFICIENT_CPU_MEMORY)
        decision = engine.schedule(pod, candidates, limit=1)
        if decision.skipped:
            idx = np.flatnonzero(fits)
            with np.errstate(divide="ignore", invalid="ignore"):
                free = np.nan_to_num(self.cpu_free[idx] / self.cpu_total[idx], nan=1.0) + np.nan_to_num(
                    self.mem_free[idx] / self.mem_total[idx], nan=1.0)
            # Pods without devices follow the node policy's direction too (cpu_pods "policy"): binpack packs them
            # onto the fullest node (kube-scheduler's MostAllocated), spread onto the emptiest (LeastAllocated).
            # Spreading CPU-only pods over GPU nodes would strand their GPUs for lack of CPU. In a cluster HAMi's
            # extender never sees them and kube-scheduler's default spreads them: cpu_pods "least-allocated".
            spread = self.cpu_pods == "least-allocated" or self._node_policy(pod) == "spread"
            node = self.names[int(idx[int(np.argmax(free) if spread else np.argmin(free))])]
            if decision.scores and self.cpu_pods == "policy":  # the node policy ranks every pod (fgd): its best
                node = decision.nodes[0]
            self._consume(node, task)
            # The engine counts every placed pod's CPU and memory (its scheduler watches all pods).
            engine.upsert_pod({**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}})
            return Placed(task.name, node, "", decision)
        victims: tuple[str, ...] = ()
        if decision.node is None and self.preemption and not decision.error:
            preempted = self._preempt(pod, task)
            if preempted is not None:
                decision, victims = preempted
        if decision.node is None:
            return Placed(task.name, None, decision.error or dominant_reason(decision.failed), decision)
        engine.reserve(pod, decision)
        engine.mark_placed(pod)
        placed = Placed(task.name, decision.node, "", decision, preempted=victims)
        self.live[pod_key(pod)] = (task, pod, decision.node, placed)
        self._consume(decision.node, task)
        self._reshare(decision.node)
        return placed

    def _reshare(self, node: str) -> None:
        """Bring the allocation measure up to date with the devices of ``node``."""
        r = self.result
        for usage in self.engine.nodes[node].by_uuid.values():
            new = self.device_share(usage)
            r.allocated_milli += new - self.share.get(usage.id, 0.0)
            self.share[usage.id] = new

    def _preempt(self, pod: Mapping[str, Any], task: SimPod) -> tuple[Decision, tuple[str, ...]] | None:
        """kube-scheduler's preemption with hami's device-aware victim choice (hami_core.engine.preempt): among up
        to :data:`PREEMPT_CANDIDATE_NODES` nodes where some set of lower-priority pods makes room (CPU and memory
        included), the node whose victims rank best; the victims are evicted (not resubmitted) and the pod placed.
        A node short of CPU or memory alone is not preempted on: the victims are chosen for the devices."""
        from hami_core.engine.preempt import VictimChoice, rank_choice

        choices: list[VictimChoice] = []
        # kube-scheduler's dry run looks at nodes from a rotating offset, in batches, until it has enough candidates
        start = self._preempt_offset % len(self.names) if self.names else 0
        self._preempt_offset += PREEMPT_BATCH
        order = self.names[start:] + self.names[:start]
        for b in range(0, len(order), PREEMPT_BATCH):
            if len(choices) >= PREEMPT_CANDIDATE_NODES:
                break
            self._preempt_batch(pod, task, order[b:b + PREEMPT_BATCH], choices)
        if not choices:
            return None
        return self._evict_for(pod, task, min(choices, key=rank_choice))

    def _preempt_batch(self, pod: Mapping[str, Any], task: SimPod, nodes: list[str], choices: list[Any]) -> None:
        from hami_core.engine.preempt import choose_victims, helpful_nodes

        engine = self.engine
        for node, candidates in helpful_nodes(engine, pod, nodes).items():
            i = self.row[node]
            freeable = [self.live[c.key][0] for c in candidates if c.key in self.live]
            if (self.cpu_free[i] + sum(t.cpu_milli for t in freeable) < task.cpu_milli
                    or self.mem_free[i] + sum(t.memory_mib for t in freeable) < task.memory_mib):
                continue
            choice = choose_victims(engine, pod, node, candidates, exact_limit=PREEMPT_EXACT_LIMIT, helpful=True)
            if choice.fits and choice.victims:
                freed = [self.live[v.key][0] for v in choice.victims]
                if (self.cpu_free[i] + sum(t.cpu_milli for t in freed) >= task.cpu_milli
                        and self.mem_free[i] + sum(t.memory_mib for t in freed) >= task.memory_mib):
                    choices.append(choice)
                    if len(choices) >= PREEMPT_CANDIDATE_NODES:
                        return

    def _evict_for(self, pod: Mapping[str, Any], task: SimPod, best: Any) -> tuple[Decision, tuple[str, ...]] | None:
        from hami_core.engine.preempt import without

        engine = self.engine
        with without(engine, [v.key for v in best.victims]):
            decision = engine.schedule(pod, [best.node])
        if not decision.ok:
            return None
        r = self.result
        names = []
        before = r.allocated_milli
        for victim in best.victims:
            vtask, vpod, vnode, vplaced = self.live.pop(victim.key)
            names.append(vtask.name)
            vplaced.evicted_by = task.name
            engine.remove_pod(vpod)
            i = self.row[vnode]
            self.cpu_free[i] += vtask.cpu_milli
            self.mem_free[i] += vtask.memory_mib
            r.evicted += 1
        self._reshare(best.node)
        r.evicted_milli += round(before - r.allocated_milli)  # the GPU share the victims held, as measured
        r.preemptions += 1
        return decision, tuple(names)

    def _node_policy(self, pod: Mapping[str, Any]) -> str:
        annos = (pod.get("metadata") or {}).get("annotations") or {}
        return annos.get(NODE_SCHEDULER_POLICY) or self.engine.config.scheduler.node_scheduler_policy

    def _consume(self, node: str, task: SimPod) -> None:
        i = self.row[node]
        self.cpu_free[i] -= task.cpu_milli
        self.mem_free[i] -= task.memory_mib

    def run(self, tasks: Sequence[SimPod], progress: Callable[[int], None] | None = None) -> RunResult:
        t0 = time.perf_counter()
        self._checkpoint()
        for i, task in enumerate(tasks):
            self.place(task)
            if progress is not None and i % 256 == 255:
                progress(256)
        if progress is not None:
            progress(len(tasks) % 256)
        r = self.result
        r.wall_s = time.perf_counter() - t0
        arrived = 100.0 * r.arrived_milli / r.capacity_milli if r.capacity_milli else 0.0
        if not r.curve or r.curve[-1][0] != round(arrived, 3):
            r.curve.append((round(arrived, 3), round(r.final_ratio, 3), round(self.fragmentation(), 3)))
        if not r.per_model:
            r.per_model = self.per_model()
        if self.keep:
            r.engine = self.engine
        r.quotas = [{"namespace": u.namespace, "resource": u.resource, "used": u.used, "limit": u.limit}
                    for u in self.engine.quota_usage() if u.limit is not None]
        r.node_allocation = {name: round(sum(self.device_share(d) for d in devs) / (len(devs) * FULL), 4)
                             for name, devs in zip(self.names, self.devices, strict=True) if devs}
        return r


def dominant_reason(failed: Mapping[str, str]) -> str:
    """The reason word that rejected the most nodes.

    Device-level words (``CardInsufficientMemory`` in ``8/8 CardInsufficientMemory``) come first: a node
    rejected as a whole (``NodeInsufficientDevice``, ``node unregistered``) usually just lacks that kind
    of device, which says little about why the pod did not fit where it could have gone.
    """
    card: Counter[str] = Counter()
    node: Counter[str] = Counter()
    # a saturated cluster rejects most nodes with a handful of texts: each distinct text is parsed once
    for reason, times in Counter(failed.values()).items():
        words = parse_reasons(reason)
        if words:
            for word in words:
                card[word] += times
        else:
            node[reason] += times
    counts = card or node
    if not counts:
        return "NoCandidateNode"
    return max(sorted(counts), key=lambda w: counts[w])


__all__ = ["Replay", "RunResult", "dominant_reason"]
