"""Where a filter's allocation is written (``--write-allocation``): two strategies the extender calls at each step.

* :class:`WriteAtFilter` (``filter``, HAMi's): the filter patches the pod's allocation annotations before it
  answers, and bind checks the allocation the API server holds. A patch that finally fails leaves the ledger as
  the API server has the pod (re-read), so a patch that was applied after all is neither lost nor double counted.
* :class:`WriteAtBind` (``bind``): the filter books the devices and answers at once; the decision waits here for
  its bind, which writes the allocation with the bind phase, in one patch under the node lock. Nobody else knows
  of such a reservation, so an unbound decision expires (:data:`DECISION_TTL_S`) and a failed bind drops it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from hami_core.cluster.base import NotFoundError
from hami_core.cluster.refs import PodRef
from hami_core.engine.decision import Decision
from hami_core.engine.pods import annotations, metadata, pod_ref
from hami_core.plugins.types import ContainerRequests
from hami_core.scheduler.extwire import FILTERING_FAILED, WARNING
from hami_core.wire import keys

if TYPE_CHECKING:
    from hami_core.scheduler.extender import Extender

__all__ = ["DECISION_TTL_S", "EXPIRE_BATCH", "MAX_DECIDED", "MAX_FILTERED", "AllocationWrites", "Unwritten",
           "WriteAtBind", "WriteAtFilter"]

log = logging.getLogger("hami.scheduler.extender")

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
#: Pods kept from their filter for their bind (filtered, not yet bound); past this the oldest bind reads its pod.
MAX_FILTERED = 8192
#: Expired decisions a filter checks at most (one pod read each), so that a filter never pays for many.
EXPIRE_BATCH = 4


class Unwritten(NamedTuple):
    """What ``--write-allocation bind`` keeps from a filter for the pod's bind."""

    node: str
    annotations: dict[str, str]  # the allocation bind writes
    uid: str  # the pod's, so that a deleted pod's event leaves a new pod of its name alone
    at: float  # when decided (``Extender.clock``), for expiry


class AllocationWrites:
    """The steps of filter and bind that depend on where the allocation is written; the base does nothing.

    Methods marked "lock held" are called with the extender's engine lock held; the others take it themselves
    around engine access and never hold it while calling the cluster.
    """

    #: pod → what this replica's filter decided and has not written yet (``WriteAtBind`` only)
    decided: OrderedDict[tuple[str, str], Unwritten] | None = None
    #: whether bind's over-commit check takes the pod as the API server stores it (its allocation is written there)
    checks_stored_pod = False

    def __init__(self, ext: Extender) -> None:
        self.ext = ext

    # filter
    def before_filter(self) -> None:
        """A filter of a pod with device requests is about to reserve."""

    def reserved(self, pod: Mapping[str, Any], decision: Decision) -> None:
        """The filter reserved ``decision`` for ``pod`` (lock held)."""

    def after_filter(self, pod: Mapping[str, Any], decision: Decision, requests: ContainerRequests) -> str:
        """The filter's write, if any; returns why the filter fails (``""``: it succeeds)."""
        return ""

    # bind
    def filter_copy(self, ref: PodRef, uid: str) -> tuple[Mapping[str, Any], ContainerRequests] | None:
        """The pod as this replica's filter left it, with its requests, taken for its bind (``None``: none)."""
        return None

    def bind_refusal(self, pod: Mapping[str, Any], ref: PodRef, node: str, from_filter: bool) -> str:
        """Why a pod with device requests cannot be bound to ``node`` here (``""``: it can, as far as this goes)."""
        return ""

    def at_bind(self, pod: Mapping[str, Any], ref: PodRef,
                node: str) -> tuple[Mapping[str, Any], dict[str, str], str]:
        """(the pod to bind, the allocation annotations bind must write, why it cannot be bound here or ``""``)."""
        return pod, {}, ""

    def bind_finished(self, ref: PodRef) -> None:
        """A bind that :meth:`at_bind` let through has ended, bound or not."""

    def bind_failed(self, pod: Mapping[str, Any], ref: PodRef, allocation: Mapping[str, str]) -> None:
        """The bind failed after :meth:`at_bind` (nothing of the node lock is held any more)."""

    def bound(self, ref: PodRef) -> None:
        """The pod is bound."""

    # the pod's life
    def deleted(self, ref: PodRef, uid: str) -> None:
        """A Pod watch event deleted the pod (lock held)."""

    def gone(self, ref: PodRef, uid: str) -> None:
        """A bind found the pod gone (lock held)."""

    def expire(self, max_age_s: float, *, limit: int | None = None) -> int:
        """Drop the decisions older than ``max_age_s``; returns how many went."""
        return 0


class WriteAtFilter(AllocationWrites):
    """``--write-allocation filter``: the filter patches the pod (HAMi's behaviour)."""

    checks_stored_pod = True

    def __init__(self, ext: Extender) -> None:
        super().__init__(ext)
        #: pod → the pod as the filter's patch answered it and its requests, for the bind that follows
        self._filtered: OrderedDict[tuple[str, str], tuple[Mapping[str, Any], ContainerRequests]] = OrderedDict()

    def after_filter(self, pod: Mapping[str, Any], decision: Decision, requests: ContainerRequests) -> str:
        ext = self.ext
        patch = {"metadata": {"annotations": dict(decision.annotations),
                              "labels": {keys.VGPU_NODE: decision.node or ""}}}
        namespace, name = ref = PodRef.of(pod)
        try:
            patched = ext.write(f"patch pod {ref}", lambda: ext.cluster.patch_pod(namespace, name, patch))
            self._remember(ref, patched, requests)
        except Exception as exc:
            if not self._reconcile(pod, decision.annotations):
                text = f"failed to patch pod {pod_ref(pod)}: {exc}"
                log.warning("filter: %s", text)
                ext.event(pod, WARNING, FILTERING_FAILED, text)
                return text
        return ""

    def _remember(self, ref: PodRef, pod: Mapping[str, Any], requests: ContainerRequests) -> None:
        """Keep the pod as the filter's patch left it, for its bind (most recent :data:`MAX_FILTERED`)."""
        with self.ext.lock:
            self._filtered[ref] = (pod, requests)
            self._filtered.move_to_end(ref)
            while len(self._filtered) > MAX_FILTERED:
                self._filtered.popitem(last=False)

    def _reconcile(self, pod: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
        """After a failed filter patch, make the ledger match the pod as the API server has it.

        Returns True when the patch was applied after all (a lost response): the reservation stands and the
        filter succeeds. Otherwise the pod's stored allocation, if any, is booked in place of the reservation
        (what a restarted scheduler would book), or the reservation is dropped.
        """
        ext = self.ext
        try:
            fresh = ext.cluster.get_pod(*PodRef.of(pod))
        except Exception as exc:  # gone, or unreadable: the watch feed settles it
            log.debug("filter: cannot re-read %s: %s", pod_ref(pod), exc)
            fresh = None
        applied = fresh is not None and all(annotations(fresh).get(k) == v for k, v in wanted.items())
        with ext.lock:
            if applied:
                return True
            ext.engine.unreserve(pod)
            if fresh is not None and annotations(fresh).get(keys.VGPU_NODE):
                ext.engine.upsert_pod(fresh)
        return False

    def filter_copy(self, ref: PodRef, uid: str) -> tuple[Mapping[str, Any], ContainerRequests] | None:
        with self.ext.lock:
            cached = self._filtered.get(ref)
            if cached is not None and str(metadata(cached[0]).get("uid") or "") == uid:
                del self._filtered[ref]
                return cached
        return None

    def bind_refusal(self, pod: Mapping[str, Any], ref: PodRef, node: str, from_filter: bool) -> str:
        chosen = annotations(pod).get(keys.VGPU_NODE)
        if not chosen:
            return (f"pod {ref} carries no device allocation and this scheduler has not decided one; it must be "
                    "filtered again")
        if chosen != node and not from_filter:
            return f"pod {ref} was filtered onto node {chosen}, not {node}; it must be filtered again"
        return ""

    def deleted(self, ref: PodRef, uid: str) -> None:
        filtered = self._filtered.get(ref)
        if filtered is not None and str(metadata(filtered[0]).get("uid") or "") == uid:
            del self._filtered[ref]


class WriteAtBind(AllocationWrites):
    """``--write-allocation bind``: the filter books and answers; bind writes the allocation with the bind phase."""

    def __init__(self, ext: Extender) -> None:
        super().__init__(ext)
        #: pod (namespace, name) → what this replica's filter decided and has not written yet, oldest first; a
        #: deleted pod's decision is dropped (:meth:`deleted`), an old one expires (:meth:`expire`), and the oldest
        #: are forgotten past :data:`MAX_DECIDED`
        self.decided: OrderedDict[tuple[str, str], Unwritten] = OrderedDict()
        #: pods whose bind is under way (their decision does not expire meanwhile)
        self._binding: set[tuple[str, str]] = set()

    def before_filter(self) -> None:
        if self.decided:
            self.expire(self.ext.decision_ttl_s, limit=EXPIRE_BATCH)

    def reserved(self, pod: Mapping[str, Any], decision: Decision) -> None:
        ref = PodRef.of(pod)
        self.decided[ref] = Unwritten(decision.node or "", dict(decision.annotations),
                                      str(metadata(pod).get("uid") or ""), self.ext.clock())
        self.decided.move_to_end(ref)
        while len(self.decided) > MAX_DECIDED:
            self.decided.popitem(last=False)

    def at_bind(self, pod: Mapping[str, Any], ref: PodRef,
                node: str) -> tuple[Mapping[str, Any], dict[str, str], str]:
        """The pod as this replica's filter decided it (its allocation annotations merged in), the annotations bind
        must write, and an error text when it cannot be bound here.

        A pod that already carries an allocation (a replica writing at filter did it) binds as it is. One that
        carries none and was not decided here (filtered by another replica, or before a restart) is refused,
        as is one decided for another node: kube-scheduler filters it again.
        """
        ext = self.ext
        with ext.lock:
            decided = self.decided.get(ref)
            if decided is not None and decided.uid != str(metadata(pod).get("uid") or ""):
                decided = None  # decided for an earlier pod of that name
            if decided is None:  # the pod requests devices (checked by the caller)
                chosen = annotations(pod).get(keys.VGPU_NODE)
                if chosen == node:
                    self._binding.add(ref)
                    return pod, {}, ""  # another replica wrote its allocation
                if chosen:
                    return pod, {}, f"pod {ref} was filtered onto node {chosen}, not {node}; it must be filtered again"
                ext.engine.unreserve(pod)
                return pod, {}, (f"pod {ref} carries no device allocation and this scheduler has not decided one; "
                                 "it must be filtered again")
        chosen, allocation = decided.node, decided.annotations
        if chosen != node:
            with ext.lock:
                self._rebook(pod, pod)  # ``pod`` is bind's fresh read: it may carry another replica's allocation
                self.decided.pop(ref, None)
            return pod, {}, f"pod {ref} was filtered onto node {chosen}, not {node}; it must be filtered again"
        meta = dict(metadata(pod))
        meta["annotations"] = {**(meta.get("annotations") or {}), **allocation}
        with ext.lock:
            self._binding.add(ref)  # its decision does not expire while it waits for the lock
        return {**pod, "metadata": meta}, allocation, ""

    def bind_finished(self, ref: PodRef) -> None:
        with self.ext.lock:
            self._binding.discard(ref)

    def bind_failed(self, pod: Mapping[str, Any], ref: PodRef, allocation: Mapping[str, str]) -> None:
        """Unless the pod carries the allocation after all (the patch went through before a later step failed),
        nobody but this replica knows of it, so its reservation and decision go (kube-scheduler filters the pod
        again), and the pod is booked as it is stored. If the pod cannot be read, both are kept: holding devices a
        while is safe, booking them twice is not."""
        if not allocation:
            return
        ext = self.ext
        try:
            fresh = ext.cluster.get_pod(*ref)
        except Exception as exc:
            log.debug("bind %s: cannot re-read the pod (%s); its reservation stays", ref, exc)
            return
        stored = annotations(fresh)
        if all(stored.get(k) == v for k, v in allocation.items()):
            return  # written: the watch books it as any allocated pod
        with ext.lock:
            self._rebook(pod, fresh)
            self.decided.pop(ref, None)

    def bound(self, ref: PodRef) -> None:
        with self.ext.lock:
            self.decided.pop(ref, None)

    def deleted(self, ref: PodRef, uid: str) -> None:
        decided = self.decided.get(ref)
        if decided is not None and (not uid or not decided.uid or decided.uid == uid):
            del self.decided[ref]

    def gone(self, ref: PodRef, uid: str) -> None:
        """What this replica decided for exactly that pod goes, with its reservation (the watch's deletion does the
        same; this covers one it missed)."""
        decided = self.decided.get(ref)
        if decided is not None and decided.uid == uid:
            del self.decided[ref]
            self.ext.engine.unreserve(ref.stub(uid))

    def expire(self, max_age_s: float, *, limit: int | None = None) -> int:
        """Drop the decisions older than ``max_age_s`` (at most ``limit`` of them), oldest first, and rebook each
        pod from a fresh read: its reservation goes, unless the pod carries an allocation (another replica wrote
        and bound it), which is booked instead. A pod that cannot be read keeps its reservation until the next
        sweep."""
        ext = self.ext
        dropped = 0
        now = ext.clock()
        while limit is None or dropped < limit:
            with ext.lock:  # oldest first; a decision whose bind is under way is not expired under it
                oldest = next(((k, d) for k, d in self.decided.items() if k not in self._binding), None)
            if oldest is None or now - oldest[1].at < max_age_s:
                break
            key, decided = oldest
            ref = PodRef(*key)
            try:
                fresh: Mapping[str, Any] | None = ext.cluster.get_pod(*ref)
            except NotFoundError:
                fresh = None
            except Exception as exc:
                log.debug("decision for pod %s: cannot read the pod (%s); kept for now", ref, exc)
                break
            with ext.lock:
                if self.decided.get(ref) is not decided:
                    continue  # bound, re-filtered or dropped meanwhile
                del self.decided[ref]
                self._rebook(ref.stub(decided.uid), fresh)
            dropped += 1
            log.info("pod %s: decision for node %s dropped after %.0f s without a bind; its devices are free "
                     "again", ref, decided.node, now - decided.at)
        return dropped

    def _rebook(self, pod: Mapping[str, Any], fresh: Mapping[str, Any] | None) -> None:
        """Drop ``pod``'s reservation and book it as the API server has it (``fresh``; ``None``: gone). Engine lock
        held. Unreserving alone would also drop an allocation another replica wrote since, until the pod's next
        watch event."""
        engine = self.ext.engine
        engine.unreserve(pod)
        if fresh is None:
            engine.remove_pod(pod)
        elif str(metadata(fresh).get("uid") or "") == str(metadata(pod).get("uid") or ""):
            engine.upsert_pod(fresh)
