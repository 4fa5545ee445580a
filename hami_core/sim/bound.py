"""``hami simulate --bound``: the ceiling, an upper bound on the GPU allocation ratio any placement could reach.

The headline metric (:class:`~hami_core.sim.replay.Replay`) is read right after the first pod that takes the arrived
GPU demand to 100 % of capacity; a pod that fits nowhere is skipped, never queued. So a policy's figure is the GPU
demand of *some* subset of that arrived prefix that fits the cluster at once. The bound is the most GPU demand any
subset of the prefix could place, online or offline, relaxed so that it solves in seconds:

* ``exact`` (small instances): the placement problem itself as an integer program, per node and per GPU (a pod of
  ``k`` GPUs with share ``s`` takes ``s`` on ``k`` distinct GPUs of one node, CPU and memory per node, the models
  its ``use-gputype`` allows, at most ``split`` tasks per GPU). Its optimum *is* the best placement.
* ``classes`` (openb-sized ones): a linear program. Pods are aggregated into classes (same CPU, memory, GPU count,
  share, models), nodes into types (same CPU, memory, GPU count, model, split); ``x[c, t]`` >= 0 is how many pods
  of class ``c`` go to nodes of type ``t`` (0 where one pod of ``c`` fits no such node), at most the class's
  count, and per type only what each of its ``N`` nodes must satisfy, summed: CPU, memory, GPU milli and tasks
  within ``N`` times one node's, and, for each dual feasible function ``f`` (``sum a_i <= 1`` implies
  ``sum f(a_i) <= 1``, Fekete and Schepers 2001), ``sum f(size)`` at most ``N`` per node dimension (CPU, memory,
  GPU milli, each as a share of one node) and at most ``N * G`` per GPU (each pod's share of one GPU, on
  ``num_gpu`` GPUs). The counts of any real placement satisfy all of these, so the LP's optimum is at least the
  best placement's allocation.

The result is rounded up, never down. ``docs/simulation.md`` ("The ceiling") has the argument and the figures.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import HamiError
from hami_core.sim.experiment import Experiment
from hami_core.sim.workload import SimPod
from hami_core.wire.quantity import parse_quantity

#: GPU milli of one whole GPU (the replay's ``FULL``, as an integer so that sizes stay exact fractions)
MILLI = 1000
#: ``--bound`` methods: auto picks ``exact`` when the per-node program is small (:data:`EXACT_LIMIT`).
METHODS = ("auto", "exact", "classes")
#: ``auto`` solves the per-node program when nodes x pod classes is at most this; past it, ``classes``.
EXACT_LIMIT = 400
#: Seconds HiGHS may search one seed's integer program; when it stops early the bound is its proven dual bound.
TIME_LIMIT_S = 10.0
#: ``epsilon`` of the Fekete-Schepers functions f_eps(a) = 1 if a > 1 - eps, a if eps <= a <= 1 - eps, 0 if a < eps
EPSILONS = (Fraction(1, 10), Fraction(1, 5), Fraction(1, 4), Fraction(1, 3), Fraction(2, 5))
#: ``k`` of the functions u_k(a) = a if (k + 1) a is an integer, else floor((k + 1) a) / k (k = 1: the halves)
U_KS = (1, 2, 3, 4)


class BoundError(HamiError):
    """The bound cannot be computed for these inputs (what is missing, in one line)."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What the bound knows of one node: allocatable CPU and memory (None: unlimited) and its GPUs."""

    cpu_milli: int | None
    memory_mib: int | None
    gpus: int
    #: the GPUs' type as registered (``NVIDIA-V100M16``); ``use-gputype`` entries match it as the engine does
    model: str = ""
    #: tasks one GPU may hold (the device's registered count, HAMi's deviceSplitCount)
    split: int = 10


@dataclass(frozen=True, slots=True)
class PodClass:
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    per_gpu: int
    models: tuple[str, ...]
    count: int

    @property
    def demand(self) -> int:
        return self.num_gpu * self.per_gpu


@dataclass(frozen=True, slots=True)
class Bound:
    """One seed's ceiling. Ratios are percent of GPU capacity."""

    seed: int | None
    #: the upper bound on GPU allocation at 100 % arrived demand (None when the demand never got there)
    ratio_at_100: float | None
    method: str
    #: the method's program was solved to optimality (``exact``: the bound is the best placement itself)
    optimal: bool
    #: min(100, arrived GPU demand): the bound that knows nothing of the cluster's shape
    trivial: float
    arrived: float
    pods: int
    gpu_pods: int
    classes: int
    node_types: int
    wall_s: float

    def as_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "gpu_allocation_ratio_at_100": self.ratio_at_100, "method": self.method,
                "optimal": self.optimal, "trivial": self.trivial, "arrived": self.arrived, "pods": self.pods,
                "gpu_pods": self.gpu_pods, "classes": self.classes, "node_types": self.node_types,
                "wall_s": self.wall_s}


def node_specs(nodes: Sequence[Mapping[str, Any]], devices: Sequence[Sequence[Any]]) -> list[NodeSpec]:
    """The nodes as the replay sees them: Node objects' allocatable CPU and memory, and each node's registered
    devices (``devices[i]``: the usage objects the engine keeps for node ``i``, with ``type`` and ``count``)."""
    out = []
    for node, devs in zip(nodes, devices, strict=True):
        alloc = (node.get("status") or {}).get("allocatable") or {}
        cpu = _quantity(alloc.get("cpu"), 1000) if "cpu" in alloc else None
        mem = _quantity(alloc.get("memory"), Fraction(1, 1024 * 1024)) if "memory" in alloc else None
        types = {d.type for d in devs}
        if len(types) > 1:
            name = (node.get("metadata") or {}).get("name")
            raise BoundError(f"--bound: node {name} has GPUs of several models ({', '.join(sorted(types))}); the "
                             "bound models one model per node")
        split = min((int(d.count) for d in devs), default=0)
        out.append(NodeSpec(cpu, mem, len(devs), next(iter(types), ""), split))
    return out


def _quantity(value: Any, scale: Fraction | int) -> int:
    # rounded down: a node offers no more than it declares, and the replay compares in the same units
    return math.floor(Fraction(parse_quantity(value)) * scale)


def arrived_prefix(tasks: Sequence[SimPod], capacity_milli: int) -> list[SimPod] | None:
    """The tasks up to and including the one that takes arrived GPU demand to ``capacity_milli`` (the replay reads
    its ratio right after placing that one), or None when the demand never gets there."""
    total = 0
    if capacity_milli <= 0:
        return None
    for i, task in enumerate(tasks):
        total += task.gpu_demand
        if total >= capacity_milli:
            return list(tasks[:i + 1])
    return None


def pod_classes(pods: Sequence[SimPod]) -> list[PodClass]:
    """GPU pods grouped by what they ask; CPU-only pods are left out (a placement that skips them loses no GPU
    allocation and frees CPU and memory, so the best placement may as well skip them)."""
    counts = Counter((p.cpu_milli, p.memory_mib, p.num_gpu, p.per_gpu, p.models) for p in pods if p.gpu_demand > 0)
    return [PodClass(*key, count=n) for key, n in sorted(counts.items())]


def _allowed(models: tuple[str, ...], card: str) -> bool:
    # the engine's use-gputype rule (hami_core.plugins.helpers.Selection.type_ok): the upper-cased card type
    # contains an entry
    return not models or any(m.upper() in card.upper() for m in models)


def _fits(c: PodClass, n: NodeSpec) -> bool:
    return (c.num_gpu <= n.gpus and c.per_gpu <= MILLI and n.split >= 1 and _allowed(c.models, n.model)
            and (n.cpu_milli is None or c.cpu_milli <= n.cpu_milli)
            and (n.memory_mib is None or c.memory_mib <= n.memory_mib))


def _dff_family() -> list[Callable[[Fraction], Fraction]]:
    """Dual feasible functions, evaluated exactly (a float at a threshold could count an item as bigger than it is,
    which would cut off real placements)."""
    def f_eps(eps: Fraction) -> Callable[[Fraction], Fraction]:
        return lambda a: Fraction(1) if a > 1 - eps else (a if a >= eps else Fraction(0))

    def u_k(k: int) -> Callable[[Fraction], Fraction]:
        return lambda a: a if ((k + 1) * a).denominator == 1 else Fraction(math.floor((k + 1) * a), k)

    return [f_eps(e) for e in EPSILONS] + [u_k(k) for k in U_KS]


def upper_bound(nodes: Sequence[NodeSpec], pods: Sequence[SimPod], *, method: str = "auto",
                time_limit: float = TIME_LIMIT_S) -> tuple[float, str, bool]:
    """At least the most GPU milli any placement of a subset of ``pods`` on ``nodes`` could allocate: (that bound,
    the method used, whether its program was solved to optimality; ``exact`` and optimal: the best placement's)."""
    if method not in METHODS:
        raise BoundError(f"--bound method {method!r}: expected one of {', '.join(METHODS)}")
    classes = pod_classes(pods)
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    if not classes or not gpu_nodes:
        return 0.0, "exact" if method == "auto" else method, True
    if method == "auto":
        method = "exact" if len(gpu_nodes) * len(classes) <= EXACT_LIMIT else "classes"
    solve = _exact if method == "exact" else _by_classes
    milli, optimal = solve(gpu_nodes, classes, time_limit)
    demand = sum(c.demand * c.count for c in classes)
    # any placement allocates a whole number of milli, at most the solver's bound give or take its tolerances
    # (1e-7 relative in HiGHS; 1e-6 here): the largest whole number within that is a bound too
    return float(min(math.floor(milli * (1 + 1e-6) + 1e-6), demand)), method, optimal


def require_solver() -> None:
    """Fail early, in one line, when the solver the bound needs is not installed."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        raise BoundError("--bound needs scipy (HiGHS through scipy.optimize): pip install 'hami-core[sim]'") from None


def _solve(objective: list[float], rows: list[tuple[dict[int, float], float, float]], upper: list[float],
           time_limit: float, *, integral: bool) -> tuple[float, bool]:
    """Maximise ``objective . x`` over ``0 <= x <= upper`` (integers when ``integral``) with ``lo <= row . x <= hi``;
    (an upper bound on that maximum: HiGHS's dual bound, whether the search proved it optimal)."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    data, cols, ptr, lo, hi = [], [], [0], [], []
    for coeffs, low, high in rows:
        for j, v in coeffs.items():
            cols.append(j)
            data.append(v)
        ptr.append(len(cols))
        lo.append(low)
        hi.append(high)
    n = len(objective)
    matrix = csr_array((data, cols, ptr), shape=(len(rows), n))
    res = milp(-np.array(objective), integrality=np.ones(n) if integral else np.zeros(n),
               bounds=Bounds(np.zeros(n), np.array(upper)),
               constraints=[LinearConstraint(matrix, np.array(lo), np.array(hi))],
               options={"time_limit": time_limit, "mip_rel_gap": 0.0})
    dual = getattr(res, "mip_dual_bound", None)
    if dual is None or not math.isfinite(dual):
        if res.status != 0 or res.fun is None:  # no proof of anything: fall back to the demand itself
            return float(np.dot(objective, upper)), False
        dual = res.fun
    # HiGHS minimises -objective: its dual bound is a lower bound on that, so -dual bounds the maximum from above
    return float(-dual), res.status == 0


def _by_classes(nodes: Sequence[NodeSpec], classes: Sequence[PodClass], time_limit: float) -> tuple[float, bool]:
    types = Counter(nodes)
    dffs = _dff_family()
    var: list[tuple[int, NodeSpec]] = [(ci, t) for ci, c in enumerate(classes) for t in types if _fits(c, t)]
    objective = [float(classes[ci].demand) for ci, _ in var]
    upper = [float(classes[ci].count) for ci, _ in var]
    per_class: dict[int, dict[int, float]] = {}
    per_type: dict[NodeSpec, list[tuple[int, PodClass]]] = {}
    for j, (ci, t) in enumerate(var):
        per_class.setdefault(ci, {})[j] = 1.0
        per_type.setdefault(t, []).append((j, classes[ci]))
    # no more pods of a class than arrived
    rows: list[tuple[dict[int, float], float, float]] = [(c, 0.0, float(classes[ci].count))
                                                         for ci, c in per_class.items()]
    values: dict[tuple[int, Fraction], float] = {}

    def f_of(k: int, a: Fraction) -> float:  # many pods share a size: evaluate each exact fraction once
        if (k, a) not in values:
            values[(k, a)] = float(dffs[k](a))
        return values[(k, a)]

    for t, on_t in per_type.items():
        count = types[t]
        # per node dimension: each pod's size as a share of one node of this type (GPU milli, CPU, memory)
        dims = [{j: Fraction(c.demand, MILLI * t.gpus) for j, c in on_t}]
        if t.cpu_milli:
            dims.append({j: Fraction(c.cpu_milli, t.cpu_milli) for j, c in on_t})
        if t.memory_mib:
            dims.append({j: Fraction(c.memory_mib, t.memory_mib) for j, c in on_t})
        for sizes in dims:
            rows.append(({j: float(a) for j, a in sizes.items()}, 0.0, float(count)))
            for k in range(len(dffs)):
                rows.append(({j: v for j, a in sizes.items() if (v := f_of(k, a))}, 0.0, float(count)))
        # per GPU: each pod puts its share on num_gpu GPUs of one node; at most split tasks per GPU
        for k in range(len(dffs)):
            rows.append(({j: c.num_gpu * v for j, c in on_t if (v := f_of(k, Fraction(c.per_gpu, MILLI)))}, 0.0,
                         float(count * t.gpus)))
        rows.append(({j: float(c.num_gpu) for j, c in on_t}, 0.0, float(count * t.gpus * t.split)))
    rows = [r for r in rows if r[0]]
    # the LP relaxation: on the openb traces its integer version (x integral) gives the same value, 20 times slower
    return _solve(objective, rows, upper, time_limit, integral=False)


def _exact(nodes: Sequence[NodeSpec], classes: Sequence[PodClass], time_limit: float) -> tuple[float, bool]:
    """Per node n and class c, z = the pods of c on n; per GPU g of n, y = the pods of c with a share on g.
    sum_g y = k z and y <= z are exactly the conditions for z pods to take k distinct GPUs each (deal the GPUs,
    each repeated y times, round-robin to the z pods: a GPU repeated at most z times never reaches a pod twice)."""
    objective: list[float] = []
    upper: list[float] = []
    rows: list[tuple[dict[int, float], float, float]] = []
    by_class: dict[int, list[int]] = {}
    for n in nodes:
        cpu: dict[int, float] = {}
        mem: dict[int, float] = {}
        share: list[dict[int, float]] = [{} for _ in range(n.gpus)]
        tasks: list[dict[int, float]] = [{} for _ in range(n.gpus)]
        for ci, c in enumerate(classes):
            if not _fits(c, n):
                continue
            z = len(objective)
            objective.append(float(c.demand))
            upper.append(float(c.count))
            by_class.setdefault(ci, []).append(z)
            cpu[z], mem[z] = float(c.cpu_milli), float(c.memory_mib)
            link: dict[int, float] = {z: -float(c.num_gpu)}
            for g in range(n.gpus):
                y = len(objective)
                objective.append(0.0)
                upper.append(float(c.count))
                link[y] = 1.0
                rows.append(({y: 1.0, z: -1.0}, -math.inf, 0.0))
                share[g][y] = float(c.per_gpu)
                tasks[g][y] = 1.0
            rows.append((link, 0.0, 0.0))
        if n.cpu_milli is not None:
            rows.append((cpu, 0.0, float(n.cpu_milli)))
        if n.memory_mib is not None:
            rows.append((mem, 0.0, float(n.memory_mib)))
        for g in range(n.gpus):
            rows.append((share[g], 0.0, float(MILLI)))
            rows.append((tasks[g], 0.0, float(n.split)))
    for ci, zs in by_class.items():
        rows.append(({z: 1.0 for z in zs}, 0.0, float(classes[ci].count)))
    rows = [r for r in rows if r[0]]
    if not objective:
        return 0.0, True
    return _solve(objective, rows, upper, time_limit, integral=True)


def seed_bound(nodes: Sequence[NodeSpec], tasks: Sequence[SimPod], seed: int | None, *, method: str = "auto",
               time_limit: float = TIME_LIMIT_S) -> Bound:
    """The ceiling of one run: ``tasks`` in the order that seed's run receives them."""
    t0 = time.perf_counter()
    capacity = sum(n.gpus for n in nodes) * MILLI
    prefix = arrived_prefix(tasks, capacity)
    types = len({n for n in nodes if n.gpus})
    if prefix is None:
        return Bound(seed, None, method, False, 0.0, 0.0, len(tasks), sum(1 for t in tasks if t.gpu_demand),
                     len(pod_classes(tasks)), types, round(time.perf_counter() - t0, 3))
    arrived = sum(t.gpu_demand for t in prefix)
    milli, used, optimal = upper_bound(nodes, prefix, method=method, time_limit=time_limit)
    ratio = min(_ceil3(100.0 * min(milli, arrived) / capacity), 100.0)
    return Bound(seed, ratio, used, optimal, min(_ceil3(100.0 * arrived / capacity), 100.0),
                 round(100.0 * arrived / capacity, 3), len(prefix), sum(1 for t in prefix if t.gpu_demand),
                 len(pod_classes(prefix)), types, round(time.perf_counter() - t0, 3))


def experiment_bounds(experiment: Experiment, *, method: str = "auto", time_limit: float = TIME_LIMIT_S) -> list[Bound]:
    """The ceiling of each seed of ``experiment`` (one for arrival order), on its nodes as the engine registers
    them, for the task list that seed's runs receive."""
    require_solver()
    engine = Engine(experiment.config, plugins=experiment.plugins)
    names = [engine.upsert_node(node).name for node in experiment.nodes]
    devices = [[d for devs in engine.nodes[name].devices.values() for d in devs] for name in names]
    specs = node_specs(experiment.nodes, devices)
    capacity = sum(n.gpus for n in specs) * MILLI
    return [seed_bound(specs, experiment.task_list(seed, capacity), seed, method=method, time_limit=time_limit)
            for seed in (experiment.seeds if experiment.seeds is not None else [None])]


def _ceil3(value: float) -> float:
    # up to the report's 3 decimals: a ceiling never rounds down
    return math.ceil(value * 1000 - 1e-7) / 1000


__all__ = ["METHODS", "Bound", "BoundError", "NodeSpec", "arrived_prefix", "experiment_bounds", "node_specs",
           "pod_classes", "require_solver", "seed_bound", "upper_bound"]
