"""Feeds the engine from the cluster (spec §9): watches, a periodic registration pass, the ``synced`` gate.

Node events register the node (:meth:`Engine.upsert_node`) and write back the node patch the engine
asks for (the handshake); pod events book or release usage; ResourceQuota events set the namespaces' limits
(spec §11; a cluster without ``watch_resource_quotas`` enforces none, which is logged at start). Every engine
access takes one lock shared with the HTTP handlers. The lock is released before the cluster is called, because a
cluster may deliver watch events synchronously from the thread that writes.

A pod whose allocation annotation cannot be decoded quarantines its node in the engine; the feed makes that
visible: a Warning Event ``NodeQuarantined`` on the pod and on the node when it starts, a Normal Event
``NodeQuarantineLifted`` on the node when the pod is fixed or gone (the ``hami_node_quarantined`` metric
shows the current state). Each registration pass also drops bookings of pods the API server no longer has
(a reservation made just after the pod's deletion was seen would otherwise hold its devices forever).

The pass lists pods outside the engine lock, while the watch goes on applying events, so a listed object may be
older than what the watch applied meanwhile. As an informer does, a listed pod is not applied when the feed's copy
is newer (:attr:`Sync.pods`, compared by resourceVersion, etcd's one revision counter), and a pod the watch touched
(changed or deleted) while the list was taken is left as the watch has it: a re-filtered pod is not booked back on
its old node, a deleted pod is not booked again. Watch events older than what the feed applied (a list got there
first) are skipped for the same reason. The very version the feed holds is applied again: the engine skips it
while its ledger still follows it, and re-books it when the extender changed the pod's booking since (a re-filter
that found no node drops the reservation of a pod that still carries its last allocation).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.cluster.base import Cluster
from hami_core.cluster.refs import PodRef, resource_version
from hami_core.engine.facade import Engine
from hami_core.engine.pods import annotations, metadata, pod_key, pod_ref
from hami_core.scheduler.podview import PodView
from hami_core.wire import keys

__all__ = ["Sync"]

log = logging.getLogger("hami.scheduler.sync")

DEFAULT_INTERVAL_S = 15.0
QUARANTINED, QUARANTINE_LIFTED = "NodeQuarantined", "NodeQuarantineLifted"


class Sync:
    """Keeps ``engine`` current with ``cluster``.

    :param is_leader: only the leader registers nodes (§9.2); losing leadership clears ``synced``.
    :param interval_s: period of the re-registration pass (HAMi: 15 s).
    :param on_pass: called after each registration pass.

    ``node_listeners`` are called with the event type and the node's name on every Node watch event, before it
    is applied (the node locker wakes the binds waiting for that node's lock, and forgets a deleted node);
    ``pod_listeners`` with the event type and the pod after a Pod event is applied (the extender forgets what it
    decided for a deleted pod). A listener that raises is logged; the event is applied all the same.
    """

    def __init__(self, engine: Engine, cluster: Cluster, *, engine_lock: threading.RLock | None = None,
                 interval_s: float = DEFAULT_INTERVAL_S, is_leader: Callable[[], bool] | None = None,
                 on_pass: Callable[[], None] | None = None) -> None:
        self.engine = engine
        self.cluster = cluster
        self.lock = engine_lock if engine_lock is not None else threading.RLock()
        self.interval_s = interval_s
        self.is_leader = is_leader or (lambda: True)
        self.on_pass = on_pass
        self.node_listeners: list[Callable[[str, str], None]] = []
        self.pod_listeners: list[Callable[[str, dict[str, Any]], None]] = []
        #: node name -> what its last registration depended on (see :meth:`_unchanged`)
        self._registered: dict[str, Any] = {}
        self._lock_keys = engine.lock_annotations
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        #: pod key → (node, pod object) of pods whose allocation quarantines their node
        self._quarantined: dict[str, tuple[str, dict[str, Any]]] = {}
        #: the pods as this feed applied them (the extender's view of who a request names)
        self.pods = PodView()
        #: while a pass lists pods: the (namespace, name) of every pod the watch changed or deleted since the list
        #: began (engine lock)
        self._touched: set[tuple[str, str]] | None = None
        #: listed pods left alone by the last pass because the watch had applied a later state of them (tests)
        self.skipped = 0

    # ------------------------------------------------------------------------------------ lifecycle
    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        """Block until the first registration pass is done (or ``timeout_s``); True when synced."""
        return self._synced.wait(timeout_s)

    def start(self, *, background: bool = True) -> None:
        """Start watching, run the first registration pass, then (``background``) the periodic loop."""
        self.cluster.watch(self.on_node, self.on_pod)
        if hasattr(self.cluster, "watch_resource_quotas"):
            self.cluster.watch_resource_quotas(self.on_quota)
        else:
            log.warning("%s cannot watch ResourceQuotas: no quota is enforced", type(self.cluster).__name__)
        self.resync()
        if background:
            self._thread = threading.Thread(target=self._loop, name="hami-sync", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.resync()
            except Exception:
                log.exception("registration pass failed")

    def resync(self) -> None:
        """One registration pass: re-list nodes (and pods), register them, mark synced (leader only)."""
        if not self.is_leader():
            if self._synced.is_set():
                log.info("not the leader: registration paused")
            self._synced.clear()
            return
        nodes = self.cluster.list_nodes()
        known = {str(metadata(n).get("name")) for n in nodes}
        for node in nodes:
            self._register(node)
        with self.lock:
            gone = [name for name in self.engine.nodes if name not in known]
            for name in gone:
                self.engine.remove_node(name)
        with self.lock:
            booked = set(self.engine.ledger.bookings) | set(self._quarantined)
            self._touched = set()
        try:
            pods = self.cluster.list_pods()
        except BaseException:
            with self.lock:
                self._touched = None
            raise
        listed = {pod_key(p) for p in pods}
        changes = []
        skipped = 0
        with self.lock:
            touched, self._touched = self._touched or set(), None
            for pod in pods:
                if self._stale(pod, touched):
                    skipped += 1
                    continue
                try:
                    changes.append(self._apply_pod("MODIFIED", pod))
                except Exception:  # one pod the engine cannot take must not cost every other pod its pass
                    log.exception("pod %s: listed object not applied", pod_ref(pod))
            self.skipped = skipped
            self.pods.retain([*(PodRef.of(p) for p in pods), *touched])
            # Booked before the list was taken yet not listed: the pod is gone and its DELETED was missed.
            for key in sorted(booked - listed):
                log.info("pod %s: no longer on the API server; releasing its booking", key)
                changes.append(self._apply_pod("DELETED", {"metadata": {"uid": key}}))
        for change in changes:
            self._announce(change)
        self.passes += 1
        self._synced.set()
        if self.on_pass is not None:
            self.on_pass()

    # ------------------------------------------------------------------------------------ handlers
    def on_node(self, event: str, node: dict[str, Any]) -> None:
        """Watch callback for Nodes."""
        name = str(metadata(node).get("name") or "")
        for listener in self.node_listeners:
            try:
                listener(event, name)
            except Exception:
                log.exception("node %s: listener %r failed", name, listener)
        try:
            if event == "DELETED":
                self._registered.pop(name, None)
                with self.lock:
                    self.engine.remove_node(name)
                return
            if self._unchanged(name, node):
                return
            self._register(node)
        except Exception:
            log.exception("node %s: %s event not applied", name, event)

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        """Watch callback for Pods."""
        try:
            with self.lock:
                if self._touched is not None:
                    self._touched.add(PodRef.of(pod))
                change = None if event != "DELETED" and self._behind(pod) else self._apply_pod(event, pod)
            self._announce(change)
        except Exception:
            log.exception("pod %s/%s: %s event not applied", metadata(pod).get("namespace"),
                          metadata(pod).get("name"), event)
        for listener in self.pod_listeners:
            try:
                listener(event, pod)
            except Exception:
                log.exception("pod %s: listener %r failed", pod_ref(pod), listener)

    def on_quota(self, event: str, quota: dict[str, Any]) -> None:
        """Watch callback for ResourceQuotas."""
        try:
            with self.lock:
                if event == "DELETED":
                    self.engine.remove_quota(quota)
                else:
                    self.engine.upsert_quota(quota)
        except Exception:
            log.exception("ResourceQuota %s/%s: %s event not applied", metadata(quota).get("namespace"),
                          metadata(quota).get("name"), event)

    def _apply_pod(self, event: str, pod: dict[str, Any]) -> tuple[str, str, dict[str, Any], str] | None:
        """Book or release ``pod`` (engine lock held); returns a quarantine change to announce, if any:
        (``"start"`` or ``"lift"``, node, pod, reason)."""
        key = pod_key(pod)
        if event == "DELETED":
            self.pods.remove(pod)
            self.engine.remove_pod(pod)
        else:
            self.pods.put(pod)  # first: a pod the engine cannot book is still one a filter may name (and refuse)
            self.engine.upsert_pod(pod)
        node = str(annotations(pod).get(keys.VGPU_NODE) or "")
        state = self.engine.nodes.get(node) if event != "DELETED" else None
        reason = state.quarantine.get(key) if state is not None else None
        before = self._quarantined.get(key)
        if reason is not None and before is None:
            self._quarantined[key] = (node, pod)
            return "start", node, pod, reason
        if reason is None and before is not None:
            del self._quarantined[key]
            return "lift", before[0], before[1], ""
        return None

    def _behind(self, pod: Mapping[str, Any]) -> bool:
        """Whether a watch event brings an older version of a pod than the feed applied (a pass's list got there
        first; the watch catches up in a moment). Engine lock held."""
        seen = self.pods.get(*PodRef.of(pod))
        if seen is None or seen.version is None or seen.uid != str(metadata(pod).get("uid") or ""):
            return False
        version = resource_version(pod)
        if version is None or version >= seen.version:
            return False
        log.debug("pod %s: watch event at resourceVersion %s is older than the listed %s; skipped", pod_ref(pod),
                  version, seen.version)
        return True

    def _stale(self, pod: Mapping[str, Any], touched: set[tuple[str, str]]) -> bool:
        """Whether a listed ``pod`` is no news: the watch touched its name while the list was taken, or the feed
        holds that pod at a later version or a pod of that name created after it (engine lock held)."""
        name = PodRef.of(pod)
        if name in touched:
            return True
        seen = self.pods.get(*name)
        return seen is not None and seen.newer_than(pod)

    def _announce(self, change: tuple[str, str, dict[str, Any], str] | None) -> None:
        """Events for a quarantine change (outside the engine lock: the cluster is called)."""
        if change is None:
            return
        what, node, pod, reason = change
        node_ref = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}
        try:
            if what == "start":
                log.error("node %s quarantined: %s", node, reason)
                self.cluster.event(pod, "Warning", QUARANTINED,
                                   f"node {node} quarantined: no new pods until this allocation is fixed: {reason}")
                self.cluster.event(node_ref, "Warning", QUARANTINED, f"no new pods on this node: {reason}")
            else:
                log.info("node %s: quarantine by pod %s lifted", node, pod_ref(pod))
                self.cluster.event(node_ref, "Normal", QUARANTINE_LIFTED,
                                   f"pod {pod_ref(pod)} no longer holds an undecodable allocation on this node")
        except Exception as exc:  # events are best effort
            log.debug("quarantine event for node %s not recorded: %s", node, exc)

    def _fingerprint(self, node: Mapping[str, Any]) -> Any:
        """What registering ``node`` depends on: all of it but its node locks and bookkeeping. A bind locks and its
        Allocate unlocks the node for every pod, and re-registering it (decoding every device again) for those two
        events cost a tenth of the scheduler's CPU under a burst (``make bench-e2e``)."""
        meta = metadata(node)
        annos = meta.get("annotations") or {}
        return (repr(meta.get("labels")), repr(sorted((k, v) for k, v in annos.items() if k not in self._lock_keys)),
                repr(node.get("spec")), repr((node.get("status") or {}).get("allocatable")),
                repr((node.get("status") or {}).get("capacity")))

    def _unchanged(self, name: str, node: Mapping[str, Any]) -> bool:
        """A watch event that changes nothing registration depends on (the periodic pass re-registers anyway)."""
        return self._registered.get(name) == self._fingerprint(node)

    def _register(self, node: Mapping[str, Any]) -> None:
        name = str(metadata(node).get("name") or "")
        self._registered[name] = self._fingerprint(node)
        with self.lock:
            status = self.engine.upsert_node(node)
        for backend, error in status.errors.items():
            log.warning("node %s: %s registration: %s", name, backend, error)
        current = metadata(node).get("annotations") or {}
        patch = {k: v for k, v in status.patch.items() if current.get(k) != v}
        if patch:
            try:
                self.cluster.patch_node(name, {"metadata": {"annotations": patch}})
            except Exception as exc:  # HAMi only logs a failed handshake write
                log.warning("node %s: cannot write %s: %s", name, sorted(status.patch), exc)

