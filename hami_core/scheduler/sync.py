"""Feeds the engine from the cluster (spec §9): watches, a periodic registration pass, the ``synced`` gate.

Node events register the node (:meth:`Engine.upsert_node`) and write back the node patch the engine
asks for (the handshake); pod events book or release usage. Every engine access takes one lock shared
with the HTTP handlers. The lock is released before the cluster is called, because a cluster may
deliver watch events synchronously from the thread that writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from hami_core.cluster.base import Cluster
from hami_core.engine.facade import Engine
from hami_core.engine.pods import metadata

__all__ = ["Sync"]

log = logging.getLogger("hami.scheduler.sync")

DEFAULT_INTERVAL_S = 15.0


class Sync:
    """Keeps ``engine`` current with ``cluster``.

    :param is_leader: only the leader registers nodes (§9.2); losing leadership clears ``synced``.
    :param interval_s: period of the re-registration pass (HAMi: 15 s).
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
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0

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
        pods = self.cluster.list_pods()
        with self.lock:
            for pod in pods:
                self.engine.upsert_pod(pod)
        self.passes += 1
        self._synced.set()
        if self.on_pass is not None:
            self.on_pass()

    # ------------------------------------------------------------------------------------ handlers
    def on_node(self, event: str, node: dict[str, Any]) -> None:
        """Watch callback for Nodes."""
        name = str(metadata(node).get("name") or "")
        try:
            if event == "DELETED":
                with self.lock:
                    self.engine.remove_node(name)
                return
            self._register(node)
        except Exception:
            log.exception("node %s: %s event not applied", name, event)

    def on_pod(self, event: str, pod: dict[str, Any]) -> None:
        """Watch callback for Pods."""
        try:
            with self.lock:
                if event == "DELETED":
                    self.engine.remove_pod(pod)
                else:
                    self.engine.upsert_pod(pod)
        except Exception:
            log.exception("pod %s/%s: %s event not applied", metadata(pod).get("namespace"),
                          metadata(pod).get("name"), event)

    def _register(self, node: Mapping[str, Any]) -> None:
        name = str(metadata(node).get("name") or "")
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
