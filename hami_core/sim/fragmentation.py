"""GPU fragmentation as defined by FGD (Weng et al., USENIX ATC '23, §3).

For a node ``n`` and a task ``m`` of the workload: if ``m`` cannot run on ``n`` (CPU, memory, GPU
model or GPU capacity), every unallocated GPU share on ``n`` is a fragment; otherwise the fragments are
the free shares of the GPUs that cannot host one of ``m``'s GPUs (free share below its per-GPU request,
or a model it does not accept). A task that asks for no GPU sees every free share as a fragment. The
cluster's fragmentation is ``sum_n sum_m p_m F_n(m)``, with ``p_m`` the popularity of ``m``'s class in
the workload.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from hami_core.sim.workload import SimPod

FULL = 1000.0


@dataclass(frozen=True, slots=True)
class TaskClass:
    num_gpu: int
    per_gpu: int
    models: tuple[str, ...]
    cpu_milli: float
    memory_mib: float
    weight: float


def workload_classes(pods: Iterable[SimPod]) -> list[TaskClass]:
    """Task classes (GPU count, milli per GPU, models) with their popularity and mean CPU/memory."""
    counts: Counter[tuple[int, int, tuple[str, ...]]] = Counter()
    cpu: Counter[tuple[int, int, tuple[str, ...]]] = Counter()
    mem: Counter[tuple[int, int, tuple[str, ...]]] = Counter()
    for p in pods:
        counts[p.klass] += 1
        cpu[p.klass] += p.cpu_milli
        mem[p.klass] += p.memory_mib
    total = sum(counts.values()) or 1
    return [TaskClass(k[0], k[1], k[2], cpu[k] / n, mem[k] / n, n / total) for k, n in sorted(counts.items())]


class FragmentationModel:
    """Evaluates fragmentation on snapshots of one cluster (fixed nodes and GPU types)."""

    def __init__(self, gpu_types: Sequence[Sequence[str]], classes: Sequence[TaskClass]) -> None:
        self.classes = list(classes)
        width = max((len(t) for t in gpu_types), default=0)
        self.present = np.zeros((len(gpu_types), width), dtype=bool)
        types = np.full((len(gpu_types), width), "", dtype=object)
        for i, row in enumerate(gpu_types):
            self.present[i, :len(row)] = True
            types[i, :len(row)] = [t.upper() for t in row]
        self._allowed: list[np.ndarray] = []
        for c in self.classes:
            if not c.models:
                self._allowed.append(self.present)
                continue
            match = np.vectorize(lambda t, ms=c.models: any(m in t for m in ms), otypes=[bool])(types)
            self._allowed.append(match & self.present)

    def node_fragments(self, free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray) -> np.ndarray:
        """Expected fragmentation per node (GPU milli). ``free``: (nodes, gpus) free milli per GPU."""
        free = np.where(self.present, free, 0.0)
        total_free = free.sum(axis=1)
        out = np.zeros(len(free))
        for c, allowed in zip(self.classes, self._allowed, strict=True):
            if c.num_gpu == 0:
                out += c.weight * total_free
                continue
            usable = allowed & (free >= c.per_gpu)
            feasible = (usable.sum(axis=1) >= c.num_gpu) & (cpu_free >= c.cpu_milli) & (mem_free >= c.memory_mib)
            stranded = np.where(usable, 0.0, free).sum(axis=1)
            out += c.weight * np.where(feasible, stranded, total_free)
        return out
