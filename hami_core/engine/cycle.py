"""One scheduling decision: fit every container on every candidate node, score, choose (spec §6-§7).

The cycle never changes engine state. Usage of earlier containers of the same pod is tracked in
copy-on-write overrides per node, so a one-container pod touches no device object at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hami_core.engine.decision import Decision
from hami_core.engine.fragmentation import fgd_device_order
from hami_core.engine.inventory import NodeState, mig_book, mig_conflict
from hami_core.engine.ledger import Booking
from hami_core.engine.pods import annotations as pod_annotations
from hami_core.engine.policy import sort_devices
from hami_core.engine.workload import Shape, Workload
from hami_core.plugins.errors import PluginError
from hami_core.plugins.types import (
    ContainerDevice,
    ContainerRequests,
    DeviceBackend,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    MigInstance,
    NodeBatch,
    NodeScore,
    QuotaView,
    ScoreCandidate,
    UsageTotals,
)
from hami_core.wire import keys
from hami_core.wire.mig import MIG_PLACEMENT_CUSTOM_INFO, MIG_PROFILE_CUSTOM_INFO
from hami_core.wire.reasons import Reason

DEVICE_TYPE_NOT_FOUND = "Device type not found"
NEUTRAL_SCORE_FACTOR = 10000.0
_EMPTY: list[DeviceUsage] = []


class Cycle:
    """State of one :meth:`Engine.schedule` call."""

    def __init__(self, *, hook: Any, backends: Mapping[str, DeviceBackend], pod: Mapping[str, Any], key: str,
                 requests: ContainerRequests, policy: GpuPolicy, own: Booking | None,
                 shapes: Sequence[Shape] = (), workload: Workload | None = None,
                 host_need: tuple[int, int] = (0, 0), quota: QuotaView | None = None) -> None:
        self.hook = hook
        self.backends = backends
        self.pod = pod
        self.key = key
        self.requests = requests
        self.policy = policy
        self.own = own
        self.failed: dict[str, str] = {}
        # The pod's namespace quota (None: nothing limited there), re-issued per container for the filter hook.
        self.quota = quota
        # GPU policy "fgd": devices ordered by fragmentation growth under the workload mix.
        self.workload = workload if policy.has("fgd") and workload is not None and workload.classes else None
        self.host_need = host_need
        self.shape_at: dict[tuple[int, str], Shape] = {}
        it = iter(shapes)
        for pos, container in enumerate(requests.containers):
            for name in sorted(container):
                shape = next(it, None)
                if shape is not None:
                    self.shape_at[(pos, name)] = shape
        positions = len(requests.containers)
        self.positions = positions
        # Usage overrides are only needed while a later app container still has to be placed.
        self.last_app = max((i for i, c in enumerate(requests.containers) if c and not requests.is_init(i)),
                            default=-1)
        self.order_key = (policy.gpu, policy.weights, policy.numa_bind)
        # node → backend → per-position devices chosen so far
        self.alloc: dict[str, dict[str, list[tuple[ContainerDevice, ...]]]] = {}
        # node → uuid → usage copy: ``base`` removes the pod's own earlier reservation (re-scheduling),
        # ``app`` adds this pod's app containers as they are placed.
        self.base: dict[str, dict[str, DeviceUsage]] = {}
        self.app: dict[str, dict[str, DeviceUsage]] = {}
        # A MIG request (spec §6.8) skips the "more devices than the node has" pre-check: one GPU can host several
        # instances. It is one unless the pod's nvidia.com/vgpu-mode names other modes only.
        mode = pod_annotations(pod).get(keys.NVIDIA_VGPU_MODE)
        self.mig_ok = not isinstance(mode, str) or "mig" in mode

    # ----------------------------------------------------------------------------------- setup
    def exclude_own(self, state: NodeState) -> None:
        """Re-scheduling: evaluate ``state`` as if the pod's previous reservation were gone."""
        if self.own is None or self.own.node != state.name:
            return
        overrides: dict[str, DeviceUsage] = {}
        for devs in self.own.devices.values():
            for d in devs:
                usage = state.by_uuid.get(d.uuid)
                if usage is None:
                    continue
                copy = overrides.setdefault(d.uuid, usage.copy())
                copy.used -= max(d.slots, 1)
                copy.usedmem -= d.usedmem
                copy.usedcores -= d.usedcores
        if self.own.mig or state.mig:
            self._exclude_own_mig(state, overrides)
        self.base[state.name] = overrides

    def _exclude_own_mig(self, state: NodeState, overrides: dict[str, DeviceUsage]) -> None:
        """Take the pod's own MIG instances (and the conflicts its booking caused) off the ``base`` copies."""
        own = self.own
        if own is None:
            return
        uuids = {d.uuid for devs in own.devices.values() for d in devs} | set(own.mig)
        for uuid in uuids:
            usage = state.by_uuid.get(uuid)
            if usage is None:
                continue
            instances = own.mig.get(uuid)
            if usage.mode == "mig" and instances:
                mig_book(overrides.setdefault(uuid, usage.copy()), instances, -1)
            elif (usage.mode == "mig") != bool(instances):  # a conflict this booking caused (inventory.apply_mig)
                mig_conflict(overrides.setdefault(uuid, usage.copy()), -1)

    def totals(self, state: NodeState) -> UsageTotals:
        totals = state.totals()
        if self.own is None or self.own.node != state.name:
            return totals
        used = mem = cores = 0
        for devs in self.own.devices.values():
            for d in devs:
                if d.uuid in state.by_uuid:
                    used += max(d.slots, 1)
                    mem += d.usedmem
                    cores += d.usedcores
        return UsageTotals(totals.used - used, totals.count, totals.usedcores - cores, totals.totalcore,
                           totals.usedmem - mem, totals.totalmem)

    def _devices(self, state: NodeState, backend: str, *, init: bool) -> list[DeviceUsage]:
        devs = state.devices.get(backend, _EMPTY)
        if not self.base and not self.app:  # the common case: one container, no earlier reservation
            return devs
        overrides = self.base.get(state.name) if init else self.app.get(state.name, self.base.get(state.name))
        if overrides:
            return [overrides.get(d.id, d) for d in devs]
        return devs

    # ----------------------------------------------------------------------------------- filter
    def fit(self, alive: list[NodeState]) -> list[NodeState]:
        """Place every container in order; returns the nodes where all of them fit."""
        reqs = self.requests
        for pos, container in enumerate(reqs.containers):
            if not container:
                continue
            init = reqs.is_init(pos)
            container_reqs = list(container.values())
            for name in sorted(container):
                alive = self._fit_backend(alive, pos, init, self.backends[name], container_reqs)
                if not alive:
                    return alive
        return alive

    def _fit_backend(self, alive: list[NodeState], pos: int, init: bool, backend: DeviceBackend,
                     container_reqs: list[Any]) -> list[NodeState]:
        request = self.requests.containers[pos][backend.name]
        candidates: list[FitCandidate] = []
        offered: list[NodeState] = []
        empty: dict[str, list[tuple[ContainerDevice, ...]]] = {}
        name = backend.name
        for state in alive:
            devs = self._devices(state, name, init=init)
            if request.nums > len(devs) and not (self.mig_ok and name in state.mig):
                self.failed[state.name] = Reason.NodeInsufficientDevice
                continue
            ordered = self._ordered(state, name, devs, container_reqs)
            if self.workload is not None:
                ordered = self._fgd_ordered(state, pos, name, ordered, devs)
            candidates.append(FitCandidate(state, ordered, self.alloc.get(state.name, empty)))
            offered.append(state)
        if not candidates:
            return []
        quota = self.quota
        if quota is not None:
            quota = (QuotaView(quota.namespace, quota.entries, pos, self.requests.init_count)
                     if quota.limited(backend.resource_names) else None)
        results = self.hook.hami_filter_nodes(backend=backend, pod=self.pod, request=request, candidates=candidates,
                                              policy=self.policy, quota=quota)
        if results is None:
            for state in offered:
                self.failed[state.name] = DEVICE_TYPE_NOT_FOUND
            return []
        if len(results) != len(candidates):
            raise PluginError(f"plugin {backend.plugin!r}: hami_filter_nodes returned {len(results)} results "
                              f"for {len(candidates)} candidates (backend {backend.name})")
        survivors: list[NodeState] = []
        for state, result in zip(offered, results, strict=True):
            if not isinstance(result, FitResult):
                raise PluginError(f"plugin {backend.plugin!r}: hami_filter_nodes returned {result!r} "
                                  f"for node {state.name}, expected FitResult")
            if not result.ok:
                self.failed[state.name] = result.reason
                continue
            self._record(state, pos, init, backend.name, result.devices)
            survivors.append(state)
        return survivors

    def _ordered(self, state: NodeState, backend: str, devs: list[DeviceUsage],
                 container_reqs: list[Any]) -> list[DeviceUsage]:
        """Devices in GPU-policy order, cached per node state when the order cannot depend on the request."""
        types = state.types.get(backend, frozenset())
        if devs is not state.devices.get(backend) or any(r.backend in types for r in container_reqs):
            return sort_devices(devs, container_reqs, self.policy)
        key = (backend, *self.order_key)
        cached = state.order_cache.get(key)
        if cached is not None and cached[0] == state.generation:
            return cached[1]
        ordered = sort_devices(devs, container_reqs, self.policy)
        state.order_cache[key] = (state.generation, ordered)
        return ordered

    def _fgd_ordered(self, state: NodeState, pos: int, backend: str, ordered: list[DeviceUsage],
                     devs: list[DeviceUsage]) -> list[DeviceUsage]:
        """Devices reordered so that the one whose use grows fragmentation least is preferred."""
        workload = self.workload
        shape = self.shape_at.get((pos, backend))
        classes = workload.for_backend(backend) if workload is not None and shape is not None else []
        if not classes or shape is None or workload is None:
            return ordered
        free = (state.host_total[0] - state.host_used[0], state.host_total[1] - state.host_used[1])
        key = ("fgd", backend, shape, self.host_need, workload.version, self.policy.weights)
        cached = state.order_cache.get(key) if devs is state.devices.get(backend) else None
        if cached is not None and cached[0] == state.generation:
            return cached[1]
        result = fgd_device_order(ordered, shape, classes, free, self.host_need, self.policy.weights)
        if devs is state.devices.get(backend):
            state.order_cache[key] = (state.generation, result)
        return result

    def _record(self, state: NodeState, pos: int, init: bool, backend: str,
                devices: tuple[ContainerDevice, ...]) -> None:
        per_backend = self.alloc.setdefault(state.name, {})
        slots = per_backend.get(backend)
        if slots is None:
            slots = per_backend[backend] = [()] * self.positions
        slots[pos] = devices
        if init or pos >= self.last_app:
            return  # init containers run one at a time (fresh copies); nothing is placed after the last app one
        overrides = self.app.get(state.name)
        if overrides is None:
            overrides = self.app[state.name] = {u: d.copy() for u, d in self.base.get(state.name, {}).items()}
        for d in devices:
            usage = overrides.get(d.uuid)
            if usage is None:
                source = state.by_uuid.get(d.uuid)
                if source is None:
                    raise PluginError(f"backend {backend}: chose device {d.uuid} that node {state.name} "
                                      "does not register")
                usage = overrides[d.uuid] = source.copy()
            usage.used += 1
            usage.usedmem += d.usedmem
            usage.usedcores += d.usedcores
            info = d.custom_info
            if info and MIG_PLACEMENT_CUSTOM_INFO in info:  # later containers must not overlap this MIG instance
                mig_book(usage, (MigInstance(info[MIG_PROFILE_CUSTOM_INFO], info[MIG_PLACEMENT_CUSTOM_INFO]),), 1)

    # ----------------------------------------------------------------------------------- score
    def assignment(self, state: NodeState) -> dict[str, tuple[tuple[ContainerDevice, ...], ...]]:
        return {b: tuple(slots) for b, slots in self.alloc.get(state.name, {}).items()}

    def prescore(self, nodes: Sequence[NodeState], totals: np.ndarray, *, own_at: int | None = None,
                 **context: Any) -> np.ndarray:
        """Every plugin's state-only score per node (``hami_prescore_nodes``), summed.

        ``own_at``: the position in ``nodes`` of the node holding the pod's own reservation (-1: none there),
        when the caller knows it; otherwise it is searched for. ``context``: the optional :class:`NodeBatch`
        fields (rows, generations, shapes, workload, cache).
        """
        total = np.zeros(len(nodes))
        if self.own is not None:
            if own_at is None:
                own_at = next((i for i, state in enumerate(nodes) if state.name == self.own.node), -1)
            if own_at >= 0:  # score the node as if the pod's reservation were gone
                t = self.totals(nodes[own_at])
                totals = totals.copy()
                totals[own_at] = (t.used, t.count, t.usedcores, t.totalcore, t.usedmem, t.totalmem)
        batch = NodeBatch(nodes, totals, **context)
        for answer in self.hook.hami_prescore_nodes(pod=self.pod, batch=batch, policy=self.policy):
            if answer is None:
                continue
            values = np.asarray(answer, dtype=float)
            if values.shape != (len(nodes),):
                raise PluginError(f"hami_prescore_nodes returned {values.shape[0] if values.ndim else 'a scalar'} "
                                  f"scores for {len(nodes)} nodes")
            total += values
        return total

    def score(self, feasible: Sequence[NodeState], pre: Mapping[str, float], *,
              placement: bool = True) -> dict[str, float]:
        """Final scores: the prescore plus every ``hami_score_nodes`` answer (neutral ones signed by policy).

        ``placement=False``: no plugin scores this pod's placement, so the prescore is the score.
        """
        totals = [pre[state.name] for state in feasible]
        scorers = self.hook.score_callers(self.requests.backends()) if placement else []
        if not scorers:
            return {state.name: totals[i] for i, state in enumerate(feasible)}
        candidates = []
        for state in feasible:
            previous = (state.devices if state.name not in self.base
                        else {b: self._devices(state, b, init=True) for b in state.devices})
            candidates.append(ScoreCandidate(state, self.assignment(state), previous, self.totals(state)))
        sign = -NEUTRAL_SCORE_FACTOR if self.policy.node == "spread" else NEUTRAL_SCORE_FACTOR
        answers = [a for call in scorers for a in call(pod=self.pod, candidates=candidates, policy=self.policy)]
        for answer in answers:
            if answer is None:
                continue
            if len(answer) != len(candidates):
                raise PluginError(f"hami_score_nodes returned {len(answer)} scores for {len(candidates)} nodes")
            for i, s in enumerate(answer):
                if s is None:
                    continue
                if not isinstance(s, NodeScore):
                    raise PluginError(f"hami_score_nodes returned {s!r}, expected NodeScore")
                totals[i] += s.value * sign if s.neutral else s.value
        return {state.name: totals[i] for i, state in enumerate(feasible)}

    def rank(self, scores: Mapping[str, float]) -> tuple[str, ...]:
        """Best first: binpack (and any non-spread policy) prefers the highest score, spread the lowest.

        Ties go to the node name in ascending order, so decisions are reproducible.
        """
        if self.policy.node == "spread":
            return tuple(sorted(scores, key=lambda n: (scores[n], n)))
        return tuple(sorted(scores, key=lambda n: (-scores[n], n)))

    def annotations(self, state: NodeState, now: float) -> dict[str, str]:
        out = {keys.VGPU_NODE: state.name, keys.VGPU_TIME: str(int(now))}
        for name, devices in sorted(self.assignment(state).items()):
            results = self.hook.hami_allocation_annotations(backend=self.backends[name], pod=self.pod,
                                                            devices=devices, node=state.name, now=now)
            # pluggy calls the latest-registered plugin first; apply in registration order so that a
            # vendor's keys override the built-in codec's.
            for part in reversed(results):
                if part:
                    out.update(part)
        return out

    def decision(self, chosen: NodeState | None, ranked: tuple[str, ...], scores: Mapping[str, float],
                 now: float, ref: str) -> Decision:
        if chosen is None:
            return Decision(pod=ref, failed=dict(self.failed), requests=self.requests, policy=self.policy)
        return Decision(pod=ref, node=chosen.name, nodes=ranked, failed=dict(self.failed),
                        annotations=self.annotations(chosen, now), devices=self.assignment(chosen),
                        scores=dict(scores), requests=self.requests, policy=self.policy)
