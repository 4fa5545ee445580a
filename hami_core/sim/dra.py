"""``hami simulate --allocator dra``: the workload placed as kube-scheduler places it in DRA mode.

In DRA mode (resource.k8s.io/v1 with consumable capacity, KEP-5075) there is no HAMi extender: kube-scheduler's
own plugins decide. This module models what they do, so that the simulator can say what moving to DRA costs:

* **Translation** (:func:`translate`): the translating webhook turns each container's HAMi request (N devices x
  memory/cores of one backend) into one DRA request of ``count`` N from the backend's DeviceClass, with capacity
  requests for memory (bytes) and cores (percent), a selector on the device type for ``use-gputype`` and, for
  N > 1, a ``distinctAttribute`` constraint on the UUID so that the N devices are different cards. A whole card
  (memory 100 %, no MiB) names no memory, so it consumes the capacity's default: the whole card.
* **Devices** (:class:`DevicePool`): every node's devices as the vendor plugins publish them in ResourceSlices
  (the ``hami_dra_devices`` hook, :func:`~hami_core.plugins.standard.standard_dra_devices` by default): one pool
  per node, devices in slice order, consumable ``memory``/``cores``/``shares`` on shared cards.
* **Filter**: a node passes NodeResourcesFit when the pod's CPU and memory fit, and the DynamicResources filter
  when the structured allocator (k8s.io/dynamic-resource-allocation/structured) finds devices for every request
  there. The allocator walks the pool's devices in order and takes the FIRST device that satisfies a request
  (:meth:`DevicePool.fits`), backtracking across requests only when a later one cannot be satisfied
  (:func:`allocate_on`). There is no per-device score: which card a claim gets is decided by slice order alone.
* **Score**: kube-scheduler's default score plugins. Only NodeResourcesFit (LeastAllocated over CPU and memory)
  and NodeResourcesBalancedAllocation differ between nodes here; DynamicResources' Score only ranks the
  alternatives of a ``firstAvailable`` (prioritized list) request, which the webhook does not write, so it
  adds the same 0 everywhere. The highest total wins; ties go to a random one of the best (selectHost), drawn
  from the run's seed.

Assumptions, kept the same as the hami replay so that the two compare: every feasible node is scored
(``percentageOfNodesToScore: 100``), pods arrive one at a time and never leave, no ResourceQuota.

The DRA vocabulary comes from :mod:`hami_core.plugins.dra` (the same names :mod:`hami_core.dra.model` re-exports):
``hami_core.sim`` and ``hami_core.dra`` are peers that do not import one another.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hami_core.engine.decision import Decision
from hami_core.engine.pods import pod_key
from hami_core.plugins.dra import CAP_CORES, CAP_MEMORY, MIB, DraCapacity, DraDevice
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.plugins.standard import standard_dra_devices
from hami_core.plugins.types import ContainerDevice, ContainerRequests, DeviceRequest, DeviceUsage
from hami_core.sim.replay import ADMISSION_DENIED, INSUFFICIENT_CPU_MEMORY, Placed, Replay
from hami_core.sim.workload import SimPod

__all__ = ["ALLOCATORS", "CANNOT_ALLOCATE", "DRA_LABEL", "DevicePool", "DraReplay", "DraRequest", "allocate_on",
           "balanced_allocation", "consumed_quantity", "least_allocated", "translate"]

#: ``hami simulate --allocator``: HAMi's extender with its node/GPU policies, or kube-scheduler's DRA allocator.
ALLOCATORS = ("hami", "dra")
#: How reports name the DRA runs (the policy column).
DRA_LABEL = "dra"
#: The DynamicResources filter's verdict on a node where the allocator finds no devices ("cannot allocate all
#: claims").
CANNOT_ALLOCATE = "CannotAllocateAllClaims"
#: kube-scheduler's scoring counts a container without a CPU or memory request as asking this much
#: (pkg/scheduler/util: DefaultMilliCPURequest, DefaultMemoryRequest).
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY_BYTES = 200 * MIB
#: framework.MaxNodeScore
MAX_NODE_SCORE = 100
#: The allocator's search is exhaustive; a pod's handful of requests on a node's handful of devices stays small,
#: but a pathological YAML pod (many containers x many cards) is cut off here and fails on that node.
MAX_SEARCH_STEPS = 100_000


# ---------------------------------------------------------------------------------------------- translation
@dataclass(frozen=True, slots=True)
class DraRequest:
    """One request of a ResourceClaim as the translating webhook writes it (``spec.devices.requests[]``).

    ``capacity``: ``capacity.requests`` (``memory`` in bytes, ``cores`` in percent); a capacity not named
    consumes its request policy's default. ``types``: the CEL selector for ``use-gputype`` (the device's type
    attribute contains one of them, upper-cased as HAMi compares); empty: any device of the class.
    ``distinct``: the ``distinctAttribute`` constraint on the UUID (N > 1 devices must be N different cards).
    ``container``: the pod's container position the request is for (init containers first)."""

    backend: str
    count: int
    capacity: Mapping[str, int] = field(default_factory=dict)
    types: tuple[str, ...] = ()
    distinct: bool = False
    container: int = 0


def translate(requests: ContainerRequests, types: Sequence[str], smallest_memory: Mapping[str, int]
              ) -> list[DraRequest]:
    """The webhook's DRA requests for a pod's HAMi requests, containers in order, backends sorted by name.

    ``smallest_memory``: per backend, the smallest card memory (MiB) of the cluster that the pod's ``types`` allow.
    A DRA capacity request is an absolute amount, so ``gpumem-percentage`` p becomes p % of that card: on every
    card the pod may get it asks no more memory than HAMi would book there (on larger cards less, where its
    ``cores``, also p, is what binds on the openb traces, whose shares ask p % of both)."""
    out: list[DraRequest] = []
    wanted = tuple(t.upper() for t in types)
    for pos, container in enumerate(requests.containers):
        for backend in sorted(container):
            req: DeviceRequest = container[backend]
            capacity: dict[str, int] = {}
            if req.memreq > 0:
                capacity[CAP_MEMORY] = req.memreq * MIB
            elif 0 <= req.mem_percentage < 100:  # 100 or unset: the whole card's memory, the policy's default
                capacity[CAP_MEMORY] = smallest_memory.get(backend, 0) * req.mem_percentage // 100 * MIB
            if req.coresreq > 0:
                capacity[CAP_CORES] = req.coresreq
            out.append(DraRequest(backend, req.nums, capacity, wanted, req.nums > 1, pos))
    return out


# ---------------------------------------------------------------------------------------------- request policy
def consumed_quantity(requested: int | None, cap: DraCapacity) -> int:
    """What one allocation consumes of a capacity (structured allocator, consumable_capacity.go:
    calculateConsumedQuantity): nothing requested takes the request policy's ``default``
    (fillEmptyRequestQuantity); else the request is rounded up into ``validRange`` (roundUpRange): below ``min``
    it is ``min``, else ``min`` plus whole ``step``\\ s."""
    if requested is None:
        return cap.default
    if requested <= cap.minimum:
        return cap.minimum
    if cap.step <= 0:
        return requested
    return cap.minimum + math.ceil((requested - cap.minimum) / cap.step) * cap.step


def _violates(consumed: int, cap: DraCapacity) -> bool:
    """violatesPolicy: a consumed amount above ``validRange.max`` (``maximum``) is not allowed on the device."""
    return cap.maximum is not None and consumed > cap.maximum


# ---------------------------------------------------------------------------------------------- devices
class DevicePool:
    """Every node's published DRA devices of one backend, as arrays (nodes x slice position), and what the
    allocated claims consume of them. ``usage[i][j]`` is the engine's device the replay measures allocation on.
    """

    def __init__(self, backend: str, per_node: Sequence[Sequence[tuple[DraDevice, DeviceUsage]]]) -> None:
        self.backend = backend
        n = len(per_node)
        width = max((len(devs) for devs in per_node), default=0)
        self.width = width
        self.present = np.zeros((n, width), dtype=bool)
        self.shared = np.zeros((n, width), dtype=bool)
        self.allocated = np.zeros((n, width), dtype=bool)  # a non-shared device handed out whole
        self.types = np.full((n, width), "", dtype=object)
        self.usage: list[list[DeviceUsage]] = []
        self.devices: list[list[DraDevice]] = []
        names = sorted({name for devs in per_node for d, _ in devs for name in d.capacity})
        self.names = names
        # per capacity: does the device have it, its total, its policy, and what is consumed
        shape = (n, width)
        self.has = {c: np.zeros(shape, dtype=bool) for c in names}
        self.value = {c: np.zeros(shape, dtype=np.int64) for c in names}
        self.default = {c: np.zeros(shape, dtype=np.int64) for c in names}
        self.minimum = {c: np.zeros(shape, dtype=np.int64) for c in names}
        self.step = {c: np.zeros(shape, dtype=np.int64) for c in names}
        self.maximum = {c: np.full(shape, np.iinfo(np.int64).max, dtype=np.int64) for c in names}
        self.used = {c: np.zeros(shape, dtype=np.int64) for c in names}
        for i, devs in enumerate(per_node):
            self.usage.append([u for _, u in devs])
            self.devices.append([d for d, _ in devs])
            for j, (d, _) in enumerate(devs):
                self.present[i, j] = True
                self.shared[i, j] = d.shared
                self.types[i, j] = d.type.upper()
                for c, cap in d.capacity.items():
                    self.has[c][i, j] = True
                    self.value[c][i, j] = cap.value
                    self.default[c][i, j] = cap.default
                    self.minimum[c][i, j] = cap.minimum
                    self.step[c][i, j] = cap.step
                    if cap.maximum is not None:
                        self.maximum[c][i, j] = cap.maximum
        self._type_masks: dict[tuple[str, ...], np.ndarray] = {}

    def type_mask(self, types: tuple[str, ...]) -> np.ndarray:
        """The request's selector over every device: the type contains one of ``types`` (all when empty)."""
        if not types:
            return self.present
        mask = self._type_masks.get(types)
        if mask is None:
            mask = self.present & np.vectorize(lambda t: any(w in t for w in types), otypes=[bool])(self.types)
            self._type_masks[types] = mask
        return mask

    def consumption(self, request: DraRequest, name: str, rows: Any = slice(None)) -> np.ndarray:
        """What one allocation of ``request`` would consume of capacity ``name`` on each device (of ``rows``)."""
        if name not in request.capacity:
            return self.default[name][rows]
        r = request.capacity[name]
        low, step = self.minimum[name][rows], self.step[name][rows]
        steps = np.where(step > 0, -(-(r - low) // np.maximum(step, 1)), 0)
        rounded = np.where(step > 0, low + steps * step, r)
        return np.where(r <= low, low, rounded)

    def fits(self, request: DraRequest, rows: Any = slice(None), extra: Mapping[str, np.ndarray] | None = None,
             taken: np.ndarray | None = None) -> np.ndarray:
        """Which devices (of ``rows``) could take one more allocation of ``request``: the allocator's checks of a
        candidate device, in its order: the DeviceClass and request selectors match; a device that does not allow
        multiple allocations is not allocated yet; every capacity the request names exists on the device
        (resolveCapacityRequests); every capacity's consumed amount is within the policy (violatesPolicy) and,
        added to what is consumed already (``extra``: by this pod's earlier requests), within the device's value
        (cmpRequestOverCapacity). ``taken``: devices a non-shared allocation of this pod holds already."""
        ok = self.type_mask(request.types)[rows].copy()
        for c in request.capacity:
            if c not in self.has:
                return np.zeros_like(ok)
            ok &= self.has[c][rows]
        shared = self.shared[rows]
        free = ~self.allocated[rows]
        if taken is not None:
            free &= ~taken
        ok &= shared | free
        for c in self.names:
            need = self.consumption(request, c, rows)
            have = self.has[c][rows]
            within = need <= self.maximum[c][rows]
            used = self.used[c][rows] + (extra[c] if extra is not None else 0)
            # shared devices consume; a whole device only needs the capacity (what a request names fits in it)
            room = np.where(shared, used + need <= self.value[c][rows],
                            (need <= self.value[c][rows]) | (c not in request.capacity))
            ok &= ~have | (within & room)
        return ok

    def take(self, row: int, col: int, request: DraRequest) -> ContainerDevice:
        """Record one allocation on device ``col`` of node ``row`` (the claim's allocation result) and book it on
        the engine's device, which the replay measures: a shared card's consumed capacity, or the whole card."""
        usage = self.usage[row][col]
        if self.shared[row, col]:
            for c in self.names:
                if self.has[c][row, col]:
                    self.used[c][row, col] += int(self.consumption(request, c, (slice(row, row + 1),
                                                                                 slice(col, col + 1)))[0, 0])
            cores = int(self.consumption(request, CAP_CORES, (slice(row, row + 1), slice(col, col + 1)))[0, 0]) \
                if CAP_CORES in self.has else 0
            memory = int(self.consumption(request, CAP_MEMORY, (slice(row, row + 1), slice(col, col + 1)))[0, 0]) \
                // MIB if CAP_MEMORY in self.has else 0
            usage.used += 1
        else:
            self.allocated[row, col] = True
            cores, memory = usage.totalcore, usage.totalmem
            usage.used = max(usage.count, 1)
        usage.usedcores += cores
        usage.usedmem += memory
        return ContainerDevice(usage.id, self.backend, memory, cores, idx=usage.index)


def allocate_on(pools: Mapping[str, DevicePool], row: int, requests: Sequence[DraRequest]
                ) -> list[tuple[DraRequest, int]] | None:
    """The structured allocator on one node: a device for each of the ``count`` devices of every request, in
    request order, each the FIRST device in slice order that satisfies it given what this pod's earlier picks
    consume (allocator.go allocateOne, device by device); a request that finds none makes the search step back
    and try the previous pick's next device (backtracking). ``distinct`` requests never take one card twice.
    Returns ``(request, device position)`` per allocated device, or ``None`` when nothing satisfies them all."""
    slots = [(k, r) for k, r in enumerate(requests) for _ in range(r.count)]
    for r in requests:
        if r.backend not in pools:
            return None
    picks: list[int] = []
    steps = 0
    cell = slice(row, row + 1)

    def state(upto: int) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        extra: dict[str, dict[str, np.ndarray]] = {}
        taken: dict[str, np.ndarray] = {}
        for (_, r), col in zip(slots[:upto], picks[:upto], strict=True):
            pool = pools[r.backend]
            e = extra.setdefault(r.backend, {c: np.zeros((1, pool.width), dtype=np.int64) for c in pool.names})
            t = taken.setdefault(r.backend, np.zeros((1, pool.width), dtype=bool))
            if pool.shared[row, col]:
                for c in pool.names:
                    if pool.has[c][row, col]:
                        e[c][0, col] += int(pool.consumption(r, c, (cell, slice(col, col + 1)))[0, 0])
            else:
                t[0, col] = True
        return extra, taken

    def candidates(pos: int) -> list[int]:
        k, r = slots[pos]
        pool = pools[r.backend]
        extra, taken = state(pos)
        ok = pool.fits(r, cell, extra.get(r.backend), taken.get(r.backend))[0]
        if r.distinct:  # distinctAttribute uuid: not a card this request already holds
            for (k2, _), col in zip(slots[:pos], picks[:pos], strict=True):
                if k2 == k:
                    ok[col] = False
        return [int(c) for c in np.flatnonzero(ok)]

    options: list[list[int]] = []
    pos = 0
    while pos < len(slots):
        steps += 1
        if steps > MAX_SEARCH_STEPS:
            return None
        if len(options) <= pos:
            options.append(candidates(pos))
        if options[pos]:
            picks[pos:] = [options[pos].pop(0)]
            pos += 1
            continue
        options.pop()  # nothing left for this slot: back to the previous one's next device
        pos -= 1
        if pos < 0:
            return None
        picks = picks[:pos]
    return [(slots[i][1], col) for i, col in enumerate(picks)]


# ---------------------------------------------------------------------------------------------- scoring
def least_allocated(requested: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """NodeResourcesFit's LeastAllocated score of one resource (least_allocated.go leastRequestedScore):
    ``(capacity - requested) * 100 / capacity`` in integers; 0 with no capacity or more requested than it."""
    cap = np.where(np.isfinite(capacity), capacity, 0).astype(np.int64)
    req = requested.astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = np.where((cap > 0) & (req <= cap), (cap - req) * MAX_NODE_SCORE // np.maximum(cap, 1), 0)
    return score


def balanced_allocation(cpu_fraction: np.ndarray, mem_fraction: np.ndarray) -> np.ndarray:
    """NodeResourcesBalancedAllocation (balanced_allocation.go balancedResourceScorer) over CPU and memory: the
    requested fractions (capped at 1), their standard deviation ``|f1 - f2| / 2``, score ``(1 - std) * 100``."""
    f1, f2 = np.minimum(cpu_fraction, 1.0), np.minimum(mem_fraction, 1.0)
    return ((1.0 - np.abs(f1 - f2) / 2.0) * MAX_NODE_SCORE).astype(np.int64)


# ---------------------------------------------------------------------------------------------- the replay
class DraReplay(Replay):
    """:class:`~hami_core.sim.replay.Replay` with kube-scheduler's DRA placement instead of the HAMi extender.

    The engine still reads the nodes (their registered devices become the ResourceSlices' devices through the
    vendor plugins' ``hami_dra_devices`` hook) and admits the pods (the HAMi requests the webhook translates), and
    its devices carry what the claims consume, so every measure of the replay (allocation, fragmentation, per
    model) reads the same way for both allocators; it never schedules."""

    def __init__(self, engine: Any, nodes: Sequence[Mapping[str, Any]], *, policy: str, seed: int | None,
                 keep_placements: bool = False, **_: Any) -> None:
        super().__init__(engine, nodes, policy=policy, seed=seed, keep_placements=keep_placements)
        self.rng = random.Random(f"dra-select-host-{seed}")
        per_backend: dict[str, list[list[tuple[DraDevice, DeviceUsage]]]] = {}
        for i, name in enumerate(self.names):
            state = engine.nodes[name]
            for backend, usages in state.devices.items():
                rows = per_backend.setdefault(backend, [[] for _ in self.names])
                rows[i] = self._published(backend, usages)
        self.pools = {b: DevicePool(b, rows) for b, rows in sorted(per_backend.items())}
        # kube-scheduler's scoring view of each node: what its pods request (non-zero defaults for scoring)
        self.cpu_nz = np.zeros(len(self.names), dtype=np.int64)
        self.mem_nz = np.zeros(len(self.names), dtype=np.int64)
        self._smallest: dict[tuple[str, ...], dict[str, int]] = {}

    def _published(self, backend: str, usages: Sequence[DeviceUsage]) -> list[tuple[DraDevice, DeviceUsage]]:
        """The node's devices of ``backend`` as its ResourceSlice lists them (healthy ones, in slice order)."""
        engine = self.engine
        infos = [u.info for u in usages]
        hook = getattr(engine.hook, "hami_dra_devices", None)
        published = hook(backend=engine.backends[backend], devices=infos) if hook is not None else None
        if published is None:
            published = standard_dra_devices(engine.backends[backend], infos)
        by_uuid = {u.id: u for u in usages}
        return [(d, by_uuid[d.uuid]) for d in published if d.healthy and d.uuid in by_uuid]

    def smallest_memory(self, types: tuple[str, ...]) -> dict[str, int]:
        """Per backend, the smallest card memory (MiB) among the published devices ``types`` allows."""
        found = self._smallest.get(types)
        if found is None:
            found = {}
            for backend, pool in self.pools.items():
                mask = pool.type_mask(types)
                mems = [pool.usage[i][j].totalmem for i, j in zip(*np.nonzero(mask), strict=True)]
                if mems:
                    found[backend] = min(mems)
            self._smallest[types] = found
        return found

    def _place(self, task: SimPod) -> Placed:
        engine, r = self.engine, self.result
        try:
            pod = engine.admit(task.pod)
        except (AdmissionDenied, AdmissionFailed) as exc:
            return Placed(task.name, None, f"{ADMISSION_DENIED}: {exc}")
        requests = engine.requests(pod)
        dra = translate(requests, task.models, self.smallest_memory(tuple(m.upper() for m in task.models)))
        r.decisions += 1
        # NodeResourcesFit's filter
        fits = (self.cpu_free >= task.cpu_milli) & (self.mem_free >= task.memory_mib)
        if not fits.any():
            return Placed(task.name, None, INSUFFICIENT_CPU_MEMORY)
        # DynamicResources' filter: a necessary count per request, exact when the pod has one request
        for req in dra:
            pool = self.pools.get(req.backend)
            if pool is None:
                fits[:] = False
                break
            fits &= pool.fits(req).sum(axis=1) >= req.count
        rows = np.flatnonzero(fits)
        if len(dra) > 1:
            rows = np.array([i for i in rows if allocate_on(self.pools, int(i), dra) is not None], dtype=np.int64)
        if not len(rows):
            return Placed(task.name, None, CANNOT_ALLOCATE, Decision(pod_key(pod), requests=requests))
        row, score = self._select_host(rows, task)
        node = self.names[row]
        picks = allocate_on(self.pools, row, dra) if dra else []
        assert picks is not None  # the filter found these devices on this node
        devices: dict[str, list[list[ContainerDevice]]] = {}
        for req, col in picks:
            per_container = devices.setdefault(req.backend, [[] for _ in requests.containers])
            per_container[req.container].append(self.pools[req.backend].take(row, col, req))
        self._consume(node, task)
        self.cpu_nz[row] += task.cpu_milli or DEFAULT_MILLI_CPU
        self.mem_nz[row] += task.memory_mib * MIB if task.memory_mib else DEFAULT_MEMORY_BYTES
        if picks:
            self._reshare_devices(row)
        decision = Decision(pod_key(pod), node=node, nodes=(node,), devices=devices, scores={node: float(score)},
                            requests=requests, skipped=not dra)
        return Placed(task.name, node, "", decision)

    def _select_host(self, rows: np.ndarray, task: SimPod) -> tuple[int, int]:
        """kube-scheduler's scoring of the feasible ``rows`` and selectHost: the best total, a tie to a random
        one of the best (from the run's seed). Returns (row, its score)."""
        cpu_req = self.cpu_nz[rows] + (task.cpu_milli or DEFAULT_MILLI_CPU)
        mem_req = self.mem_nz[rows] + (task.memory_mib * MIB if task.memory_mib else DEFAULT_MEMORY_BYTES)
        cpu_cap, mem_cap = self.cpu_total[rows], self.mem_total[rows] * MIB
        # NodeResourcesFit LeastAllocated, cpu and memory weighted 1 each: the mean of the two, in integers
        fit = (least_allocated(cpu_req, cpu_cap) + least_allocated(mem_req, mem_cap)) // 2
        # NodeResourcesBalancedAllocation over the actual requests
        with np.errstate(divide="ignore", invalid="ignore"):
            used_cpu = self.cpu_total[rows] - self.cpu_free[rows] + task.cpu_milli
            used_mem = self.mem_total[rows] - self.mem_free[rows] + task.memory_mib
            f_cpu = np.nan_to_num(used_cpu / self.cpu_total[rows], nan=0.0, posinf=0.0)
            f_mem = np.nan_to_num(used_mem / self.mem_total[rows], nan=0.0, posinf=0.0)
        total = fit + balanced_allocation(f_cpu, f_mem)
        best = np.flatnonzero(total == total.max())
        pick = int(best[self.rng.randrange(len(best))]) if len(best) > 1 else int(best[0])
        return int(rows[pick]), int(total[pick])

    def _reshare_devices(self, row: int) -> None:
        r = self.result
        for usage in self.devices[row]:
            new = self.device_share(usage)
            r.allocated_milli += new - self.share.get(usage.id, 0.0)
            self.share[usage.id] = new
