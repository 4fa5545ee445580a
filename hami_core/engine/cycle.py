"""One scheduling decision: fit every container on every candidate node, score, choose (spec §6-§7).

The cycle never changes engine state. Usage of earlier containers of the same pod is tracked in
copy-on-write overrides per node, so a one-container pod touches no device object at all.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any

import numpy as np

from hami_core.engine import vecfit
from hami_core.engine.decision import Decision
from hami_core.engine.inventory import NodeState, mig_book, mig_conflict
from hami_core.engine.ledger import Booking
from hami_core.engine.pods import annotations as pod_annotations
from hami_core.engine.policy import HAMI_GPU_POLICY_TOKENS, sort_devices
from hami_core.engine.scoring import (
    NEUTRAL,
    NEUTRAL_WEIGHT,
    SPREAD,
    Weights,
    log_moves,
    log_moves_enabled,
    scorer_name,
)
from hami_core.engine.table import NodeTable
from hami_core.engine.workload import Shape
from hami_core.plugins.errors import PluginError
from hami_core.plugins.standard import StandardBackend
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
#: Points per unit of a ``NodeScore(neutral=True)`` without a weight (:data:`hami_core.engine.scoring.NEUTRAL_WEIGHT`),
#: under the name vendors imported before the core weighed its scorers.
NEUTRAL_SCORE_FACTOR = NEUTRAL_WEIGHT
log = logging.getLogger("hami.engine.cycle")
#: Fewer candidates than this are fitted per node: the vectorised fit's fixed cost (a few dozen array operations,
#: about 50 µs) exceeds the per-node walk's (about 5 µs a node) below it. Best-first evaluation fits one node, then
#: four, then sixteen...: its first batches stay per node.
VECTOR_MIN_NODES = 12
_EMPTY: list[DeviceUsage] = []
_NO_ALLOC: dict[str, list[tuple[ContainerDevice, ...]]] = {}


class Cycle:
    """State of one :meth:`Engine.schedule` call."""

    def __init__(self, *, hook: Any, backends: Mapping[str, DeviceBackend], pod: Mapping[str, Any], key: str,
                 requests: ContainerRequests, policy: GpuPolicy, own: Booking | None,
                 shapes: Sequence[Shape] = (), workload: Mapping[str, Any] | None = None,
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
        #: What the observing plugins know (``Engine.workload.snapshot()``), for the order and score-default hooks.
        self.observed: Mapping[str, Any] = workload if isinstance(workload, Mapping) else {}
        # A GPU policy token that is not HAMi's belongs to a plugin, which may order each node's devices
        # (hami_order_devices); None: the GPU policy's own order stands.
        self.workload = (self.observed if any(t not in HAMI_GPU_POLICY_TOKENS for t in policy.gpu_tokens)
                         else None)
        self._weights: Weights | None = None
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
        # node → backend → per-position devices chosen so far (an _Assignments once a vectorised fit deferred some)
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
        return [alive[i] for i in self.fit_indices(alive)]

    def fit_indices(self, alive: list[NodeState]) -> list[int]:
        """:meth:`fit`, as the positions in ``alive`` of the nodes where every container fits (ascending)."""
        reqs = self.requests
        at: list[int] | None = None  # positions in the caller's list of the nodes in ``alive`` (None: all)
        for pos, container in enumerate(reqs.containers):
            if not container:
                continue
            init = reqs.is_init(pos)
            container_reqs = list(container.values())
            for name in sorted(container):
                kept = self._fit_backend(alive, pos, init, self.backends[name], container_reqs)
                if not kept:
                    return []
                if len(kept) < len(alive):  # (the common answer for every node at once: all of them)
                    alive = [alive[i] for i in kept]
                at = kept if at is None else [at[i] for i in kept]
        return at if at is not None else list(range(len(alive)))

    def _fit_backend(self, alive: list[NodeState], pos: int, init: bool, backend: DeviceBackend,
                     container_reqs: list[Any]) -> list[int]:
        """One container's request of one backend on ``alive``: the positions of the nodes where it fits."""
        request = self.requests.containers[pos][backend.name]
        quota = self.quota_for(pos, backend)
        options = self._vector_options(alive, backend, request, quota) if len(alive) >= VECTOR_MIN_NODES else None
        if options is not None:
            return self._fit_vector(alive, pos, init, backend, request, container_reqs, quota, options)
        candidates: list[FitCandidate] = []
        offered: list[int] = []
        name = backend.name
        for i, state in enumerate(alive):
            devs = self._devices(state, name, init=init)
            if request.nums > len(devs) and not (self.mig_ok and name in state.mig):
                self.failed[state.name] = Reason.NodeInsufficientDevice
                continue
            candidates.append(self._candidate(state, pos, name, devs, container_reqs))
            offered.append(i)
        if not candidates:
            return []
        results = self._filter(backend, request, candidates, quota)
        if results is None:
            for i in offered:
                self.failed[alive[i].name] = DEVICE_TYPE_NOT_FOUND
            return []
        kept: list[int] = []
        for i, result in zip(offered, results, strict=True):
            if not isinstance(result, FitResult):
                raise _not_a_result(backend, result, alive[i])
            if not result.ok:
                self.failed[alive[i].name] = result.reason
                continue
            self._record(alive[i], pos, init, backend.name, result.devices)
            kept.append(i)
        return kept

    def quota_for(self, pos: int, backend: DeviceBackend) -> QuotaView | None:
        """The pod's quota view for container ``pos`` and ``backend`` (``None``: the backend's resources are not
        limited in the namespace), as ``hami_filter_nodes`` receives it."""
        quota = self.quota
        if quota is None or not quota.limited(backend.resource_names):
            return None
        return QuotaView(quota.namespace, quota.entries, pos, self.requests.init_count)

    def _candidate(self, state: NodeState, pos: int, backend: str, devs: list[DeviceUsage],
                   container_reqs: list[Any]) -> FitCandidate:
        ordered = self._ordered(state, backend, devs, container_reqs)
        if self.workload is not None:
            ordered = self._plugin_ordered(state, pos, backend, ordered, devs)
        return FitCandidate(state, ordered, self.alloc.get(state.name, _NO_ALLOC))

    def _filter(self, backend: DeviceBackend, request: Any, candidates: list[FitCandidate],
                quota: QuotaView | None) -> Sequence[FitResult] | None:
        """``hami_filter_nodes`` on ``candidates``, one answer per candidate (``None``: no plugin knows the
        backend); the caller checks each is a :class:`FitResult` (:func:`_not_a_result`)."""
        results = self.hook.hami_filter_nodes(backend=backend, pod=self.pod, request=request, candidates=candidates,
                                              policy=self.policy, quota=quota)
        if results is not None and len(results) != len(candidates):
            raise PluginError(f"plugin {backend.plugin!r}: hami_filter_nodes returned {len(results)} results "
                              f"for {len(candidates)} candidates (backend {backend.name})")
        return results

    # ------------------------------------------------------------------------- filter, vectorised
    def _vector_options(self, alive: list[NodeState], backend: DeviceBackend, request: Any,
                        quota: QuotaView | None) -> dict[str, Any] | None:
        """The options of the vectorised fit (:mod:`hami_core.engine.vecfit`) when it may replace
        ``hami_filter_nodes`` for this container and backend, else ``None``.

        It may when there are enough candidates to pay for it, they are rows of one node table, the device order
        is the GPU policy's alone (no fragmentation reordering) and one the arrays reproduce, nothing but the
        backend itself answers ``hami_filter_nodes`` (and nothing watches hook calls), and the backend says its
        fit is the plain standard checklist for this pod (:meth:`StandardBackend.vector_fit_options`).
        """
        if self.workload is not None or not isinstance(backend, StandardBackend):
            return None
        if len(self.app) >= len(alive):  # an earlier app container's usage on (about) every node: all per node
            return None
        if not isinstance(alive[0].table, NodeTable) or not vecfit.orderable(self.policy):
            return None
        if not vecfit.plain_filter(self.hook, backend):
            return None
        return backend.vector_fit_options(self.pod, request, self.policy, quota)

    def _fit_vector(self, alive: list[NodeState], pos: int, init: bool, backend: StandardBackend, request: Any,
                    container_reqs: list[Any], quota: QuotaView | None, options: dict[str, Any]) -> list[int]:
        """:meth:`_fit_backend` with the verdicts of most nodes from the device arrays.

        Nodes the arrays cannot speak for go through ``hami_filter_nodes`` as usual: MIG-mode devices, values too
        large for exact float arithmetic, one of the backend's :attr:`~StandardBackend.exact_fit_annotations`, or
        usage this cycle overrides (the pod's own reservation, earlier containers of the pod). Reasons are
        recorded in the per-node path's order: every device-count failure first, then the fit's, in candidate order.
        """
        table = alive[0].table
        assert isinstance(table, NodeTable)
        if table.dirty:
            table.refresh()
        name = backend.name
        rows = table.rows_of(alive)
        grid = table.grid(name)
        short = grid.n[rows] < request.nums
        if self.mig_ok:
            short &= ~grid.mig[rows]
        exact = grid.exact[rows]
        for key in backend.exact_fit_annotations:
            exact = exact | table.annotated(key)[rows]
        if self.base or self.app:
            overridden = np.zeros(len(table.states), dtype=bool)
            overridden[[table.index[n] for n in (*self.base, *self.app) if n in table.index]] = True
            exact = exact | overridden[rows]
        failed = self.failed
        if short.any():
            failed.update(zip([alive[i].name for i in np.flatnonzero(short).tolist()],
                              repeat(Reason.NodeInsufficientDevice)))
        offered = ~short
        fits = np.zeros(len(alive), dtype=bool)
        # per node first: a missing answer fails every offered node, as on the per-node path
        at_exact = np.flatnonzero(offered & exact).tolist()
        exact_results: Sequence[FitResult] = ()
        if at_exact:
            states = [alive[i] for i in at_exact]
            candidates = [self._candidate(state, pos, name, self._devices(state, name, init=init), container_reqs)
                          for state in states]
            answer = self._filter(backend, request, candidates, quota)
            if answer is None:
                failed.update(zip([alive[i].name for i in np.flatnonzero(offered).tolist()],
                                  repeat(DEVICE_TYPE_NOT_FOUND)))
                return []
            exact_results = answer
        at_vector = np.flatnonzero(offered & ~exact)
        vector_failures: tuple[np.ndarray, list[str]] = (at_vector[:0], [])
        if len(at_vector):
            vrows = rows[at_vector]
            order = vecfit.device_order(grid, vrows, table.generation[vrows], self.policy, container_reqs)
            verdicts = vecfit.fit_rows(grid, vrows, order, request, mutex=bool(options.get("mutex")))
            fits[at_vector[verdicts.ok]] = True
            vector_failures = (at_vector[~verdicts.ok], verdicts.reasons)
            self._record_vector(table, vrows[verdicts.ok], verdicts.chosen, pos, init, name, request)
        exact_failures: list[tuple[int, str]] = []
        for i, result in zip(at_exact, exact_results, strict=True):
            if not isinstance(result, FitResult):
                raise _not_a_result(backend, result, alive[i])
            if result.ok:
                self._record(alive[i], pos, init, name, result.devices)
                fits[i] = True
            else:
                exact_failures.append((i, result.reason))
        self._fail_in_order(alive, vector_failures, exact_failures)
        kept: list[int] = np.flatnonzero(fits).tolist()
        return kept

    def _fail_in_order(self, alive: list[NodeState], vector: tuple[np.ndarray, list[str]],
                       exact: list[tuple[int, str]]) -> None:
        """Record the fit's failures of both paths in candidate order."""
        at, reasons = vector
        if not exact:
            self.failed.update(zip([alive[i].name for i in at.tolist()], reasons, strict=True))
            return
        merged = sorted([*zip(at.tolist(), reasons, strict=True), *exact])
        self.failed.update((alive[i].name, reason) for i, reason in merged)

    def _record_vector(self, table: NodeTable, rows: np.ndarray, chosen: np.ndarray, pos: int, init: bool,
                       backend: str, request: Any) -> None:
        """Book the vectorised survivors' devices: deferred until read, unless later containers of the pod must
        see them (then now, with the usage overrides of :meth:`_record`)."""
        if not len(rows):
            return
        if init or pos >= self.last_app:
            alloc = self.alloc
            if not isinstance(alloc, _Assignments):  # the first deferred pick: from now on reads fill picks in
                alloc = self.alloc = _Assignments(self.positions, alloc)
            alloc.defer(_Pick(table, rows, chosen, pos, backend, request))
            return
        states = table.states
        for row, positions in zip(rows.tolist(), chosen.tolist(), strict=True):
            state = states[row]
            assert state is not None
            self._record(state, pos, init, backend,
                         vecfit.chosen_devices(state.devices[backend], positions, request))

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

    def _plugin_ordered(self, state: NodeState, pos: int, backend: str, ordered: list[DeviceUsage],
                        devs: list[DeviceUsage]) -> list[DeviceUsage]:
        """``ordered`` as the plugin of the pod's GPU policy orders it (``hami_order_devices``; unchanged when none
        answers). ``devs``: the node's devices in registration order, with this pod's earlier containers."""
        result = self.hook.hami_order_devices(
            pod=self.pod, node=state, request=self.requests.containers[pos][backend],
            shape=self.shape_at.get((pos, backend)), host=self.host_need, devices=devs, ordered=ordered,
            policy=self.policy, state=self.observed)
        if result is None:
            return ordered
        if len(result) != len(ordered):
            raise PluginError(f"hami_order_devices returned {len(result)} devices for the {len(ordered)} of node "
                              f"{state.name} (backend {backend})")
        return result if isinstance(result, list) else list(result)

    def _record(self, state: NodeState, pos: int, init: bool, backend: str,
                devices: tuple[ContainerDevice, ...]) -> None:
        alloc = self.alloc
        if isinstance(alloc, _Assignments) and alloc.picks:
            alloc.resolve(state.name)  # the node's earlier vectorised picks first, in the order they were made
        _place(alloc, state.name, backend, pos, devices, self.positions)
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

    def weights(self) -> Weights:
        """The scorers' weights for this pod: ``scheduler.scoreWeights`` over its node policy's defaults
        (``hami_score_defaults``), asked once per decision (see :mod:`hami_core.engine.scoring`)."""
        if self._weights is None:
            answers = self.hook.hami_score_defaults(policy=self.policy, state=self.observed)
            self._weights = Weights.of(answers, self.policy.node)
        return self._weights

    def prescore(self, nodes: Sequence[NodeState], totals: np.ndarray, *, own_at: int | None = None,
                 **context: Any) -> np.ndarray:
        """Every scorer's state-only score per node (``hami_prescore_nodes``), weighed and summed, as reported: in
        the node policy's orientation (under spread the lowest is best; :mod:`hami_core.engine.scoring`).

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
        observed = context.get("workload")
        if not self.observed and isinstance(observed, Mapping):  # a pod without devices: the state comes here
            self.observed = observed
        batch = NodeBatch(nodes, totals, **context)
        weights = self.weights()
        parts: list[tuple[str, np.ndarray]] = []
        for name, answer in self._prescores(batch, weights):
            if answer is None:
                continue
            values = np.asarray(answer, dtype=float)
            if values.shape != (len(nodes),):
                raise PluginError(f"hami_prescore_nodes returned {values.shape[0] if values.ndim else 'a scalar'} "
                                  f"scores for {len(nodes)} nodes")
            factor = weights.factor(name)
            if factor != 1.0:  # (a scorer without a weight adds its own points, untouched)
                values = values * factor
            total += values
            parts.append((name, values))
        if log_moves_enabled():  # (the node names cost more than the sum on a large cluster)
            log_moves("prescore", [s.name for s in nodes], total, parts, weights)
        return total

    def _prescores(self, batch: NodeBatch, weights: Weights) -> Iterator[tuple[str, Any]]:
        """Each ``hami_prescore_nodes`` implementation's answer with its scorer's name, in pluggy's call order (so
        the sum is the one pluggy's list gives). A scorer weighing 0 is not asked."""
        caller = self.hook.hami_prescore_nodes
        impls = caller.get_hookimpls()
        kwargs = {"pod": self.pod, "batch": batch, "policy": self.policy}
        if any(impl.hookwrapper or impl.wrapper for impl in impls):  # a wrapper needs the whole call: one scorer
            for answer in caller(**kwargs):
                yield "prescore", answer
            return
        for impl in reversed(impls):
            name = scorer_name(impl.plugin_name, impl.plugin)
            if weights.factor(name) != 0.0:
                yield name, impl.function(*[kwargs[arg] for arg in impl.argnames])

    def score(self, feasible: Sequence[NodeState], pre: Mapping[str, float], *,
              placement: bool = True) -> dict[str, float]:
        """Final scores, as reported (the node policy's orientation): the prescore plus every weighed
        ``hami_score_nodes`` answer (:mod:`hami_core.engine.scoring`).

        ``placement=False``: no plugin scores this pod's placement, so the prescore is the score.
        """
        totals = [pre[state.name] for state in feasible]
        scorers = self._placement_scorers() if placement else []
        if not scorers:
            return {state.name: totals[i] for i, state in enumerate(feasible)}
        candidates = []
        for state in feasible:
            previous = (state.devices if state.name not in self.base
                        else {b: self._devices(state, b, init=True) for b in state.devices})
            candidates.append(ScoreCandidate(state, self.assignment(state), previous, self.totals(state)))
        weights = self.weights()
        kwargs = {"pod": self.pod, "candidates": candidates, "policy": self.policy}
        answers = [(name, answer) for name, call in scorers for answer in call(kwargs)]
        parts: dict[str, np.ndarray] | None = {} if log_moves_enabled() else None
        for name, answer in answers:
            if answer is None:
                continue
            if len(answer) != len(candidates):
                raise PluginError(f"hami_score_nodes returned {len(answer)} scores for {len(candidates)} nodes")
            for i, s in enumerate(answer):
                if s is None:
                    continue
                if not isinstance(s, NodeScore):
                    raise PluginError(f"hami_score_nodes returned {s!r}, expected NodeScore")
                scorer = name + NEUTRAL if s.neutral else name
                factor = weights.factor(scorer)
                added = s.value if factor == 1.0 else s.value * factor
                totals[i] += added
                if parts is not None:
                    parts.setdefault(scorer, np.zeros(len(candidates)))[i] += added
        if parts is not None:
            log_moves("score", [s.name for s in feasible], np.array(totals), list(parts.items()), weights)
        return {state.name: totals[i] for i, state in enumerate(feasible)}

    def _placement_scorers(self) -> list[tuple[str, Callable[[dict[str, Any]], list[Any]]]]:
        """The ``hami_score_nodes`` callers for this pod (``score_callers``: the broadcast implementations, then
        each requested backend object's own), split into one caller per scorer, in the relay's call order."""
        wanted = self.requests.backends()
        callers = self.hook.score_callers(wanted)
        singles = [c for c in callers if not hasattr(c, "get_hookimpls")]
        names = self._backend_scorers(wanted) if singles else []
        if len(names) != len(singles):  # a relay this code does not know how to read: unnamed, weighed as one
            names = ["score"] * len(singles)
        named = iter(names)
        out: list[tuple[str, Callable[[dict[str, Any]], list[Any]]]] = []
        for caller in callers:
            if not hasattr(caller, "get_hookimpls"):
                out.append((next(named), lambda kw, c=caller: c(**kw)))
                continue
            impls = caller.get_hookimpls()
            if any(impl.hookwrapper or impl.wrapper for impl in impls):
                out.append(("score", lambda kw, c=caller: c(**kw)))
                continue
            out.extend((scorer_name(impl.plugin_name, impl.plugin),
                        lambda kw, f=impl.function, args=tuple(impl.argnames): [f(**{a: kw[a] for a in args})])
                       for impl in reversed(impls))
        return out

    def _backend_scorers(self, wanted: Iterable[str]) -> list[str]:
        """The scorer of each requested backend object's own ``hami_score_nodes``, in ``score_callers``' order."""
        broadcast = self.hook.hami_score_nodes
        out = []
        for name in sorted(wanted):
            backend = self.backends.get(name)
            if backend is None:
                continue
            relay = self.hook.relay(backend)
            if relay.hami_score_nodes is broadcast:
                continue  # a legacy backend: its plugin's score is a broadcast implementation
            out.extend(scorer_name(impl.plugin_name, backend) for impl in relay.hami_score_nodes.get_hookimpls()
                       if impl.plugin is backend)
        return out

    def rank(self, scores: Mapping[str, float]) -> tuple[str, ...]:
        """Best first: the highest score, which is the lowest reported figure under spread (HAMi reports its spread
        score as occupancy). Ties go to the node name in ascending order, so decisions are reproducible."""
        orientation = -1.0 if self.policy.node == SPREAD else 1.0
        return tuple(sorted(scores, key=lambda n: (-orientation * scores[n], n)))

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
        if self.failed and log.isEnabledFor(logging.DEBUG):
            log.debug("%s: filters removed %d nodes: %s", ref, len(self.failed), _reason_counts(self.failed.values()))
        if chosen is None:
            return Decision(pod=ref, failed=dict(self.failed), requests=self.requests, policy=self.policy)
        return Decision(pod=ref, node=chosen.name, nodes=ranked, failed=dict(self.failed),
                        annotations=self.annotations(chosen, now), devices=self.assignment(chosen),
                        scores=dict(scores), requests=self.requests, policy=self.policy)


# ----------------------------------------------------------------------------------- filter helpers
def _not_a_result(backend: DeviceBackend, result: object, state: NodeState) -> PluginError:
    return PluginError(f"plugin {backend.plugin!r}: hami_filter_nodes returned {result!r} for node {state.name}, "
                       "expected FitResult")


def _place(alloc: dict[str, dict[str, list[tuple[ContainerDevice, ...]]]], node: str, backend: str, pos: int,
           devices: tuple[ContainerDevice, ...], positions: int) -> None:
    per_backend = dict.setdefault(alloc, node, {})  # the plain dict's: placing a pick must not resolve picks again
    slots = per_backend.get(backend)
    if slots is None:
        slots = per_backend[backend] = [()] * positions
    slots[pos] = devices


class _Pick:
    """The devices one vectorised fit chose on its surviving rows, turned into :class:`ContainerDevice` objects only
    for the nodes someone reads (usually just the chosen one): thousands of per-node tuples would cost more than
    the fit, and wake the cyclic garbage collector."""

    __slots__ = ("at", "backend", "chosen", "lines", "pos", "reads", "request", "table")

    #: Reads after which the pick's arrays become Python lists (a placement scorer reads every node).
    LISTS_AFTER = 16

    def __init__(self, table: NodeTable, rows: np.ndarray, chosen: np.ndarray, pos: int, backend: str,
                 request: Any) -> None:
        self.table = table
        self.at = np.full(len(table.states), -1, dtype=np.intp)  # row → its line in ``chosen``; -1 once placed
        self.at[rows] = np.arange(len(rows))
        self.chosen = chosen
        self.lines: tuple[list[int], list[list[int]]] | None = None  # ``at`` and ``chosen`` as lists
        self.reads = 0
        self.pos = pos
        self.backend = backend
        self.request = request

    def resolve(self, node: str, alloc: _Assignments) -> None:
        row = self.table.index.get(node)
        if row is None:
            return
        lines = self.lines
        if lines is None:
            self.reads += 1
            if self.reads > self.LISTS_AFTER:
                lines = self.lines = (self.at.tolist(), self.chosen.tolist())
        if lines is None:
            line = int(self.at[row])
            if line < 0:
                return
            self.at[row] = -1
            positions = self.chosen[line].tolist()
        else:
            line = lines[0][row]
            if line < 0:
                return
            lines[0][row] = -1
            positions = lines[1][line]
        state = self.table.states[row]
        assert state is not None
        devices = vecfit.chosen_devices(state.devices[self.backend], positions, self.request)
        _place(alloc, node, self.backend, self.pos, devices, alloc.positions)


class _Assignments(dict[str, dict[str, list[tuple[ContainerDevice, ...]]]]):
    """``Cycle.alloc``: node → backend → per-position devices, where a node's vectorised picks are filled in, in
    the order they were made, before the node is first read or written."""

    def __init__(self, positions: int, placed: Mapping[str, dict[str, list[tuple[ContainerDevice, ...]]]]) -> None:
        super().__init__(placed)
        self.positions = positions
        self.picks: list[_Pick] = []

    def defer(self, pick: _Pick) -> None:
        self.picks.append(pick)

    def resolve(self, node: str) -> None:
        """Fill in ``node``'s vectorised picks (each once)."""
        for pick in self.picks:
            pick.resolve(node, self)

    def get(self, node: str, default: Any = None) -> Any:  # type: ignore[override]
        if self.picks:
            self.resolve(node)
        return super().get(node, default)

    def setdefault(self, node: str, default: Any = None) -> Any:  # type: ignore[override]
        if self.picks:
            self.resolve(node)
        return super().setdefault(node, default)

    def __getitem__(self, node: str) -> dict[str, list[tuple[ContainerDevice, ...]]]:
        if self.picks:
            self.resolve(node)
        return super().__getitem__(node)

    def __contains__(self, node: object) -> bool:
        if self.picks and isinstance(node, str):
            self.resolve(node)
        return super().__contains__(node)


def _reason_counts(reasons: Iterable[str]) -> str:
    """``reason count, ...`` over the rejected nodes, most frequent first (``1/8 CardInsufficientMemory`` counts
    as ``CardInsufficientMemory``)."""
    counts: Counter[str] = Counter()
    for reason in reasons:
        for item in reason.split(", "):
            counts[item.split(" ", 1)[1] if item[:1].isdigit() and " " in item else item] += 1
    return ", ".join(f"{r} {n}" for r, n in counts.most_common())
