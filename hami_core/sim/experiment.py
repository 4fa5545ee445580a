"""Experiments: inputs x policies x seeds → runs, and the summary of each policy across seeds."""

from __future__ import annotations

import multiprocessing
import random
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from queue import Empty
from typing import Any

from hami_core.engine.config import EngineConfig, SchedulerConfig
from hami_core.engine.facade import Engine
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.sim.errors import PolicyError
from hami_core.sim.fragmentation import workload_classes
from hami_core.sim.mix import MIX_SOURCES, trace_mix
from hami_core.sim.replay import CPU_POD_PLACEMENTS, Replay, RunResult
from hami_core.sim.workload import PROTOCOLS, SimPod, from_pod, inflate, node_order


@dataclass(frozen=True, slots=True)
class Policy:
    """A node policy and a GPU policy, run together; ``label`` is how reports name the pair."""

    label: str
    node: str
    gpu: str
    #: ``hami`` (the extender with these policies) or ``dra`` (kube-scheduler's DRA allocator, hami_core.sim.dra)
    allocator: str = "hami"


def resolve_policies(spec: str, engine: Engine) -> list[Policy]:
    """Parse ``binpack,spread,binpack/spread`` against the policies the plugins declare.

    Each item is ``NODE/GPU`` (``+`` chains GPU tokens: ``binpack/binpack+numa``) or a single name,
    which sets both levels where it names both (``binpack``), else the level it names; the other
    level keeps the configured default.
    """
    offered = engine.policies()
    node_names = {p.name for p in offered if p.kind == "node"}
    gpu_names = {p.name for p in offered if p.kind == "gpu"}
    defaults = engine.config.scheduler
    out: list[Policy] = []

    def unknown(kind: str, name: str, names: set[str]) -> PolicyError:
        return PolicyError(f"--policy: unknown {kind} policy {name!r}; available {kind} policies: "
                           f"{', '.join(sorted(names))}")

    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        if "/" in item:
            node, gpu = item.split("/", 1)
            gpu = gpu.replace("+", ",")
            if node not in node_names:
                raise unknown("node", node, node_names)
            bad = [t for t in gpu.split(",") if t not in gpu_names]
            if bad:
                raise unknown("GPU", bad[0], gpu_names)
            out.append(Policy(item, node, gpu))
        elif item in node_names:
            out.append(Policy(item, item, item if item in gpu_names else defaults.gpu_scheduler_policy))
        elif item in gpu_names:
            out.append(Policy(item, defaults.node_scheduler_policy, item))
        else:
            raise unknown("node or GPU", item, node_names | gpu_names)
    if not out:
        raise PolicyError("--policy: no policy given")
    return out


#: Runs (policies x seeds) an experiment may have without ``--force``: past it a seed range is most likely a typo
#: (``42-5100`` for ``42-51``) that would run for days.
MAX_RUNS = 1000
#: Seeds a ``--seeds`` spec may name even with ``--force``: the list is built in memory before anything runs.
MAX_SEEDS = 100_000


def parse_seeds(text: str, *, limit: int = MAX_SEEDS) -> list[int]:
    """``42`` → [42]; ``42-51`` → [42..51]; ``1,5,9`` → [1, 5, 9]. More than ``limit`` seeds is an error, found
    before the list is built (``0-999999999999`` must not exhaust memory)."""
    ranges: list[tuple[int, int]] = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise PolicyError(f"--seeds: expected N, N-M or a comma list of non-negative integers, got {text!r}")
        ranges.append((int(m.group(1)), int(m.group(2) or m.group(1))))
    count = sum(hi - lo + 1 for lo, hi in ranges)
    if count > limit:
        raise PolicyError(f"--seeds {text}: {count} seeds, more than {limit}" + (
            " (--force allows more)" if limit < MAX_SEEDS else ""))
    return [seed for lo, hi in ranges for seed in range(lo, hi + 1)]


def sim_pods(engine: Engine, pods: Sequence[Mapping[str, Any]]) -> list[SimPod]:
    """YAML pods as simulator tasks (their requests as admission would leave them)."""
    out = []
    for pod in pods:
        try:
            requests = engine.requests(engine.admit(pod))
        except (AdmissionDenied, AdmissionFailed):
            requests = engine.requests(pod)
        out.append(from_pod(pod, requests))
    return out


@dataclass(frozen=True, slots=True)
class Experiment:
    """What to run: a cluster, a task list, policies, and either arrival order or seeded inflation."""

    config: EngineConfig
    plugins: Any
    nodes: Sequence[Mapping[str, Any]]
    tasks: Sequence[SimPod]
    policies: Sequence[Policy]
    seeds: Sequence[int] | None = None  # None: arrival order as given
    inflate: float = 1.3
    keep_placements: bool = False
    #: ResourceQuota objects of the cluster: a pod over its namespace's device quota fails (ResourceQuotaNotFit).
    quotas: Sequence[Mapping[str, Any]] = ()
    #: Where the ``fgd`` policy's workload mix comes from (:data:`~hami_core.sim.mix.MIX_SOURCES`): ``trace`` and
    #: ``paper`` give it the task list's classes up front (``scheduler.fgd.workload``), as the FGD paper's simulator
    #: gives its typical pods (``paper``: with that simulator's renormalised weights).
    fgd_mix: str = "online"
    #: How a seed draws its task list and node order (:data:`~hami_core.sim.workload.PROTOCOLS`).
    protocol: str = "shuffled"
    #: Where pods without devices go (:data:`~hami_core.sim.replay.CPU_POD_PLACEMENTS`).
    cpu_pods: str = "policy"
    #: ``--preemption``: a pod that fits nowhere evicts the fewest lower-priority pods whose devices it needs
    preemption: bool = False
    #: ``--defrag``: when the defragmenter runs and its budget (:class:`~hami_core.sim.defrag.DefragSpec`)
    defrag: Any = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise PolicyError(f"protocol {self.protocol!r}: expected one of {', '.join(PROTOCOLS)}")
        if self.fgd_mix not in MIX_SOURCES:
            raise PolicyError(f"fgd_mix {self.fgd_mix!r}: expected one of {', '.join(MIX_SOURCES)}")
        if self.cpu_pods not in CPU_POD_PLACEMENTS:
            raise PolicyError(f"cpu_pods {self.cpu_pods!r}: expected one of {', '.join(CPU_POD_PLACEMENTS)}")

    def engine(self, policy: Policy, mix: Sequence[Mapping[str, Any]] = ()) -> Engine:
        """An engine running ``policy``; ``mix``: ``scheduler.fgd.workload`` entries to give it (:meth:`given_mix`)."""
        sched = self.config.scheduler.model_dump()
        sched.update(node_scheduler_policy=policy.node, gpu_scheduler_policy=policy.gpu)
        if mix:
            sched["fgd"] = {**sched["fgd"], "workload": list(mix)}
        cfg = replace(self.config, scheduler=SchedulerConfig.model_validate(sched))
        engine = Engine(cfg, plugins=self.plugins)
        for quota in self.quotas:
            engine.upsert_quota(quota)
        return engine

    def given_mix(self) -> list[dict[str, Any]]:
        """The fgd mix given up front: the task list's classes for ``fgd_mix`` ``trace`` or ``paper`` (weights
        renormalised to 1), else none (online)."""
        if self.fgd_mix == "online":
            return []
        return self.task_mix(normalise=self.fgd_mix == "paper")

    def task_mix(self, *, normalise: bool = False) -> list[dict[str, Any]]:
        """The task list's classes as ``scheduler.fgd.workload`` entries (:func:`~hami_core.sim.mix.trace_mix`)."""
        probe = Engine(self.config, plugins=self.plugins)
        for quota in self.quotas:  # pods over their namespace's quota never arrive
            probe.upsert_quota(quota)
        return trace_mix(probe, self.tasks, self.config.scheduler.fgd.coverage, normalise=normalise)

    def task_list(self, seed: int | None, capacity: int) -> list[SimPod]:
        if seed is None:
            return list(self.tasks)
        return inflate(self.tasks, capacity, self.inflate, random.Random(seed), self.protocol)

    def nodes_for(self, seed: int | None) -> Sequence[Mapping[str, Any]]:
        """The cluster a seed runs on: the nodes as given, or renamed into a random order (``paper`` protocol)."""
        if seed is None or self.protocol != "paper":
            return self.nodes
        return node_order(self.nodes, seed)

    def plan(self) -> list[tuple[Policy, int | None]]:
        """The runs, in report order: every policy for the first seed, then for the next."""
        return [(policy, seed) for seed in (self.seeds if self.seeds is not None else [None])
                for policy in self.policies]

    def run_one(self, policy: Policy, seed: int | None, mix: Sequence[Mapping[str, Any]] = (),
                progress: Callable[[float], None] | None = None,
                task_lists: dict[int | None, list[SimPod]] | None = None) -> RunResult:
        """One run; ``progress`` gets the share of this run done since its last call (0..1 in total);
        ``task_lists`` caches each seed's task list across the policies of a serial experiment."""
        replay_class = Replay
        if policy.allocator == "dra":  # kube-scheduler's DRA allocator instead of the extender (hami_core.sim.dra)
            from hami_core.sim.dra import DraReplay

            replay_class = DraReplay
        extra: dict[str, Any] = {}
        if self.defrag is not None:  # the replay with the defragmenter in it (hami_core.sim.defrag)
            from hami_core.sim.defrag import DefragReplay

            replay_class, extra = DefragReplay, {"defrag": self.defrag}
        replay = replay_class(self.engine(policy, mix), self.nodes_for(seed), policy=policy.label, seed=seed,
                              keep_placements=self.keep_placements, cpu_pods=self.cpu_pods,
                              preemption=self.preemption, **extra)
        cache = task_lists if task_lists is not None else {}
        if seed not in cache:
            cache[seed] = self.task_list(seed, replay.result.capacity_milli)
        tasks = cache[seed]
        replay.use_workload(workload_classes(tasks))
        tick = None
        if progress is not None:
            n = max(len(tasks), 1)

            def tick(k: int) -> None:
                progress(k / n)
        result = replay.run(tasks, tick)
        return result

    def run(self, progress: Callable[[float], None] | None = None, *, jobs: int = 1,
            on_done: Callable[[int, int], None] | None = None) -> list[RunResult]:
        """Every run of :meth:`plan`, in that order, ``jobs`` at a time.

        ``progress`` gets shares of runs as they advance (the whole experiment is ``len(plan())``), ``on_done``
        (runs done, runs in all) after each run. With ``jobs`` > 1 each run goes to its own process (spawned, so
        the same on every platform); the workers build the installed plugins from their entry points, as
        ``hami simulate`` does, since a plugin manager does not travel between processes. A run draws everything
        from its seed, so the results are those of the serial experiment (timings aside).
        """
        plan = self.plan()
        mix = self.given_mix()
        if jobs <= 1 or len(plan) <= 1 or self.keep_placements:  # placements hold the engine: in-process only
            task_lists: dict[int | None, list[SimPod]] = {}
            results = []
            for k, (policy, seed) in enumerate(plan, 1):
                results.append(self.run_one(policy, seed, mix, progress, task_lists))
                if on_done is not None:
                    on_done(k, len(plan))
            return results
        return _run_parallel(replace(self, plugins=None), plan, mix, min(jobs, len(plan)), progress, on_done)


#: The experiment a worker process runs (set once per worker by :func:`_init_worker`).
_WORKER: dict[str, Any] = {}


def _init_worker(experiment: Experiment, mix: Sequence[Mapping[str, Any]], queue: Any) -> None:
    from hami_core.plugins.manager import get_plugin_manager

    _WORKER.update(experiment=replace(experiment, plugins=get_plugin_manager()), mix=mix, queue=queue)


def _run_item(index: int, policy: Policy, seed: int | None) -> RunResult:
    queue = _WORKER["queue"]

    def report(share: float) -> None:
        queue.put((index, share))

    return _WORKER["experiment"].run_one(policy, seed, _WORKER["mix"], report if queue is not None else None)


def _run_parallel(experiment: Experiment, plan: Sequence[tuple[Policy, int | None]], mix: Sequence[Mapping[str, Any]],
                  jobs: int, progress: Callable[[float], None] | None,
                  on_done: Callable[[int, int], None] | None) -> list[RunResult]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue() if progress is not None else None
    results: list[RunResult | None] = [None] * len(plan)
    shown = [0.0] * len(plan)  # share of each run the bar has been given

    def drain() -> None:
        while queue is not None and progress is not None:
            try:
                index, share = queue.get_nowait()
            except Empty:
                return
            if results[index] is None:  # a report that arrives after its run's result is already counted
                shown[index] += share
                progress(share)

    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_worker,
                             initargs=(experiment, mix, queue)) as pool:
        pending = {pool.submit(_run_item, i, policy, seed): i for i, (policy, seed) in enumerate(plan)}
        done_count = 0
        try:
            while pending:
                finished, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                drain()
                for future in finished:
                    index = pending.pop(future)
                    results[index] = future.result()
                    if progress is not None:  # the rest of its share, whatever reports are still in the queue
                        progress(max(1.0 - shown[index], 0.0))
                    done_count += 1
                    if on_done is not None:
                        on_done(done_count, len(plan))
        except BaseException:  # an error or Ctrl-C: do not start the runs still queued
            for future in pending:
                future.cancel()
            raise
    return [r for r in results if r is not None]


def _stats(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "std": 0.0, "min": 0.0, "max": 0.0}
    return {"mean": round(statistics.fmean(values), 3),
            "std": round(statistics.pstdev(values), 3) if len(values) > 1 else 0.0,
            "min": round(min(values), 3), "max": round(max(values), 3)}


def summarize(runs: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per policy, across seeds: mean and spread of the figures of merit."""
    by_policy: dict[str, list[RunResult]] = {}
    for r in runs:
        by_policy.setdefault(r.policy, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for policy, rs in by_policy.items():
        at100 = [r.ratio_at_100 for r in rs if r.ratio_at_100 is not None]
        frag = [r.fragmentation_at_100 for r in rs if r.fragmentation_at_100 is not None]
        out[policy] = {
            "runs": len(rs),
            "gpu_allocation_ratio_at_100": _stats(at100)["mean"] if at100 else None,
            "gpu_allocation_ratio_at_100_stats": _stats(at100) if at100 else None,
            "final_gpu_allocation_ratio": _stats([r.final_ratio for r in rs])["mean"],
            "fragmentation_ratio_at_100": _stats(frag)["mean"] if frag else None,
            "placed": _stats([float(r.placed) for r in rs])["mean"],
            "failed": _stats([float(r.failed) for r in rs])["mean"],
            "wall_s": _stats([r.wall_s for r in rs])["mean"],
            "decisions_per_s": _stats([r.decisions_per_s for r in rs])["mean"],
        }
        moved = [r.defrag for r in rs if r.defrag is not None and r.defrag.get("moves_at_100") is not None]
        if moved:  # --defrag: moves made by 100 % arrived demand, and as a share of the pods running then
            out[policy]["defrag_moves_at_100"] = _stats([float(d["moves_at_100"]) for d in moved])["mean"]
            out[policy]["defrag_moved_percent_at_100"] = _stats([d["moved_percent_at_100"] or 0.0
                                                                 for d in moved])["mean"]
    return out
