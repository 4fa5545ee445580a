"""The workload mix the ``fgd`` policy has seen: request shapes and how popular each is.

FGD scores a placement by how much it hurts the pods that usually come, so it needs the recent mix.
:class:`WorkloadModel` learns it online from the pods the engine is asked about (``hami_observe_pod``: each pod
counted once, the last ``window`` pods kept), or holds a fixed mix given in config (``scheduler.fgd.workload``).
Readers take a :class:`Workload` snapshot; its ``version`` changes only when the mix has moved by more than
``tolerance`` (total variation distance), so caches keyed on it survive the small drift of every new pod.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hami_core.engine.workload import Shape, shape_share

__all__ = ["CPU_STEP", "DEFAULT_SCORE_STEPS", "TIE_BREAKS", "TYPED_SCORE_STEPS", "MixClass", "Workload",
           "WorkloadModel"]


#: One class of the mix: its request shape, weight, and the CPU (milli) and memory (MiB) its pods request.
MixClass = tuple[Shape, float, float, float]
#: Default resolution of the fgd growth score (``scheduler.fgd.scoreSteps``; the paper's is 100).
DEFAULT_SCORE_STEPS = 25
#: The fewest score steps for a mix with classes constrained to device types (the paper's resolution): there a
#: placement on a device type that many classes refuse grows fragmentation less by a systematic amount (the
#: refusing classes' weight times the share placed), which coarser steps would merge into ties.
TYPED_SCORE_STEPS = 100
#: CPU requests are grouped in steps of this many milli-CPU (a class per shape and CPU step).
CPU_STEP = 500
#: How the ``fgd`` node policy breaks ties between nodes in one score step (``scheduler.fgd.ties``): the fullest
#: node (``packing``); the node the scheduler learned first (``order``: its table row, so the cluster file's
#: order in ``hami simulate``; in a cluster, the API server's list order, by name, then nodes as they join, a node
#: joining after another left taking the row it freed); or the node whose free CPU and free device share the pod
#: brings closest to the mix's CPU per device share (``balance``, :meth:`Workload.cpu_per_share`), so that
#: CPU-heavy pods go where CPU is plentiful and a node's CPU does not run out before its devices (docs/fgd.md);
#: or ``auto``: ``balance``, but ``order`` for a mix with classes constrained to device types
#: (:attr:`Workload.tie_break`).
TIE_BREAKS = ("packing", "order", "balance", "auto")


@dataclass(frozen=True, slots=True)
class Workload:
    """A snapshot of the mix: ``classes`` are (shape, weight, CPU, memory), weights summing to 1."""

    version: int
    classes: tuple[MixClass, ...] = ()
    #: How finely fragmentation growth is scored (``scheduler.fgd.scoreSteps``), for policies reading the mix;
    #: None: not configured (see :attr:`steps`).
    score_steps: int | None = None
    #: MiB of caches a policy reading the mix may keep (``scheduler.fgd.cacheMiB``).
    cache_mib: int = 256
    #: How nodes in one score step are ordered (:data:`TIE_BREAKS`).
    ties: str = "auto"
    #: Weight of the reservation term (``scheduler.fgd.reserve``, :mod:`.scarcity`): growth per milli a pod takes
    #: of a device type more constrained classes claim; 0 = off.
    reserve: float = 1.0
    #: :meth:`cpu_per_share` once computed (-1: not yet)
    _cpu_per_share: float = field(default=-1.0, init=False, repr=False, compare=False)

    @property
    def steps(self) -> int:
        """The score steps to use: ``score_steps`` when configured; otherwise :data:`DEFAULT_SCORE_STEPS`, or
        :data:`TYPED_SCORE_STEPS` when a class of the mix is constrained to device types (docs/simulation.md:
        +0.5 points on the openb gpuspec33 trace, where 25 steps lose the preference for device types that
        fewer classes need)."""
        if self.score_steps is not None:
            return self.score_steps
        return TYPED_SCORE_STEPS if self.typed else DEFAULT_SCORE_STEPS

    @property
    def typed(self) -> bool:
        """Whether a class of the mix is constrained to device types."""
        return any((c[0].use_types or c[0].nouse_types) and not c[0].deviceless for c in self.classes)

    @property
    def tie_break(self) -> str:
        """The tie-break to use: ``ties``, with ``auto`` resolved to ``balance``, or to ``order`` for a
        :attr:`typed` mix. Balance draws CPU-heavy pods to the nodes richest in CPU per device, whatever their
        device type, and the fragmentation measure does not protect a device type that typed classes need; on the
        openb gpuspec33 trace that costs 0.9 points against ``order``, which spreads no type more than another
        (docs/simulation.md)."""
        if self.ties != "auto":
            return self.ties
        return "order" if self.typed else "balance"

    def cpu_per_share(self) -> float:
        """The mix's host CPU (milli) per milli of device share: ``sum w x cpu / sum w x share`` over its classes,
        a class's share being :func:`shape_share` per device times its device count; 0 when no class asks a
        share (a mix of pods without devices). Computed once per snapshot (every decision asks)."""
        if self._cpu_per_share < 0:
            cpu = sum(w * c for _, w, c, _ in self.classes)
            share = sum(w * s.nums * shape_share(s) for s, w, _, _ in self.classes)
            object.__setattr__(self, "_cpu_per_share", cpu / share if share > 0 else 0.0)
        return self._cpu_per_share

    def for_backend(self, backend: str) -> list[MixClass]:
        """The classes that ask ``backend``, and those of pods without devices (which no device serves)."""
        return [c for c in self.classes if c[0].backend == backend or c[0].deviceless]

    @property
    def backends(self) -> list[str]:
        """The backends some class asks, sorted."""
        return sorted({c[0].backend for c in self.classes if not c[0].deviceless})


class WorkloadModel:
    """Online (or fixed) estimate of the request mix.

    A class is a request shape plus the pod's CPU request (in :data:`CPU_STEP` steps), since a node
    short of CPU strands its devices for pods that need more; memory is the class mean.

    :param window: how many recent pods the online estimate covers.
    :param tolerance: publish a new snapshot when the mix has moved by more than this (total variation).
    :param coverage: keep the most popular classes that together cover this fraction of pods (the rest
        are rare shapes that cost time and barely move the score).
    :param fixed: a mix given in config; online learning is then off. Weights are each class's share of all pods:
        weights summing to at most 1 are used as given (the pods of no listed class add no fragments); larger sums
        are relative and normalised to 1.
    """

    def __init__(self, window: int = 1000, *, tolerance: float = 0.02, coverage: float = 0.95,
                 fixed: Sequence[MixClass] | None = None,
                 score_steps: int | None = None, cache_mib: int = 256, ties: str = "auto",
                 reserve: float = 1.0) -> None:
        if window <= 0:
            raise ValueError(f"window must be > 0, got {window}")
        if ties not in TIE_BREAKS:
            raise ValueError(f"ties must be one of {', '.join(TIE_BREAKS)}, got {ties!r}")
        self.window = window
        self.tolerance = tolerance
        self.coverage = coverage
        self._recent: OrderedDict[str, tuple[tuple[Shape, ...], tuple[int, int]]] = OrderedDict()
        self._counts: Counter[tuple[Shape, int]] = Counter()
        self._mem: Counter[tuple[Shape, int]] = Counter()
        self._fixed = bool(fixed)
        self._weights: dict[tuple[Shape, int], float] = {}
        self.score_steps = score_steps
        self.cache_mib = cache_mib
        self.ties = ties
        self.reserve = reserve
        self._snapshot = Workload(0, score_steps=score_steps, cache_mib=cache_mib, ties=ties, reserve=reserve)
        if fixed:
            total = max(sum(c[1] for c in fixed), 1.0)
            self._snapshot = Workload(0, tuple((s, w / total, cpu, mem) for s, w, cpu, mem in fixed), score_steps,
                                      cache_mib, ties, reserve)

    @property
    def learning(self) -> bool:
        return not self._fixed

    def observe(self, key: str, shapes: Iterable[Shape], host: tuple[int, int] = (0, 0)) -> None:
        """Count a pod's shapes (and its CPU and memory requests) once; a pod seen again is not recounted."""
        if self._fixed or key in self._recent:
            return
        shapes = tuple(shapes)
        if not shapes:
            return
        self._recent[key] = (shapes, host)
        self._count(shapes, host, 1)
        while len(self._recent) > self.window:
            _, (old, old_host) = self._recent.popitem(last=False)
            self._count(old, old_host, -1)

    def _count(self, shapes: tuple[Shape, ...], host: tuple[int, int], sign: int) -> None:
        cpu = host[0] // CPU_STEP * CPU_STEP
        for s in shapes:
            k = (s, cpu)
            self._counts[k] += sign
            self._mem[k] += host[1] * sign
            if self._counts[k] <= 0:
                del self._counts[k], self._mem[k]

    def snapshot(self) -> Workload:
        """The mix to score against; a new version only when it moved by more than ``tolerance``."""
        if self._fixed:
            return self._snapshot
        total = sum(self._counts.values())
        if not total:
            return self._snapshot
        current = {k: n / total for k, n in self._counts.items()}
        old = self._weights
        # Summed in dict (insertion) order, never over a set: a set's order follows the string hash seed, and
        # a last-bit difference in the sum could move the new version by a pod, and so the decisions.
        drift = 0.5 * (sum(abs(w - old.get(k, 0.0)) for k, w in current.items())
                       + sum(w for k, w in old.items() if k not in current))
        if drift > self.tolerance or not self._snapshot.classes:
            self._weights = current
            kept: list[MixClass] = []
            covered = 0.0
            for k, w in sorted(current.items(), key=lambda kv: (-kv[1], repr(kv[0]))):
                if covered >= self.coverage:
                    break
                covered += w
                kept.append((k[0], w, float(k[1]), self._mem[k] / self._counts[k]))
            self._snapshot = Workload(self._snapshot.version + 1,
                                      tuple((s, w / covered, cpu, mem) for s, w, cpu, mem in kept), self.score_steps,
                                      self.cache_mib, self.ties, self.reserve)
        return self._snapshot
