"""DRA mode on the e2e control plane: ``hami dra-driver`` as a process, and the kubelet's DRA side the harness
plays.

:class:`HamiDraDriver` runs ``hami dra-driver`` for one Node, as the chart's ``hami-dra-driver`` ServiceAccount,
with fake GPUs from a devices file (whose ``health`` fields are the GPUs' health) and the kubelet directories
(plugin registry, plugins, CDI) in a short temporary folder: unix socket paths are limited to 107 bytes.

:class:`DraKubeletSim` is what kubelet does for a DRA node, over the real protocol: it registers the driver through
its registration socket (``GetInfo``, connect, ``NotifyRegistrationStatus``), then for every pod bound to the node
whose claims kube-scheduler allocated and reserved for it calls ``NodePrepareResources`` and marks the pod Running;
for a pod being deleted it calls ``NodeUnprepareResources`` for the claims no other pod of the node uses, then
confirms the deletion (``gracePeriodSeconds=0`` with the pod's UID as precondition), as kubelet does. What it
prepared and unprepared, and every error the driver answered, is recorded for the tests.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .hami import hami_argv
from .procs import Proc, wait_until

__all__ = ["DraKubeletSim", "HamiDraDriver", "PreparedRecord"]

log = logging.getLogger("hami.e2e.dra")

DRIVER = "hami-core-gpu.project-hami.io"


class HamiDraDriver:
    """``hami dra-driver --node-name NODE`` with fake GPUs ``gpus`` (devices-file entries)."""

    def __init__(self, workdir: Path, kubeconfig: Path, node: str, gpus: Sequence[Mapping[str, Any]], *,
                 device_config: Path, resync_s: float = 2.0) -> None:
        self.workdir, self.node = workdir, node
        self.gpus = [dict(g) for g in gpus]
        self.devices_file = workdir / f"{node}.dra-devices.yaml"
        self.write_devices()
        self.root = Path(tempfile.mkdtemp(prefix="hdra", dir="/tmp"))
        self.registry_dir, self.plugins_dir = self.root / "registry", self.root / "plugins"
        self.cdi_dir = workdir / f"{node}.cdi"
        for folder in (self.registry_dir, self.plugins_dir, self.cdi_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.argv = [*hami_argv(), "dra-driver", f"--kubeconfig={kubeconfig}", f"--node-name={node}",
                     f"--device-config={device_config}", f"--devices-file={self.devices_file}", "--vendor=nvidia",
                     f"--resync={resync_s}", f"--kubelet-registry-dir={self.registry_dir}",
                     f"--kubelet-plugins-dir={self.plugins_dir}", f"--cdi-dir={self.cdi_dir}", "--log-level=INFO"]
        self.proc: Proc | None = None
        self.starts = 0

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRIVER}-reg.sock"

    def write_devices(self) -> None:
        self.devices_file.write_text(yaml.safe_dump({"devices": self.gpus}))

    def set_health(self, uuid: str, healthy: bool) -> None:
        """Edit the devices file: the fake GPU's driver reports it (un)healthy."""
        for gpu in self.gpus:
            if gpu["uuid"] == uuid:
                gpu["health"] = healthy
        self.write_devices()

    def start(self, timeout_s: float = 60.0) -> HamiDraDriver:
        self.starts += 1
        self.proc = Proc(f"hami-dra-driver-{self.node}", self.argv,
                         self.workdir / "logs" / f"hami-dra-driver-{self.node}-{self.starts}.log")
        wait_until(f"hami dra-driver of {self.node} serving", self.registration_socket.exists, timeout_s, 0.1,
                   proc=self.proc)
        return self

    def stop(self) -> int:
        code = self.proc.stop() if self.proc is not None else 0
        self.proc = None
        return code

    def cdi_specs(self) -> dict[str, dict[str, Any]]:
        """``{claim uid: CDI spec}`` of every spec file the driver wrote."""
        prefix = f"{DRIVER}-"
        return {p.name[len(prefix):-len(".json")]: json.loads(p.read_text())
                for p in sorted(self.cdi_dir.glob(f"{prefix}*.json"))}

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class PreparedRecord:
    """One claim the sim prepared: the pod it was prepared for and the CDI device IDs the driver answered."""

    namespace: str
    name: str
    uid: str
    pod: str
    cdi_device_ids: list[str]
    unprepared: bool = False


@dataclass
class _State:
    prepared: dict[str, PreparedRecord] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    running: set[str] = field(default_factory=set)


class DraKubeletSim:
    """Kubelet's DRA side for ``node`` (see the module docstring); :meth:`sync` is one pass, :meth:`start` runs
    passes every ``interval_s`` in a thread."""

    def __init__(self, admin_api: Any, node: str, registration_socket: Path, *, interval_s: float = 0.25) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(admin_api)
        self.resource = client.ResourceV1Api(admin_api)
        self.node = node
        self.registration_socket = registration_socket
        self.interval_s = interval_s
        self.state = _State()
        self._lock = threading.Lock()
        self._kubelet: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------ registration
    def register(self) -> Any:
        """Register the driver (again, after it restarted: kubelet's plugin watcher sees a new socket)."""
        from hami_core.testing.fake_kubelet import DraKubelet

        with self._lock:
            if self._kubelet is not None:
                self._kubelet.close()
            self._kubelet = DraKubelet(self.registration_socket)
            return self._kubelet.register(DRIVER)

    # ------------------------------------------------------------------------------------ passes
    def _claims_of(self, pod: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The pod's claims, each allocated and reserved for it; ``None`` while any is not yet."""
        statuses = {s["name"]: s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
        meta = pod["metadata"]
        out = []
        for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = statuses.get(ref["name"]) or ref.get("resourceClaimName")
            if not name:
                return None
            resp = self.resource.read_namespaced_resource_claim(name, meta["namespace"], _preload_content=False)
            claim = json.loads(resp.data)
            status = claim.get("status") or {}
            reserved = {r.get("uid") for r in status.get("reservedFor") or []}
            if not status.get("allocation") or meta["uid"] not in reserved:
                return None
            out.append(claim)
        return out

    def sync(self) -> None:
        resp = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}",
                                                     _preload_content=False)
        pods = json.loads(resp.data)["items"]
        live_pods = {p["metadata"]["uid"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                self._terminate(pod, live_pods)
            elif meta["uid"] not in self.state.running:
                self._start_pod(pod)
        # a pod gone without a graceful deletion (force-deleted): its claims are unprepared all the same
        with self._lock:
            orphans = [r for r in self.state.prepared.values() if not r.unprepared and r.pod not in live_pods]
        for record in orphans:
            self._unprepare(record)

    def _start_pod(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        claims = self._claims_of(pod)
        if claims is None or self._kubelet is None:
            return
        wanted = [(meta["namespace"], c["metadata"]["name"], c["metadata"]["uid"]) for c in claims]
        with self._lock:
            response = self._kubelet.prepare(*wanted)
        for namespace, name, uid in wanted:
            result = response.claims[uid]
            if result.error:
                self.state.errors.append(f"prepare {namespace}/{name}: {result.error}")
                return
            with self._lock:
                self.state.prepared[uid] = PreparedRecord(namespace, name, uid, meta["uid"],
                                                          [i for d in result.devices for i in d.cdi_device_ids])
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": {
            "phase": "Running", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}]}},
            _preload_content=False)
        self.state.running.add(meta["uid"])

    def _unprepare(self, record: PreparedRecord) -> bool:
        with self._lock:
            if self._kubelet is None:
                return False
            response = self._kubelet.unprepare((record.namespace, record.name, record.uid))
        error = response.claims[record.uid].error
        if error:
            self.state.errors.append(f"unprepare {record.namespace}/{record.name}: {error}")
            return False
        record.unprepared = True
        return True

    def _terminate(self, pod: Mapping[str, Any], live_pods: set[str]) -> None:
        meta = pod["metadata"]
        with self._lock:
            mine = [r for r in self.state.prepared.values() if r.pod == meta["uid"] and not r.unprepared]
        if not all(self._unprepare(r) for r in mine):
            return  # kubelet retries; the pod stays terminating
        from kubernetes.client import V1DeleteOptions, V1Preconditions

        with contextlib.suppress(Exception):
            self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=V1DeleteOptions(
                grace_period_seconds=0, preconditions=V1Preconditions(uid=meta["uid"])), _preload_content=False)
        self.state.running.discard(meta["uid"])

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sync()
            except Exception as exc:  # the API server or the driver restarting: the next pass retries
                log.info("DRA kubelet pass failed: %s", exc)

    def start(self) -> DraKubeletSim:
        self._thread = threading.Thread(target=self._run, name="dra-kubelet-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._kubelet is not None:
            self._kubelet.close()

    def prepared_for(self, pod_uid: str) -> list[PreparedRecord]:
        with self._lock:
            return [r for r in self.state.prepared.values() if r.pod == pod_uid]
