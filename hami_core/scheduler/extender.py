"""The kube-scheduler extender verbs ``filter`` and ``bind`` (spec §5.2, §6.1, §6.9-§6.11, §8.1, B.3).

Wire shapes are ``k8s.io/kube-scheduler/extender/v1``: capitalised keys (read here case-insensitively),
results always carrying every key. The engine is shared with the watch feed (:mod:`.sync`) and guarded
by one lock; the lock is never held while calling the cluster (a cluster may deliver watch events
synchronously from the writing thread).

Beyond HAMi, for reliability (docs/reliability.md):

* writes that fail transiently (HTTP 5xx, 409 on a plain patch, timeouts, lost responses) are retried with
  backoff; a merge patch is idempotent, and a Binding whose response was lost is recognised by re-reading the
  pod (``spec.nodeName`` already ours), so a bound pod is never reported as failed nor its lock released;
* a filter whose pod patch finally fails leaves the ledger as the API server has the pod (re-read), so a
  patch that was applied after all is neither lost nor double counted;
* bind re-checks, under the node lock, that the pod's devices still fit next to the pods already bound to the
  node, read fresh from the API server: the node lock serialises binds on a node across scheduler replicas,
  so two replicas whose ledgers lag each other's reservations can never over-commit a device.

Trust (docs/security.md): a request body is believed for nothing but the namespace, name and UID it names. The pod
a filter acts on is the one this scheduler's Pod watch holds under that name and UID (:mod:`.podview`; read once
from the API server when the watch has not delivered it after a short wait), pending and for this scheduler; its
annotations and requests are the view's, not the body's. A bind binds only such a pod that this scheduler filtered
or that carries HAMi's allocation for the node named, read from the API server; a bind naming a pod it cannot
identify changes nothing.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from hami_core.cluster.base import Cluster, NotFoundError
from hami_core.engine.facade import Engine
from hami_core.engine.pods import annotations, is_terminal, metadata, pod_key, pod_ref, pod_shape_error
from hami_core.plugins.errors import HamiError, TemporaryError
from hami_core.plugins.types import LockSpec, MigInstance
from hami_core.scheduler.bound import BoundLedgers
from hami_core.scheduler.inflight import DEFAULT_INFLIGHT_LIMIT, InFlight
from hami_core.scheduler.nodelock import DEFAULT_RETRY_TIMEOUT_S, DEFAULT_TIMEOUT_S, LockContention, NodeLocker, retry
from hami_core.scheduler.podview import PodView, version_of
from hami_core.wire import keys
from hami_core.wire.reasons import parse_reasons
from hami_core.wire.times import encode_unix_seconds

__all__ = ["BadRequest", "Extender", "lower_keys"]

log = logging.getLogger("hami.scheduler.extender")

NORMAL, WARNING = "Normal", "Warning"
FILTERING_FAILED, FILTERING_SUCCEED = "FilteringFailed", "FilteringSucceed"
BINDING_FAILED, BINDING_SUCCEED = "BindingFailed", "BindingSucceed"


class BadRequest(HamiError):
    """The request body is structurally wrong (the server answers HTTP 400 with this message)."""


class Overcommit(HamiError):
    """Binding the pod would put a device over its memory, cores or split count (another replica's pod won)."""


#: Errors that retrying the same write cannot cure.
FINAL = (NotFoundError, LockContention, BadRequest, Overcommit)
#: ``--write-allocation`` choices.
WRITE_ALLOCATION = ("filter", "bind")
#: Decisions kept for bind under ``--write-allocation bind`` (pods filtered and not yet bound); past this the
#: oldest is forgotten, and its pod's bind is refused and retried.
MAX_DECIDED = 65536
#: Under ``--write-allocation bind``, a decision whose bind has not come this long after the filter is dropped
#: with its reservation, unless the pod turns out to carry an allocation (read fresh). Nobody else knows of such a
#: reservation: without expiry it would hold its devices for as long as its pod stays pending, for instance when
#: the bind went to another replica (refused there), kube-scheduler's Permit or Reserve stage rejected the pod
#: after the filter (an extender hears of neither), or the pod then found no room. kube-scheduler binds within
#: a second of the filter; a bind that has come and waits for its node lock is never expired meanwhile. A bind
#: that comes later still (PreBind waiting for a volume to be provisioned) is refused and its pod filtered again,
#: which costs it one more scheduling cycle.
DECISION_TTL_S = 30.0
#: How long a filter waits for this scheduler's Pod watch to deliver the pod it names before reading the pod from
#: the API server once (kube-scheduler filters a pod milliseconds after its creation; the watch lags as much).
VIEW_WAIT_S = 0.5
#: Pods kept from their filter for their bind (filtered, not yet bound); past this the oldest bind reads its pod.
MAX_FILTERED = 8192
#: Pods without device requests a filter passed, kept for their bind; past this the oldest is refused and filtered
#: again.
MAX_PASSED = 8192
#: Expired decisions a filter checks at most (one pod read each), so that a filter never pays for many.
EXPIRE_BATCH = 4


class Unwritten(NamedTuple):
    """What ``--write-allocation bind`` keeps from a filter for the pod's bind."""

    node: str
    annotations: dict[str, str]  # the allocation bind writes
    uid: str  # the pod's, so that a deleted pod's event leaves a new pod of its name alone
    at: float  # when decided (``Extender.clock``), for expiry


def _final(exc: BaseException) -> bool:
    """True for errors not worth retrying: 404, contention, and API errors that are not temporary (403, 422)."""
    return isinstance(exc, FINAL) or (isinstance(exc, HamiError) and not isinstance(exc, TemporaryError))


def lower_keys(args: Any, what: str) -> dict[str, Any]:
    """``args`` with its top-level keys lower-cased (Go decodes JSON keys case-insensitively)."""
    if not isinstance(args, Mapping):
        raise BadRequest(f"{what} must be a JSON object, got {type(args).__name__}")
    return {str(k).lower(): v for k, v in args.items()}


def filter_result(*, nodes: Any = None, node_names: list[str] | None = None,
                  failed: Mapping[str, str] | None = None, error: str = "") -> dict[str, Any]:
    """An ``ExtenderFilterResult`` with every key present."""
    return {"Nodes": nodes, "NodeNames": node_names, "FailedNodes": dict(failed) if failed is not None else None,
            "FailedAndUnresolvableNodes": None, "Error": error}


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
                 normal_events: bool = True, pods: PodView | None = None) -> None:
        if write_allocation not in WRITE_ALLOCATION:
            raise ValueError(f"unknown allocation write {write_allocation!r}: choose one of "
                             f"{', '.join(WRITE_ALLOCATION)}")
        self.engine = engine
        self.cluster = cluster
        self.scheduler_name = scheduler_name
        self.lock = engine_lock if engine_lock is not None else threading.RLock()
        self.ready = ready
        self.sync_wait_s = sync_wait_s
        self.clock = clock if clock is not None else engine.clock
        self._names_seen: list[str] | None = None  # the last NodeNames list that passed the check
        self.bound = BoundLedgers(engine)
        self.locker = NodeLocker(cluster, timeout_s=lock_timeout, retry_timeout_s=lock_retry_timeout,
                                 wait_s=lock_wait, clock=self.clock, sleep=sleep)
        #: ``write_allocation == "bind"``: pod (namespace, name) → what this replica's filter decided and has not
        #: written yet, oldest first; a deleted pod's decision is dropped (:meth:`on_pod_event`), an old one
        #: expires (:meth:`expire_decisions`), and the oldest are forgotten past :data:`MAX_DECIDED`
        self.decided: OrderedDict[tuple[str, str], Unwritten] | None = (
            OrderedDict() if write_allocation == "bind" else None)
        self.decision_ttl_s = DECISION_TTL_S
        #: ``--normal-events``: post HAMi's FilteringSucceed / BindingSucceed (two writes a pod); warnings always
        self.normal_events = normal_events
        #: pod (namespace, name) → the pod as the filter's patch answered it, for the bind that follows
        self._filtered: OrderedDict[tuple[str, str], Mapping[str, Any]] = OrderedDict()
        #: pods between filter and Allocate per node (``--node-inflight-limit``; :mod:`.inflight`)
        self.inflight = InFlight(inflight_limit, self.clock)
        #: where a request's pod is looked up (None: read from the cluster each time)
        self.pods = pods
        self.view_wait_s = VIEW_WAIT_S
        #: the schedulerName of the pods this scheduler filters and binds (what its webhook writes into them)
        self.ours = engine.config.scheduler.scheduler_name or "default-scheduler"
        #: pod (namespace, name) → UID of pods without device requests that a filter passed, for their bind
        self._passed: OrderedDict[tuple[str, str], str] = OrderedDict()
        #: ``--write-allocation bind``: pods whose bind is under way (their decision does not expire meanwhile)
        self._binding: set[tuple[str, str]] = set()
        #: filters whose pod the view did not hold after the wait, so it was read from the API server
        self.view_misses = 0
        #: filters and binds refused because the pod named could not be identified as a pending pod of ours
        self.refused = 0

    # ------------------------------------------------------------------------------------ filter
    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /filter``: ``ExtenderArgs`` → ``ExtenderFilterResult``."""
        low = lower_keys(args, "ExtenderArgs")
        pod = low.get("pod")
        if pod is None:
            return filter_result(error="extender args missing pod")
        if not isinstance(pod, Mapping):
            raise BadRequest(f"ExtenderArgs.Pod must be a Pod object, got {type(pod).__name__}")
        shape = pod_shape_error(pod)
        if shape is not None:
            raise BadRequest(f"ExtenderArgs.Pod {pod_ref(pod)}: {shape}")
        names = self._node_names(low.get("nodenames"))
        nodes = low.get("nodes")
        if nodes is not None and not isinstance(nodes, Mapping):
            raise BadRequest("ExtenderArgs.Nodes must be a NodeList object")
        if self.ready is not None and not self.ready(self.sync_wait_s):
            return filter_result(error="context cancelled")
        if nodes is not None:  # a simulation changes nothing and tells nothing of other pods: the body will do
            with self.lock:
                empty = self.engine.requests(pod).empty
            if empty:
                return filter_result(node_names=list(names) if names is not None else None)
            return self._simulate(pod, nodes)

        pod, refusal = self._resolve(pod)
        if pod is None:
            return filter_result(error=refusal)
        with self.lock:
            requests = self.engine.requests(pod)
        if requests.empty:
            self._pass(pod)
            return filter_result(node_names=list(names) if names is not None else None)
        names = names if names is not None else []
        if self.decided:
            self.expire_decisions(self.decision_ttl_s, limit=EXPIRE_BATCH)

        with self.lock:
            self.engine.unreserve(pod)  # re-filtered: its earlier reservation no longer counts (§6.1 step 4)
            decision = None
            busy = self.inflight.busy(pod)
            if busy and any(n in busy for n in names):
                idle = [n for n in names if n not in busy]
                if idle:  # the policy's best among nodes that can take a pod now; else the busy ones too
                    first = self.engine.schedule(pod, idle, limit=1, requests=requests)
                    decision = first if first.ok else None
            if decision is None:
                decision = self.engine.schedule(pod, names, limit=1, requests=requests)
            if decision.ok:
                self.engine.reserve(pod, decision)
                self.inflight.add(pod, decision.node or "")
                if self.decided is not None:  # bind writes it
                    key = _key(pod)
                    self.decided[key] = Unwritten(decision.node or "", dict(decision.annotations),
                                                  str(metadata(pod).get("uid") or ""), self.clock())
                    self.decided.move_to_end(key)
                    while len(self.decided) > MAX_DECIDED:
                        self.decided.popitem(last=False)
        if decision.error:
            self._event(pod, WARNING, FILTERING_FAILED, decision.error)
            return filter_result(error=decision.error)
        if not decision.ok:
            self._filtering_failed(pod, decision.failed, len(names))
            return filter_result(failed=decision.failed)

        node = decision.node or ""
        if self.decided is None:
            patch = {"metadata": {"annotations": dict(decision.annotations), "labels": {keys.VGPU_NODE: node}}}
            namespace, name = _key(pod)
            try:
                patched = self._write(f"patch pod {namespace}/{name}",
                                      lambda: self.cluster.patch_pod(namespace, name, patch))
                self._remember(namespace, name, patched)
            except Exception as exc:
                if not self._reconcile_filtered(pod, decision.annotations):
                    text = f"failed to patch pod {pod_ref(pod)}: {exc}"
                    log.warning("filter: %s", text)
                    self._event(pod, WARNING, FILTERING_FAILED, text)
                    return filter_result(error=text)

        fit = ",".join(f"{n}:{decision.scores[n]:.2f}" for n in sorted(decision.scores))
        self._event(pod, NORMAL, FILTERING_SUCCEED,
                    f"find fit node({node}), {len(names) - len(decision.scores)} nodes not fit, "
                    f"{len(decision.scores)} nodes fit({fit})")
        return filter_result(node_names=[node])

    def _resolve(self, body: Mapping[str, Any]) -> tuple[Mapping[str, Any] | None, str]:
        """The pod ``body`` names (namespace, name, UID), as this scheduler's view holds it, and ``""``; or None and
        why it is refused (the filter's Error: nothing is reserved, written or recorded).

        Nothing else is read from the body: annotations, requests and schedulerName are the view's, so a crafted
        body cannot choose another pod's devices, and one naming a pod that does not exist reserves nothing. The
        view is waited for briefly (the watch may not have delivered a pod created a moment ago), then the pod is
        read from the API server once.
        """
        meta = metadata(body)
        name, uid = meta.get("name"), meta.get("uid")
        namespace = meta.get("namespace") or "default"
        for field, value in (("name", name), ("uid", uid)):
            if not isinstance(value, str) or not value:
                raise BadRequest(f"ExtenderArgs.Pod {pod_ref(body)}: metadata.{field} must be a non-empty string")
        ref = f"{namespace}/{name}"
        seen = (self.pods.wait(namespace, name, uid, self.view_wait_s, through=version_of(body))
                if self.pods is not None else None)
        if seen is not None and seen.pod is None:
            return self._refuse(ref, "the pod has finished" if seen.finished else
                                f"spec.nodeName: the pod is already bound to node {seen.node}")
        if seen is not None and seen.pod is not None:
            pod: Mapping[str, Any] = seen.pod
        else:
            if self.pods is not None:
                self.view_misses += 1
                log.info("filter: pod %s (UID %s) is not in the Pod watch (which is at resourceVersion %d); reading "
                         "it", ref, uid, self.pods.high)
            try:
                pod = self.cluster.get_pod(namespace, name)
            except NotFoundError:
                return self._refuse(ref, f"metadata.name: no pod {name} exists in namespace {namespace}")
            except Exception as exc:
                return None, f"cannot read pod {ref}: {' '.join(str(exc).split()) or type(exc).__name__}"
            stored = str(metadata(pod).get("uid") or "")
            if stored != uid:
                return self._refuse(ref, f"metadata.uid {uid} is not the UID of the pod of that name ({stored})")
        shape = pod_shape_error(pod)  # the API server stores no such pod; an in-memory store may
        if shape is not None:
            return self._refuse(ref, f"as stored: {shape}")
        node = (pod.get("spec") or {}).get("nodeName")
        if node or is_terminal(pod):
            return self._refuse(ref, "the pod has finished" if not node else
                                f"spec.nodeName: the pod is already bound to node {node}")
        scheduler = (pod.get("spec") or {}).get("schedulerName") or "default-scheduler"
        if scheduler != self.ours:
            return self._refuse(ref, f"spec.schedulerName is {scheduler!r}, not {self.ours!r}: not a pod of this "
                                "scheduler")
        return pod, ""

    def _refuse(self, ref: str, why: str) -> tuple[None, str]:
        """A refused filter: logged (no Event: the pod named may not exist, or be another tenant's)."""
        self.refused += 1
        text = f"pod {ref}: {why}; nothing was reserved"
        log.warning("filter refused: %s", text)
        return None, text

    def _pass(self, pod: Mapping[str, Any]) -> None:
        """Remember a pod without device requests that a filter passed, for its bind (most recent
        :data:`MAX_PASSED`)."""
        key = _key(pod)
        with self.lock:
            self._passed[key] = str(metadata(pod).get("uid") or "")
            self._passed.move_to_end(key)
            while len(self._passed) > MAX_PASSED:
                self._passed.popitem(last=False)

    def _write(self, what: str, step: Callable[[], Any]) -> Any:
        """``step()`` (an idempotent write), retried with the node lock's backoff on transient errors."""
        return retry(what, step, attempts=self.locker.attempts, backoff_s=self.locker.backoff_s,
                     sleep=self.locker.sleep, final=_final)

    def _reconcile_filtered(self, pod: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
        """After a failed filter patch, make the ledger match the pod as the API server has it.

        Returns True when the patch was applied after all (a lost response): the reservation stands and the
        filter succeeds. Otherwise the pod's stored allocation, if any, is booked in place of the reservation
        (what a restarted scheduler would book), or the reservation is dropped.
        """
        meta = metadata(pod)
        try:
            fresh = self.cluster.get_pod(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        except Exception as exc:  # gone, or unreadable: the watch feed settles it
            log.debug("filter: cannot re-read %s: %s", pod_ref(pod), exc)
            fresh = None
        applied = fresh is not None and all(annotations(fresh).get(k) == v for k, v in wanted.items())
        with self.lock:
            if applied:
                return True
            self.engine.unreserve(pod)
            if fresh is not None and annotations(fresh).get(keys.VGPU_NODE):
                self.engine.upsert_pod(fresh)
        return False

    def _node_names(self, names: Any) -> list[str] | None:
        """``ExtenderArgs.NodeNames`` checked to be a list of strings.

        kube-scheduler names the same nodes in request after request, so the last list checked is kept: an
        equal list is answered with that one (one C-level comparison instead of a type check per name, and
        the engine's candidate cache then compares item by identity).
        """
        if names is None:
            return None
        seen = self._names_seen
        if seen is not None and names == seen:
            return seen
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest("ExtenderArgs.NodeNames must be a list of node names")
        self._names_seen = list(names)  # a copy: the caller's list may change after this request
        return names

    def _simulate(self, pod: Mapping[str, Any], nodes: Mapping[str, Any]) -> dict[str, Any]:
        """§6.11: fit onto the supplied Node objects on a throwaway engine; no usage, events or patches."""
        items = nodes.get("items", nodes.get("Items")) or []
        if not isinstance(items, list) or not all(isinstance(n, Mapping) for n in items):
            raise BadRequest("ExtenderArgs.Nodes.items must be a list of Node objects")
        scratch = Engine(self.engine.config, plugins=self.engine.plugins, clock=self.engine.clock)
        by_name: dict[str, Mapping[str, Any]] = {}
        for node in items:
            name = metadata(node).get("name")
            if not isinstance(name, str) or not name:
                raise BadRequest("ExtenderArgs.Nodes: a node has no metadata.name")
            by_name[name] = node
            scratch.upsert_node(node)
        decision = scratch.schedule(pod, list(by_name), limit=1)
        if decision.error:
            return filter_result(error=decision.error)
        if not decision.ok:
            return filter_result(failed=decision.failed)
        return filter_result(nodes={"items": [dict(by_name[decision.node or ""])]},
                             failed=decision.failed or None)

    def _filtering_failed(self, pod: Mapping[str, Any], failed: Mapping[str, str], total: int) -> None:
        grouped: dict[str, set[str]] = {}
        for node, reason in failed.items():
            for word in parse_reasons(reason):
                grouped.setdefault(word, set()).add(node)
        for word in sorted(grouped):
            members = sorted(grouped[word])
            self._event(pod, WARNING, FILTERING_FAILED, f"{len(members)} nodes {word}({','.join(members)})")
        self._event(pod, WARNING, FILTERING_FAILED, f"no available node, {total} nodes do not meet")

    # ------------------------------------------------------------------------------------ bind
    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /bind``: ``ExtenderBindingArgs`` → ``ExtenderBindingResult``."""
        low = lower_keys(args, "ExtenderBindingArgs")
        name, namespace, uid, node = (low.get(k) for k in ("podname", "podnamespace", "poduid", "node"))
        # kube-scheduler always sends the pod's UID: it is what tells the pod apart from a deleted one of its name
        for field_name, value in (("PodName", name), ("PodUID", uid), ("Node", node)):
            if not isinstance(value, str) or not value:
                raise BadRequest(f"ExtenderBindingArgs.{field_name} must be a non-empty string")
        if namespace is not None and not isinstance(namespace, str):
            raise BadRequest(f"ExtenderBindingArgs.PodNamespace must be a string, got {type(namespace).__name__}")
        namespace = namespace or "default"
        assert isinstance(name, str) and isinstance(uid, str) and isinstance(node, str)  # checked above
        found, from_filter, text = self._pod_to_bind(namespace, name, uid)
        if found is None:
            self.refused += 1
            log.warning("bind %s/%s to %s refused: %s", namespace, name, node, text)
            return {"Error": text}
        pod = found
        text, done = self._bind_refusal(pod, namespace, name, uid, node, from_filter)
        if done:
            log.info("bind %s/%s: already bound to node %s; nothing to do", namespace, name, node)
            return {"Error": ""}
        if text:
            self.refused += 1
            log.warning("bind %s/%s to %s refused: %s", namespace, name, node, text)
            return {"Error": text}
        allocation: dict[str, str] = {}
        if self.decided is not None:
            pod, allocation, text = self._with_decision(pod, namespace, name, node)
            if text:
                log.warning("bind: %s", text)
                self._event(pod, WARNING, BINDING_FAILED, text)
                return {"Error": text}
            with self.lock:
                self._binding.add((namespace, name))  # its decision does not expire while it waits for the lock
        try:
            return self._bind_locked(pod, namespace, name, uid, node, allocation, from_filter)
        finally:
            if allocation or self.decided is not None:
                with self.lock:
                    self._binding.discard((namespace, name))

    def _bind_locked(self, pod: Mapping[str, Any], namespace: str, name: str, uid: str, node: str,
                     allocation: dict[str, str], from_filter: bool) -> dict[str, Any]:
        """The bind of a pod identified and judged bindable: node lock, over-commit check, Binding."""
        try:
            node_obj, node_fresh = self._node_to_bind(node)
        except Exception as exc:
            with self.lock:
                self.engine.unreserve(pod)
            self._event(pod, WARNING, BINDING_FAILED, f"failed to get node {node}")
            return {"Error": str(exc)}

        held: list[LockSpec] = []
        try:
            with self.lock:
                specs = self._lock_specs(pod)
            seen: Mapping[str, Any] | None = node_obj
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
                        self._event(pod, WARNING, BINDING_FAILED, f"failed to get node {node}")
                        return {"Error": str(exc)}
                    raise
                if spec not in held:
                    held.append(spec)
            pod = self._verify_fits(pod, node, seen or node_obj, fresh=not from_filter)
            phase = {keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING, keys.BIND_TIME: encode_unix_seconds(self.clock())}
            if allocation:  # --write-allocation bind: the decision is written here, with the bind phase and label
                patch: dict[str, Any] = {"metadata": {"annotations": {**allocation, **phase},
                                                      "labels": {keys.VGPU_NODE: node}}}
                bound = self._write(f"patch pod {namespace}/{name}",
                                    lambda: self.cluster.patch_pod(namespace, name, patch))
                self._bind(namespace, name, uid, node)
            else:
                # the bind phase rides on the Binding: kube-apiserver merges its annotations into the pod in the
                # same write, so kubelet never sees the pod bound without it, and a bind costs one write, not two
                self._bind(namespace, name, uid, node, phase)
                meta = dict(metadata(pod))
                meta["annotations"] = {**(meta.get("annotations") or {}), **phase}
                bound = {**pod, "metadata": meta, "spec": {**(pod.get("spec") or {}), "nodeName": node}}
        except Exception as exc:
            for spec in held:
                self._release_quietly(node, pod, spec)
            if allocation:
                self._drop_unwritten(pod, namespace, name, allocation)
            text = str(exc) or type(exc).__name__
            log.warning("bind %s/%s to %s failed: %s", namespace, name, node, text)
            self._event(pod, WARNING, BINDING_FAILED, text)
            return {"Error": text}
        if self.decided is not None:
            with self.lock:
                self.decided.pop((namespace, name), None)
        try:
            self.engine.hook.hami_pod_bound(pod=bound, node=node)
        except Exception:
            log.exception("hami_pod_bound failed for %s/%s (the pod is bound)", namespace, name)
        self._event(pod, NORMAL, BINDING_SUCCEED, f"Successfully binding node [{node}] to {namespace}/{name}")
        return {"Error": ""}

    def on_pod_event(self, event: str, pod: Mapping[str, Any]) -> None:
        """A Pod watch event (``Sync.pod_listeners``): a deleted pod's unwritten decision goes. Its reservation
        goes with the pod's removal from the ledger; a pod of the same name created since keeps its own decision
        (the UIDs differ), should the old pod's deletion be heard after the new pod was filtered."""
        self.inflight.on_pod_event(event, pod)
        if event != "DELETED":
            return
        key, uid = _key(pod), str(metadata(pod).get("uid") or "")
        with self.lock:
            if self._passed.get(key) == uid:
                del self._passed[key]
            filtered = self._filtered.get(key)
            if filtered is not None and str(metadata(filtered).get("uid") or "") == uid:
                del self._filtered[key]
            if self.decided is None:
                return
            decided = self.decided.get(key)
            if decided is not None and (not uid or not decided.uid or decided.uid == uid):
                del self.decided[key]

    def expire_decisions(self, max_age_s: float, *, limit: int | None = None) -> int:
        """``--write-allocation bind``: drop the decisions older than ``max_age_s`` (at most ``limit`` of them),
        oldest first, and rebook each pod from a fresh read: its reservation goes, unless the pod carries an
        allocation (another replica wrote and bound it), which is booked instead. A pod that cannot be read keeps
        its reservation until the next sweep. Returns how many decisions went. Filters call this (every decision
        is a filter, so a stale reservation is gone before it could refuse a pod); so can an operator's code."""
        if self.decided is None:
            return 0
        dropped = 0
        now = self.clock()
        while limit is None or dropped < limit:
            with self.lock:  # oldest first; a decision whose bind is under way is not expired under it
                oldest = next(((k, d) for k, d in self.decided.items() if k not in self._binding), None)
            if oldest is None or now - oldest[1].at < max_age_s:
                break
            (namespace, name), decided = oldest
            stub = {"metadata": {"namespace": namespace, "name": name, "uid": decided.uid}}
            try:
                fresh: Mapping[str, Any] | None = self.cluster.get_pod(namespace, name)
            except NotFoundError:
                fresh = None
            except Exception as exc:
                log.debug("decision for pod %s/%s: cannot read the pod (%s); kept for now", namespace, name, exc)
                break
            with self.lock:
                if self.decided.get((namespace, name)) is not decided:
                    continue  # bound, re-filtered or dropped meanwhile
                del self.decided[(namespace, name)]
                self._rebook(stub, fresh)
            dropped += 1
            log.info("pod %s/%s: decision for node %s dropped after %.0f s without a bind; its devices are free "
                     "again", namespace, name, decided.node, now - decided.at)
        return dropped

    def _rebook(self, pod: Mapping[str, Any], fresh: Mapping[str, Any] | None) -> None:
        """Drop ``pod``'s reservation and book it as the API server has it (``fresh``; ``None``: gone). Engine lock
        held. Unreserving alone would also drop an allocation another replica wrote since, until the pod's next
        watch event."""
        self.engine.unreserve(pod)
        if fresh is None:
            self.engine.remove_pod(pod)
        elif str(metadata(fresh).get("uid") or "") == str(metadata(pod).get("uid") or ""):
            self.engine.upsert_pod(fresh)

    def _drop_unwritten(self, pod: Mapping[str, Any], namespace: str, name: str, allocation: Mapping[str, str]) -> None:
        """``--write-allocation bind``, the bind failed: unless the pod carries the allocation after all (the
        patch went through before a later step failed), nobody but this replica knows of it, so its reservation
        and decision go (kube-scheduler filters the pod again), and the pod is booked as it is stored. If the pod
        cannot be read, both are kept: holding devices a while is safe, booking them twice is not."""
        try:
            fresh = self.cluster.get_pod(namespace, name)
        except Exception as exc:
            log.debug("bind %s/%s: cannot re-read the pod (%s); its reservation stays", namespace, name, exc)
            return
        stored = annotations(fresh)
        if all(stored.get(k) == v for k, v in allocation.items()):
            return  # written: the watch books it as any allocated pod
        with self.lock:
            self._rebook(pod, fresh)
            if self.decided is not None:
                self.decided.pop((namespace, name), None)

    def _with_decision(self, pod: Mapping[str, Any], namespace: str, name: str,
                       node: str) -> tuple[Mapping[str, Any], dict[str, str], str]:
        """``--write-allocation bind``: the pod as this replica's filter decided it (its allocation annotations
        merged in), the annotations bind must write, and an error text when it cannot be bound here.

        A pod that already carries an allocation (a replica writing at filter did it) binds as it is. One that
        carries none and was not decided here (filtered by another replica, or before a restart) is refused,
        as is one decided for another node: kube-scheduler filters it again.
        """
        with self.lock:
            decided = self.decided.get((namespace, name)) if self.decided is not None else None
            if decided is not None and decided.uid != str(metadata(pod).get("uid") or ""):
                decided = None  # decided for an earlier pod of that name
            if decided is None:  # the pod requests devices (checked by the caller)
                chosen = annotations(pod).get(keys.VGPU_NODE)
                if chosen == node:
                    return pod, {}, ""  # another replica wrote its allocation
                if chosen:
                    return pod, {}, (f"pod {namespace}/{name} was filtered onto node {chosen}, not {node}; it must "
                                     "be filtered again")
                self.engine.unreserve(pod)
                return pod, {}, (f"pod {namespace}/{name} carries no device allocation and this scheduler has "
                                 "not decided one; it must be filtered again")
        chosen, allocation = decided.node, decided.annotations
        if chosen != node:
            with self.lock:
                self._rebook(pod, pod)  # ``pod`` is bind's fresh read: it may carry another replica's allocation
                self.decided.pop((namespace, name), None)
            return pod, {}, (f"pod {namespace}/{name} was filtered onto node {chosen}, not {node}; it must be "
                             "filtered again")
        meta = dict(metadata(pod))
        meta["annotations"] = {**(meta.get("annotations") or {}), **allocation}
        return {**pod, "metadata": meta}, allocation, ""

    def _remember(self, namespace: str, name: str, pod: Mapping[str, Any]) -> None:
        """Keep the pod as the filter's patch left it, for its bind (most recent :data:`MAX_FILTERED`)."""
        with self.lock:
            self._filtered[(namespace, name)] = pod
            self._filtered.move_to_end((namespace, name))
            while len(self._filtered) > MAX_FILTERED:
                self._filtered.popitem(last=False)

    def _pod_to_bind(self, namespace: str, name: str, uid: str) -> tuple[Mapping[str, Any] | None, bool, str]:
        """(the pod, whether it is the filter's copy, ``""``), or (None, False, why not): as this replica's filter
        patch answered it (kube-scheduler binds what it filtered a moment ago; :meth:`_verify_fits` takes it again
        as of the lock's write), else read from the API server. ``--write-allocation bind`` always reads it: that
        bind needs another replica's allocation, if any.

        The pod must be the one of that name with ``uid``; when it is not, nothing is changed (no reservation of
        anyone's is dropped), except that a pod this replica decided and that is gone loses its own reservation."""
        ref = f"{namespace}/{name}"
        with self.lock:
            cached = self._filtered.get((namespace, name))
            if cached is not None and str(metadata(cached).get("uid") or "") == uid:
                del self._filtered[(namespace, name)]
                if self.decided is None:
                    return cached, True, ""
        try:
            fresh = self.cluster.get_pod(namespace, name)
        except NotFoundError as exc:
            self._forget(namespace, name, uid)
            return None, False, f"pod {ref}: {exc}"
        except Exception as exc:
            return None, False, f"cannot read pod {ref}: {' '.join(str(exc).split()) or type(exc).__name__}"
        stored = str(metadata(fresh).get("uid") or "")
        if stored != uid:
            return None, False, (f"pod {ref}: PodUID {uid} is not the UID of the pod of that name ({stored}); "
                                 "nothing was changed")
        return fresh, False, ""

    def _forget(self, namespace: str, name: str, uid: str) -> None:
        """The pod (namespace, name, ``uid``) is gone: what this replica decided for exactly that pod goes, with
        its reservation (the watch's deletion does the same; this covers one it missed)."""
        key = (namespace, name)
        with self.lock:
            if self._passed.get(key) == uid:
                del self._passed[key]
            if self.decided is None:
                return
            decided = self.decided.get(key)
            if decided is not None and decided.uid == uid:
                del self.decided[key]
                self.engine.unreserve({"metadata": {"namespace": namespace, "name": name, "uid": uid}})

    def _bind_refusal(self, pod: Mapping[str, Any], namespace: str, name: str, uid: str, node: str,
                      from_filter: bool) -> tuple[str, bool]:
        """(why ``pod`` cannot be bound to ``node`` here, or ``""``; whether it is bound there already). Judged on
        the pod as stored (or as this replica's filter patch answered it), never on the request: a pod of this
        scheduler, pending, that this scheduler filtered (no device request) or that carries HAMi's allocation
        for ``node`` (under ``--write-allocation bind``, :meth:`_with_decision` also takes this replica's
        decision). Nothing is changed here. The filter's copy may be older than another replica's filter of the
        pod since: a node that differs from it is judged under the lock, from the Pod watch (:meth:`_verify_fits`)."""
        ref = f"{namespace}/{name}"
        shape = pod_shape_error(pod)
        if shape is not None:
            return f"pod {ref} as stored: {shape}", False
        spec = pod.get("spec") or {}
        scheduler = spec.get("schedulerName") or "default-scheduler"
        if scheduler != self.ours:
            return (f"pod {ref}: spec.schedulerName is {scheduler!r}, not {self.ours!r}: not a pod of this "
                    "scheduler; nothing was changed"), False
        bound = spec.get("nodeName")
        if bound:
            return ("", True) if bound == node else (f"pod {ref}: spec.nodeName: already bound to node {bound}; "
                                                     "nothing was changed", False)
        if is_terminal(pod):
            return f"pod {ref} has finished; nothing was changed", False
        with self.lock:
            empty = self.engine.requests(pod).empty
            passed = self._passed.get((namespace, name)) == uid
        if empty:
            return ("" if passed else f"pod {ref} requests no device and this scheduler has not filtered it; it "
                    "must be filtered again"), False
        if self.decided is not None:
            return "", False
        chosen = annotations(pod).get(keys.VGPU_NODE)
        if not chosen:
            return (f"pod {ref} carries no device allocation and this scheduler has not decided one; it must be "
                    "filtered again"), False
        if chosen != node and not from_filter:
            return f"pod {ref} was filtered onto node {chosen}, not {node}; it must be filtered again", False
        return "", False

    def _node_to_bind(self, node: str) -> tuple[Mapping[str, Any], bool]:
        """(the Node, whether it was read now): as the Node watch has it (the lock is a compare-and-swap on its
        resourceVersion, and a lock the copy shows is judged afresh: a stale copy costs a re-read, never a wrong
        lock), else read from the API server."""
        cached = getattr(self.cluster, "cached_node", None)
        obj = cached(node) if cached is not None else None
        return (obj, False) if obj is not None else (self.cluster.get_node(node), True)

    def _bind(self, namespace: str, name: str, uid: str, node: str,
              annotations_: Mapping[str, str] | None = None) -> None:
        """Create the Binding (with ``annotations_``, merged into the pod by the API server); an error after
        which the pod turns out bound to ``node`` (a lost response, or a retry of one) is success. Transient
        errors are retried; anything else is raised."""

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
                log.info("bind %s/%s: %s, but the pod is bound to %s: done", namespace, name, error, node)
                return
            if (fresh.get("spec") or {}).get("nodeName") or (uid and fresh_uid != uid):
                raise HamiError(str(error) or type(error).__name__) from None  # bound elsewhere / replaced
            raise error

        self._write(f"bind pod {namespace}/{name} to node {node}", step)

    def _verify_fits(self, pod: Mapping[str, Any], node: str, node_obj: Mapping[str, Any],
                     fresh: bool = True) -> Mapping[str, Any]:
        """Under the node lock: the pod's allocation must fit next to the pods already bound to ``node``.
        Returns the pod as checked.

        The pods bound there are taken as they were when the lock was written, so a pod another replica bound a
        moment ago counts even if this replica's ledger has not heard of it yet: from the Pod watch once its view
        includes every change up to the lock's write (a pod another replica bound here did so under its lock,
        released before ours was written), else read from the API server. Under ``--write-allocation filter`` the
        pod itself is taken the same way (``fresh``: it was just read), so the allocation checked is the one the
        API server holds, whichever replica filtered it last. Pods without a HAMi allocation for ``node`` are
        bound as HAMi binds them (nothing to check). Pods found are also fed to this replica's ledger so that its
        next decision knows them.
        """
        meta = metadata(pod)
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        cached = getattr(self.cluster, "bound_pods", None)
        listed = cached(node, str(metadata(node_obj).get("resourceVersion") or "")) if cached is not None else None
        if self.decided is None:
            view = self.cluster.cached_pod(namespace, name) if listed is not None else None  # type: ignore[attr-defined]
            if view is not None and metadata(view).get("uid") == metadata(pod).get("uid"):
                pod = view
            elif not fresh:
                pod = self.cluster.get_pod(namespace, name)
        if annotations(pod).get(keys.VGPU_NODE) is None:
            return pod
        with self.lock:
            if self.engine.requests(pod).empty:
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
        with self.bound.bound(node, node_obj, others) as scratch:
            state = scratch.nodes.get(node)
            if state is None:
                return pod
            if state.quarantine:
                raise Overcommit(f"node {node} is quarantined: {'; '.join(sorted(state.quarantine.values()))}")
            before = {d.id: (d.used, d.usedmem, d.usedcores) for d in state.by_uuid.values()}
            mig_before = {d.id: d.mig_in_use for d in state.by_uuid.values() if d.mig_in_use}
            scratch.upsert_pod(pod)
            try:
                self._check_growth(pod, node, state, before, len(others))
                self._check_mig(pod, node, state, mig_before)
            finally:
                scratch.remove_pod(pod)  # the mirror holds bound pods only
        return pod

    @staticmethod
    def _check_growth(pod: Mapping[str, Any], node: str, state: Any, before: Mapping[str, tuple[int, int, int]],
                      others: int) -> None:
        if state.quarantine:
            raise Overcommit(f"pod {pod_ref(pod)}: {'; '.join(sorted(state.quarantine.values()))}")
        for d in state.by_uuid.values():
            used, mem, cores = before[d.id]
            for what, now, was, total in (("split count", d.used, used, d.count),
                                          ("memory", d.usedmem, mem, d.totalmem),
                                          ("cores", d.usedcores, cores, d.totalcore)):
                if now > was and now > total:
                    raise Overcommit(f"pod {pod_ref(pod)} cannot bind to node {node}: device {d.id} would be over "
                                     f"its {what} ({now} > {total}) with the {others} pod(s) already bound "
                                     "there; it must be filtered again")

    @staticmethod
    def _check_mig(pod: Mapping[str, Any], node: str, state: Any,
                   before: Mapping[str, tuple[MigInstance, ...]]) -> None:
        """The MIG instances the pod adds must not overlap those of the pods already bound there.

        Split count, memory and cores cannot see it: two replicas that had not heard of each other's reservation
        may give two pods the same free placement (the device plugin would then hand one instance to both). Only
        the pod's own instances may share a placement (HAMi lets its init and app containers do so).
        """
        for d in state.by_uuid.values():
            held = before.get(d.id, ())
            if not held or not d.mig_in_use:
                continue
            added = Counter(d.mig_in_use)
            added.subtract(Counter(held))
            for inst in (i for i, n in added.items() if n > 0):
                clash = next((h for h in held if inst.placement.overlaps(h.placement)), None)
                if clash is not None:
                    raise Overcommit(
                        f"pod {pod_ref(pod)} cannot bind to node {node}: its MIG instance {inst.profile} at "
                        f"placement {inst.placement.start}+{inst.placement.size} on device {d.id} overlaps "
                        f"{clash.profile} at {clash.placement.start}+{clash.placement.size}, held by a pod already "
                        "bound there; it must be filtered again")

    def _lock_specs(self, pod: Mapping[str, Any]) -> list[LockSpec]:
        """Every backend's lock for this pod, sorted by backend name."""
        requests = self.engine.requests(pod)
        specs: list[LockSpec] = []
        for name in sorted(self.engine.backends):
            spec = self.engine.hook.hami_node_lock(backend=self.engine.backends[name], pod=pod, requests=requests)
            if spec is not None:
                specs.append(spec)
        return specs

    def _release_quietly(self, node: str, pod: Mapping[str, Any], spec: LockSpec) -> None:
        try:
            self.locker.release(node, pod, spec)
        except Exception as exc:
            log.warning("node %s: cannot release %s: %s", node, spec.annotation, exc)

    def _event(self, pod: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        if event_type == NORMAL and not self.normal_events:
            return
        try:
            self.cluster.event(pod, event_type, reason, message)
        except Exception as exc:  # events are best effort
            log.debug("event %s for %s not recorded: %s", reason, pod_ref(pod), exc)


def _key(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a pod, as bind's arguments name it."""
    meta = metadata(pod)
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")
