"""The kube-scheduler extender verbs ``filter`` and ``bind`` (spec §5.2, §6.1, §6.9-§6.11, §8.1, B.3).

Wire shapes are ``k8s.io/kube-scheduler/extender/v1`` (:mod:`.extwire`). The engine is shared with the watch feed
(:mod:`.sync`) and guarded by one lock; the lock is never held while calling the cluster (a cluster may deliver
watch events synchronously from the writing thread). A filter crosses into the engine once to read the pod's
requests and once for its transaction (:meth:`Engine.refilter <hami_core.engine.facade.Engine.refilter>`:
unreserve, schedule, reserve); bind's fit check is the engine's too
(:meth:`Engine.check_bind <hami_core.engine.facade.Engine.check_bind>`).

Beyond HAMi, for reliability (docs/reliability.md):

* writes that fail transiently (HTTP 5xx, 409 on a plain patch, timeouts, lost responses) are retried with
  backoff; a merge patch is idempotent, and a Binding whose response was lost is recognised by re-reading the
  pod (``spec.nodeName`` already ours), so a bound pod is never reported as failed nor its lock released;
* where the allocation is written (``--write-allocation``) is one of two strategies (:mod:`.writes`): at filter
  (HAMi's), where a pod patch that finally fails leaves the ledger as the API server has the pod, or at bind;
* bind re-checks, under the node lock, that the pod's devices still fit next to the pods already bound to the
  node, read fresh from the API server: the node lock serialises binds on a node across scheduler replicas,
  so two replicas whose ledgers lag each other's reservations can never over-commit a device.

Trust (docs/security.md): a request body is believed for nothing but the namespace, name and UID it names
(:mod:`.podgate`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.cluster.base import Cluster, NotFoundError
from hami_core.cluster.devicemode import extender_refusal
from hami_core.cluster.refs import PodRef
from hami_core.cluster.retry import not_temporary
from hami_core.engine.bindcheck import Overcommit
from hami_core.engine.facade import Engine
from hami_core.engine.pods import annotations, containers, is_terminal, metadata, pod_key, pod_ref, pod_shape_error
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import ContainerRequests, LockSpec
from hami_core.scheduler.extwire import (
    BINDING_FAILED,
    BINDING_SUCCEED,
    FILTERING_FAILED,
    FILTERING_SUCCEED,
    NORMAL,
    WARNING,
    BadRequest,
    NodeNames,
    filter_result,
    lower_keys,
)
from hami_core.scheduler.inflight import DEFAULT_INFLIGHT_LIMIT, InFlight
from hami_core.scheduler.nodelock import DEFAULT_RETRY_TIMEOUT_S, DEFAULT_TIMEOUT_S, LockContention, NodeLocker, retry
from hami_core.scheduler.podgate import MAX_PASSED, PodGate
from hami_core.scheduler.podview import PodView
from hami_core.scheduler.preemption import Preemption, passthrough_victims
from hami_core.scheduler.reasons import FilterReasons
from hami_core.scheduler.reqmetrics import BIND_REASONS, RequestMetrics
from hami_core.scheduler.requeue import DEFAULT_NUDGE_INTERVAL_S, RequeueNudger
from hami_core.scheduler.writes import (
    DECISION_TTL_S,
    EXPIRE_BATCH,
    MAX_DECIDED,
    MAX_FILTERED,
    AllocationWrites,
    Unwritten,
    WriteAtBind,
    WriteAtFilter,
)
from hami_core.wire import keys
from hami_core.wire.reasons import parse_reasons
from hami_core.wire.times import encode_unix_seconds

# the extender's vocabulary, importable from here as before the split
__all__ = ["DECISION_TTL_S", "EXPIRE_BATCH", "MAX_DECIDED", "MAX_FILTERED", "MAX_PASSED", "WRITE_ALLOCATION",
           "BadRequest", "Extender", "Overcommit", "Unwritten", "filter_result", "lower_keys"]

log = logging.getLogger("hami.scheduler.extender")

#: ``--write-allocation`` choices, and the strategy each one is.
WRITES: dict[str, type[AllocationWrites]] = {"filter": WriteAtFilter, "bind": WriteAtBind}
WRITE_ALLOCATION = tuple(WRITES)
#: How long a filter waits for this scheduler's Pod watch to deliver the pod it names before reading the pod from
#: the API server once (kube-scheduler filters a pod milliseconds after its creation; the watch lags as much).
VIEW_WAIT_S = 0.5


def _final(exc: BaseException) -> bool:
    """True for errors not worth retrying: contention, and project errors that are not temporary (404, 403, 422,
    over-commit)."""
    return isinstance(exc, LockContention) or not_temporary(exc)


def _same_containers(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two copies of a pod with the same containers have the same device requests."""
    return a is b or containers(a) == containers(b)


def _bind_failure(exc: BaseException) -> str:
    """The reason word of a bind that failed with ``exc`` after its pod and node were found."""
    if isinstance(exc, LockContention):
        return "lock_contention"
    if isinstance(exc, Overcommit):
        return "overcommit"
    if isinstance(exc, NotFoundError):
        return "node_not_found"
    return "api_error"


class _Phases:
    """Times the phases of one bind into :meth:`RequestMetrics.bind_phase`: ``with phases("node_lock"): ...``
    observes the block's duration, with ``result="error"`` when it raised or :meth:`failed` was called in it."""

    __slots__ = ("_failed", "_name", "_started", "metrics")

    def __init__(self, metrics: RequestMetrics) -> None:
        self.metrics = metrics
        self._name = ""
        self._started = 0.0
        self._failed = False

    def __call__(self, name: str) -> _Phases:
        self._name, self._failed = name, False
        return self

    def failed(self) -> None:
        self._failed = True

    def __enter__(self) -> None:
        self._started = time.perf_counter()

    def __exit__(self, kind: object, _value: object, _tb: object) -> None:
        self.metrics.bind_phase(self._name, kind is None and not self._failed, time.perf_counter() - self._started)


class Extender:
    """HAMi's extender on an :class:`Engine` and a :class:`Cluster`.

    :param engine: the shared engine (fed by :class:`~hami_core.scheduler.sync.Sync`).
    :param cluster: where pods are patched and bound and events recorded.
    :param scheduler_name: event source component (``--scheduler-name``).
    :param lock_timeout: node lock expiry in seconds (``--node-lock-timeout``).
    :param lock_retry_timeout: PodGroup contention wait (``--node-lock-retry-timeout``).
    :param lock_wait: every other pod's contention wait (``--node-lock-wait``; 0 fails at once, as HAMi).
    :param write_allocation: where the pod's allocation annotations are written (``--write-allocation``):
        ``filter`` (HAMi: filter patches the pod before answering) or ``bind`` (filter books the devices and
        answers; bind writes the allocation with the bind phase, in one patch under the node lock).
    :param engine_lock: the lock around engine access (share it with the sync feed).
    :param ready: ``ready(timeout_s) -> bool`` waits for the first registration pass (§6.1).
    :param sync_wait_s: how long filter waits for ``ready`` before answering ``context cancelled``.
    :param inflight_limit: ``--node-inflight-limit`` (:mod:`.inflight`; 0 places as HAMi).
    :param normal_events: ``--normal-events``: post the Normal events HAMi posts for every pod (warnings are always
        posted).
    :param pods: this scheduler's view of the pods (:attr:`Sync.pods <hami_core.scheduler.sync.Sync.pods>`), where
        a filter finds the pod a request names; without one every filter reads its pod from the cluster.
    """

    def __init__(self, engine: Engine, cluster: Cluster, *, scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME,
                 lock_timeout: float = DEFAULT_TIMEOUT_S, lock_retry_timeout: float = DEFAULT_RETRY_TIMEOUT_S,
                 engine_lock: threading.RLock | None = None, ready: Callable[[float], bool] | None = None,
                 sync_wait_s: float = 30.0, clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], None] | None = None, lock_wait: float = 0.0,
                 write_allocation: str = "filter", inflight_limit: int = DEFAULT_INFLIGHT_LIMIT,
                 normal_events: bool = True, pods: PodView | None = None,
                 requeue_nudge_s: float = DEFAULT_NUDGE_INTERVAL_S, filter_reasons: bool = True,
                 preemption: bool = True) -> None:
        if write_allocation not in WRITES:
            raise ValueError(f"unknown allocation write {write_allocation!r}: choose one of "
                             f"{', '.join(WRITE_ALLOCATION)}")
        self.engine = engine
        self.cluster = cluster
        self.scheduler_name = scheduler_name
        self.lock = engine_lock if engine_lock is not None else threading.RLock()
        self.ready = ready
        self.sync_wait_s = sync_wait_s
        self.clock = clock if clock is not None else engine.clock
        self._names = NodeNames()
        self.locker = NodeLocker(cluster, timeout_s=lock_timeout, retry_timeout_s=lock_retry_timeout,
                                 wait_s=lock_wait, clock=self.clock, sleep=sleep)
        #: where the allocation is written: the steps of filter and bind that depend on it
        self.writes: AllocationWrites = WRITES[write_allocation](self)
        self.decision_ttl_s = DECISION_TTL_S
        #: ``--normal-events``: post HAMi's FilteringSucceed / BindingSucceed (two writes a pod); warnings always
        self.normal_events = normal_events
        #: pods between filter and Allocate per node (``--node-inflight-limit``; :mod:`.inflight`)
        self.inflight = InFlight(inflight_limit, self.clock)
        #: where a request's pod is looked up (None: read from the cluster each time)
        self.pods = pods
        self.view_wait_s = VIEW_WAIT_S
        #: the schedulerName of the pods this scheduler filters and binds (what its webhook writes into them)
        self.ours = engine.config.scheduler.scheduler_name or "default-scheduler"
        #: whom a request names
        self.gate = PodGate(self)
        #: filters whose pod the view did not hold after the wait, so it was read from the API server
        self.view_misses = 0
        #: filters and binds refused because the pod named could not be identified as a pending pod of ours
        self.refused = 0
        #: ``--requeue-nudge``: after a release, make kube-scheduler retry the pods this filter refused
        #: (None: off); its writer thread is started by the scheduler app
        self.nudger = RequeueNudger(cluster, min_interval_s=requeue_nudge_s) if requeue_nudge_s > 0 else None
        #: ``--filter-reasons``: keep a refused pod's per-node reasons on it (hami.io/filter-reasons; None: off); its
        #: writer thread is started by the scheduler app (:mod:`.reasons`)
        self.reasons = FilterReasons(cluster, write=self.write) if filter_reasons else None
        #: what filters and binds did (the scheduler app shares one with its webhook and serves it on /metrics)
        self.metrics = RequestMetrics()
        #: ``--preemption``: device-aware preemption after a filter finds no node, and the preempt verb
        #: (:mod:`.preemption`; None: off, the verb then passes kube-scheduler's victims through)
        self.preemption = Preemption(engine, cluster, self.lock, event=self._post_event) if preemption else None

    @property
    def decided(self) -> OrderedDict[tuple[str, str], Unwritten] | None:
        """``--write-allocation bind``: pod (namespace, name) → what this replica's filter decided and has not
        written yet, oldest first (``None`` under ``--write-allocation filter``)."""
        return self.writes.decided

    # ------------------------------------------------------------------------------------ filter
    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /filter``: ``ExtenderArgs`` → ``ExtenderFilterResult``; counted and timed in :attr:`metrics`."""
        started = time.perf_counter()
        reason = "exception"
        try:
            result, reason = self._filter(args)
            return result
        except BadRequest:
            reason = "bad_request"
            raise
        finally:
            self.metrics.filtered(reason, time.perf_counter() - started)

    def _filter(self, args: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """The filter's answer, and its reason word (:data:`~.reqmetrics.FILTER_REASONS`)."""
        low = lower_keys(args, "ExtenderArgs")
        pod = low.get("pod")
        if pod is None:
            return filter_result(error="extender args missing pod"), "missing_pod"
        if not isinstance(pod, Mapping):
            raise BadRequest(f"ExtenderArgs.Pod must be a Pod object, got {type(pod).__name__}")
        shape = pod_shape_error(pod)
        if shape is not None:
            raise BadRequest(f"ExtenderArgs.Pod {pod_ref(pod)}: {shape}")
        names = self._names.check(low.get("nodenames"))
        nodes = low.get("nodes")
        if nodes is not None and not isinstance(nodes, Mapping):
            raise BadRequest("ExtenderArgs.Nodes must be a NodeList object")
        if self.ready is not None and not self.ready(self.sync_wait_s):
            return filter_result(error="context cancelled"), "not_synced"
        if nodes is not None:  # a simulation changes nothing and tells nothing of other pods: the body will do
            with self.lock:
                requests = self.engine.requests(pod)
            if requests.empty:
                return filter_result(node_names=list(names) if names is not None else None), "no_device_request"
            return self._simulate(pod, nodes, requests)

        refused_before = self.refused
        pod, refusal = self.gate.for_filter(pod)
        if pod is None:  # the gate counts refusals; anything else is a failed read
            return filter_result(error=refusal), "pod_refused" if self.refused > refused_before else "pod_read_failed"
        with self.lock:
            requests = self.engine.requests(pod)
        if requests.empty:
            self.gate.passed(pod)
            return filter_result(node_names=list(names) if names is not None else None), "no_device_request"
        names = names if names is not None else []
        names, dra_failed = self._without_dra_nodes(names)
        self.writes.before_filter()

        with self.lock:  # re-filtered: its earlier reservation no longer counts (§6.1 step 4)
            decision = self.engine.refilter(pod, names, avoid=self.inflight.busy(pod), requests=requests)
            if decision.ok:
                self.inflight.add(pod, decision.node or "")
                self.writes.reserved(pod, decision)
        if decision.error:
            self.event(pod, WARNING, FILTERING_FAILED, decision.error)
            if self.reasons is not None:
                self.reasons.refused(pod, {}, len(names), error=decision.error)
            return filter_result(error=decision.error), "decision_error"
        if not decision.ok:
            self._filtering_failed(pod, decision.failed, len(names))
            if self.nudger is not None:
                self.nudger.refused(pod_key(pod))
            if self.reasons is not None:
                self.reasons.refused(pod, decision.failed, len(names))
            failed, unresolvable = self._preempt_after_no_fit(pod, decision.failed)
            return filter_result(failed={**dra_failed, **failed}, unresolvable=unresolvable), "no_fit"
        text = self.writes.after_filter(pod, decision, requests)
        if text:
            return filter_result(error=text), "write_failed"

        node = decision.node or ""
        fit = ",".join(f"{n}:{decision.scores[n]:.2f}" for n in sorted(decision.scores))
        self.event(pod, NORMAL, FILTERING_SUCCEED,
                   f"find fit node({node}), {len(names) - len(decision.scores)} nodes not fit, "
                   f"{len(decision.scores)} nodes fit({fit})")
        return filter_result(node_names=[node]), "scheduled"

    def _without_dra_nodes(self, names: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """One mode per node (issue 30): the candidates less the nodes labelled ``hami.io/device-mode: dra``, whose
        devices kube-scheduler's DRA allocator hands out, and those nodes with the reason they failed."""
        failed: dict[str, str] = {}
        kept = []
        for name in names:
            state = self.engine.nodes.get(name)
            reason = extender_refusal({"metadata": {"labels": state.labels}}) if state is not None else None
            if reason is None:
                kept.append(name)
            else:
                failed[name] = reason
        return kept, failed

    def _preempt_after_no_fit(self, pod: Mapping[str, Any],
                              failed: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """(FailedNodes, FailedAndUnresolvableNodes) of a filter that found no node, after hami's own preemption
        (:mod:`.preemption`): nodes no preemption fixes are unresolvable; once hami preempts on a node, every other
        node is too, so that kube-scheduler's own preemption does not evict a second set elsewhere."""
        if self.preemption is None:
            return dict(failed), {}
        with self.lock:
            unresolvable = self.preemption.unresolvable(pod, failed)
        resolvable = {n: r for n, r in failed.items() if n not in unresolvable}
        done = self.preemption.after_no_fit(pod, resolvable) if resolvable else None
        if done is not None:
            unresolvable.update({n: r for n, r in resolvable.items() if n != done.node})
            resolvable = {done.node: resolvable[done.node]}
        return resolvable, unresolvable

    # ------------------------------------------------------------------------------------ preempt
    def preempt(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /preempt``: ``ExtenderPreemptionArgs`` → ``ExtenderPreemptionResult`` (:meth:`.Preemption.verb`).
        With preemption off, kube-scheduler's victims are passed back unchanged."""
        if self.preemption is None:
            return passthrough_victims(args)
        return self.preemption.verb(args)

    def _post_event(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        # preemption's events are posted whatever --normal-events says: kube-scheduler always posts Preempted
        try:
            self.cluster.event(obj, event_type, reason, message)
        except Exception as exc:  # events are best effort
            log.debug("event %s for %s not recorded: %s", reason, pod_ref(obj), exc)

    def _simulate(self, pod: Mapping[str, Any], nodes: Mapping[str, Any],
                  requests: ContainerRequests) -> tuple[dict[str, Any], str]:
        """§6.11: fit onto the supplied Node objects on a throwaway engine; no usage, events or patches."""
        items = nodes.get("items", nodes.get("Items")) or []
        if not isinstance(items, list) or not all(isinstance(n, Mapping) for n in items):
            raise BadRequest("ExtenderArgs.Nodes.items must be a list of Node objects")
        by_name: dict[str, Mapping[str, Any]] = {}
        for node in items:
            name = metadata(node).get("name")
            if not isinstance(name, str) or not name:
                raise BadRequest("ExtenderArgs.Nodes: a node has no metadata.name")
            by_name[name] = node
        dra_failed = {n: r for n, node in by_name.items() if (r := extender_refusal(node)) is not None}  # issue 30
        items = [node for node in items if metadata(node).get("name") not in dra_failed]
        decision = self.engine.simulate(pod, items, requests=requests)
        if decision.error:
            return filter_result(error=decision.error), "decision_error"
        if not decision.ok:
            return filter_result(failed={**dra_failed, **decision.failed}), "simulated_no_fit"
        return filter_result(nodes={"items": [dict(by_name[decision.node or ""])]},
                             failed={**dra_failed, **decision.failed} or None), "simulated"

    def _filtering_failed(self, pod: Mapping[str, Any], failed: Mapping[str, str], total: int) -> None:
        grouped: dict[str, set[str]] = {}
        for node, reason in failed.items():
            for word in parse_reasons(reason):
                grouped.setdefault(word, set()).add(node)
        self.metrics.node_failure_words(word for word, members in grouped.items() for _ in members)
        for word in sorted(grouped):
            members = sorted(grouped[word])
            self.event(pod, WARNING, FILTERING_FAILED, f"{len(members)} nodes {word}({','.join(members)})")
        self.event(pod, WARNING, FILTERING_FAILED, f"no available node, {total} nodes do not meet")

    # ------------------------------------------------------------------------------------ bind
    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /bind``: ``ExtenderBindingArgs`` → ``ExtenderBindingResult``; counted, and timed per phase, in
        :attr:`metrics`."""
        started = time.perf_counter()
        reason = "exception"
        try:
            result, reason = self._bind_request(args)
            return result
        except BadRequest:
            reason = "bad_request"
            raise
        finally:
            self.metrics.bound(reason)
            self.metrics.bind_phase("total", BIND_REASONS[reason] == "success", time.perf_counter() - started)

    def _bind_request(self, args: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
        """The bind's answer, and its reason word (:data:`~.reqmetrics.BIND_REASONS`)."""
        low = lower_keys(args, "ExtenderBindingArgs")
        name, namespace, uid, node = (low.get(k) for k in ("podname", "podnamespace", "poduid", "node"))
        # kube-scheduler always sends the pod's UID: it is what tells the pod apart from a deleted one of its name
        for field_name, value in (("PodName", name), ("PodUID", uid), ("Node", node)):
            if not isinstance(value, str) or not value:
                raise BadRequest(f"ExtenderBindingArgs.{field_name} must be a non-empty string")
        if namespace is not None and not isinstance(namespace, str):
            raise BadRequest(f"ExtenderBindingArgs.PodNamespace must be a string, got {type(namespace).__name__}")
        assert isinstance(name, str) and isinstance(uid, str) and isinstance(node, str)  # checked above
        ref = PodRef(namespace or "default", name)
        phase = time.perf_counter()
        found, requests, from_filter, text = self.gate.for_bind(ref, uid)
        self.metrics.bind_phase("pod_lookup", found is not None, time.perf_counter() - phase)
        if found is None:
            self.refused += 1
            log.warning("bind %s to %s refused: %s", ref, node, text)
            return {"Error": text}, "pod_refused"
        pod = found
        text, done, requests = self.gate.bind_refusal(pod, ref, uid, node, from_filter, requests)
        if done:
            log.info("bind %s: already bound to node %s; nothing to do", ref, node)
            return {"Error": ""}, "already_bound"
        if text:
            self.refused += 1
            log.warning("bind %s to %s refused: %s", ref, node, text)
            return {"Error": text}, "pod_refused"
        pod, allocation, text = self.writes.at_bind(pod, ref, node)
        if text:
            log.warning("bind: %s", text)
            self.event(pod, WARNING, BINDING_FAILED, text)
            return {"Error": text}, "write_failed"
        try:
            return self._bind_locked(pod, ref, uid, node, allocation, from_filter, requests)
        finally:
            self.writes.bind_finished(ref)

    def _bind_locked(self, pod: Mapping[str, Any], ref: PodRef, uid: str, node: str, allocation: dict[str, str],
                     from_filter: bool, requests: ContainerRequests | None) -> tuple[dict[str, Any], str]:
        """The bind of a pod identified and judged bindable: node lock, over-commit check, Binding. Each phase is
        timed (:data:`~.reqmetrics.BIND_PHASES`), and the phase that failed is observed with ``result="error"``."""
        namespace, name = ref
        timer = _Phases(self.metrics)
        try:
            with timer("node_lookup"):
                node_obj, node_fresh = self._node_to_bind(node)
        except Exception as exc:
            with self.lock:
                self.engine.unreserve(pod)
            self.event(pod, WARNING, BINDING_FAILED, f"failed to get node {node}")
            return {"Error": str(exc)}, "node_not_found" if isinstance(exc, NotFoundError) else "api_error"

        held: list[LockSpec] = []
        try:
            with self.lock:
                specs = self.engine.lock_specs(pod, requests=requests)
            seen: Mapping[str, Any] | None = node_obj
            with timer("node_lock"):
                for spec in specs:
                    try:
                        seen = self.locker.acquire(node, pod, spec, seen, seen_fresh=node_fresh)
                        node_fresh = True
                    except Exception as exc:
                        for done in reversed(held):
                            self._release_quietly(node, pod, done)
                        held.clear()
                        if isinstance(exc, NotFoundError) and not node_fresh:  # the watch had not seen it go yet
                            with self.lock:
                                self.engine.unreserve(pod)
                            self.event(pod, WARNING, BINDING_FAILED, f"failed to get node {node}")
                            timer.failed()
                            return {"Error": str(exc)}, "node_not_found"
                        raise
                    if spec not in held:
                        held.append(spec)
            with timer("fit_check"):
                pod = self._verify_fits(pod, node, seen or node_obj, fresh=not from_filter, requests=requests)
            phase = {keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING, keys.BIND_TIME: encode_unix_seconds(self.clock())}
            if allocation:  # --write-allocation bind: the decision is written here, with the bind phase and label
                patch: dict[str, Any] = {"metadata": {"annotations": {**allocation, **phase},
                                                      "labels": {keys.VGPU_NODE: node}}}
                with timer("patch_annotations"):
                    bound = self.write(f"patch pod {ref}", lambda: self.cluster.patch_pod(namespace, name, patch))
                with timer("apiserver_bind"):
                    self._bind(ref, uid, node)
            else:
                # the bind phase rides on the Binding: kube-apiserver merges its annotations into the pod in the
                # same write, so kubelet never sees the pod bound without it, and a bind costs one write, not two
                with timer("apiserver_bind"):
                    self._bind(ref, uid, node, phase)
                meta = dict(metadata(pod))
                meta["annotations"] = {**(meta.get("annotations") or {}), **phase}
                bound = {**pod, "metadata": meta, "spec": {**(pod.get("spec") or {}), "nodeName": node}}
        except Exception as exc:
            for spec in held:
                self._release_quietly(node, pod, spec)
            self.writes.bind_failed(pod, ref, allocation)
            text = str(exc) or type(exc).__name__
            log.warning("bind %s to %s failed: %s", ref, node, text)
            self.event(pod, WARNING, BINDING_FAILED, text)
            return {"Error": text}, _bind_failure(exc)
        self.writes.bound(ref)
        if self.reasons is not None:
            self.reasons.bound(pod)
        try:
            self.engine.pod_bound(bound, node)
        except Exception:
            log.exception("hami_pod_bound failed for %s (the pod is bound)", ref)
        self.event(pod, NORMAL, BINDING_SUCCEED, f"Successfully binding node [{node}] to {ref}")
        return {"Error": ""}, "bound"

    def _node_to_bind(self, node: str) -> tuple[Mapping[str, Any], bool]:
        """(the Node, whether it was read now): as the Node watch has it (the lock is a compare-and-swap on its
        resourceVersion, and a lock the copy shows is judged afresh: a stale copy costs a re-read, never a wrong
        lock), else read from the API server."""
        cached = getattr(self.cluster, "cached_node", None)
        obj = cached(node) if cached is not None else None
        return (obj, False) if obj is not None else (self.cluster.get_node(node), True)

    def _bind(self, ref: PodRef, uid: str, node: str, annotations_: Mapping[str, str] | None = None) -> None:
        """Create the Binding (with ``annotations_``, merged into the pod by the API server); an error after
        which the pod turns out bound to ``node`` (a lost response, or a retry of one) is success. Transient
        errors are retried; anything else is raised."""
        namespace, name = ref

        def step() -> None:
            try:
                if annotations_:
                    self.cluster.bind(namespace, name, uid, node, annotations_)
                else:
                    self.cluster.bind(namespace, name, uid, node)
                return
            except Exception as exc:
                error = exc
            try:
                fresh = self.cluster.get_pod(namespace, name)
            except Exception:
                raise error from None
            fresh_uid = str(metadata(fresh).get("uid") or "")
            if (fresh.get("spec") or {}).get("nodeName") == node and (not uid or fresh_uid == uid):
                log.info("bind %s: %s, but the pod is bound to %s: done", ref, error, node)
                return
            if (fresh.get("spec") or {}).get("nodeName") or (uid and fresh_uid != uid):
                raise HamiError(str(error) or type(error).__name__) from None  # bound elsewhere / replaced
            raise error

        self.write(f"bind pod {ref} to node {node}", step)

    def _verify_fits(self, pod: Mapping[str, Any], node: str, node_obj: Mapping[str, Any],
                     fresh: bool = True, requests: ContainerRequests | None = None) -> Mapping[str, Any]:
        """Under the node lock: the pod's allocation must fit next to the pods already bound to ``node``
        (:meth:`Engine.check_bind <hami_core.engine.facade.Engine.check_bind>`). Returns the pod as checked.

        The pods bound there are taken as they were when the lock was written, so a pod another replica bound a
        moment ago counts even if this replica's ledger has not heard of it yet: from the Pod watch once its view
        includes every change up to the lock's write (a pod another replica bound here did so under its lock,
        released before ours was written), else read from the API server. Under ``--write-allocation filter`` the
        pod itself is taken the same way (``fresh``: it was just read), so the allocation checked is the one the
        API server holds, whichever replica filtered it last. Pods without a HAMi allocation for ``node`` are
        bound as HAMi binds them (nothing to check). Pods found are also fed to this replica's ledger so that its
        next decision knows them. ``requests``: the pod's, when known (read again if the pod taken differs).
        """
        given = pod
        ref = PodRef.of(pod)
        cached = getattr(self.cluster, "bound_pods", None)
        listed = cached(node, str(metadata(node_obj).get("resourceVersion") or "")) if cached is not None else None
        if self.writes.checks_stored_pod:
            view = self.cluster.cached_pod(*ref) if listed is not None else None  # type: ignore[attr-defined]
            if view is not None and metadata(view).get("uid") == metadata(pod).get("uid"):
                pod = view
            elif not fresh:
                pod = self.cluster.get_pod(*ref)
        if annotations(pod).get(keys.VGPU_NODE) is None:
            return pod
        if requests is None or not _same_containers(given, pod):
            with self.lock:
                requests = self.engine.requests(pod)
        if requests.empty:
            return pod
        chosen = annotations(pod).get(keys.VGPU_NODE)
        if chosen != node:
            raise Overcommit(f"pod {pod_ref(pod)} was filtered onto node {chosen}, not {node}; it must be filtered "
                             "again")
        key = pod_key(pod)
        others = [p for p in (listed if listed is not None else self.cluster.pods_on_node(node))
                  if pod_key(p) != key and annotations(p).get(keys.VGPU_NODE) == node]
        with self.lock:  # let this replica's ledger catch up with what is bound there
            for other in others:
                self.engine.upsert_pod(other)
        self.engine.check_bind(pod, node, node_obj, others)  # on a mirror of the node: the lock is not needed
        return pod

    def _release_quietly(self, node: str, pod: Mapping[str, Any], spec: LockSpec) -> None:
        try:
            self.locker.release(node, pod, spec)
        except Exception as exc:
            log.warning("node %s: cannot release %s: %s", node, spec.annotation, exc)

    # ------------------------------------------------------------------------------------ the pods' life
    def on_pod_event(self, event: str, pod: Mapping[str, Any]) -> None:
        """A Pod watch event (``Sync.pod_listeners``): a deleted pod's unwritten decision goes. Its reservation
        goes with the pod's removal from the ledger; a pod of the same name created since keeps its own decision
        (the UIDs differ), should the old pod's deletion be heard after the new pod was filtered."""
        self.inflight.on_pod_event(event, pod)
        if self.nudger is not None:
            self._nudge(event, pod)
        if self.preemption is not None:
            if event != "DELETED":
                self.preemption.on_pending(pod)
            else:
                self.preemption.forget(pod)
        if event != "DELETED":
            return
        ref, uid = PodRef.of(pod), str(metadata(pod).get("uid") or "")
        with self.lock:
            self.gate.deleted(ref, uid)
            self.writes.deleted(ref, uid)
        if self.reasons is not None:
            self.reasons.deleted(ref)

    def _nudge(self, event: str, pod: Mapping[str, Any]) -> None:
        """Feed the requeue nudger: a pod bound or gone waits for nothing; a pod that held devices and is gone or
        finished released them (a Terminating pod still holds its devices: the kubelet has not confirmed)."""
        assert self.nudger is not None
        key = pod_key(pod)
        spec = pod.get("spec") or {}
        if event == "DELETED" or spec.get("nodeName"):
            self.nudger.settled(key)
        node = spec.get("nodeName") or annotations(pod).get(keys.VGPU_NODE)
        if node and (event == "DELETED" or is_terminal(pod)):
            self.nudger.released(str(node))

    def expire_decisions(self, max_age_s: float, *, limit: int | None = None) -> int:
        """``--write-allocation bind``: drop the decisions older than ``max_age_s`` (at most ``limit`` of them),
        oldest first, and rebook each pod from a fresh read: its reservation goes, unless the pod carries an
        allocation (another replica wrote and bound it), which is booked instead. A pod that cannot be read keeps
        its reservation until the next sweep. Returns how many decisions went. Filters call this (every decision
        is a filter, so a stale reservation is gone before it could refuse a pod); so can an operator's code."""
        return self.writes.expire(max_age_s, limit=limit)

    # ------------------------------------------------------------------------------------ plumbing
    def write(self, what: str, step: Callable[[], Any]) -> Any:
        """``step()`` (an idempotent write), retried with the node lock's backoff on transient errors."""
        return retry(what, step, attempts=self.locker.attempts, backoff_s=self.locker.backoff_s,
                     sleep=self.locker.sleep, final=_final)

    def event(self, pod: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Post an Event about ``pod`` (best effort; Normal ones only with ``--normal-events``)."""
        if event_type == NORMAL and not self.normal_events:
            return
        try:
            self.cluster.event(pod, event_type, reason, message)
        except Exception as exc:  # events are best effort
            log.debug("event %s for %s not recorded: %s", reason, pod_ref(pod), exc)
