"""One running hami installation on the e2e control plane: the shipped RBAC, ``hami scheduler`` and the stock
kube-scheduler (both as the hami-scheduler ServiceAccount, as in the shipped Deployment), the webhook
registration, and the kubelet parts the harness plays (as the hami-device-plugin ServiceAccount)."""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .controlplane import ROOT, ControlPlane, KubeScheduler, iter_docs, kubectl
from .hami import DEFAULT_INSTALL, HamiScheduler, Install, scheduler_config, webhook_configuration
from .objects import KubeletSim, allocated, create_node
from .procs import wait_until

__all__ = ["RBAC_KINDS", "Stack"]

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap"}
#: the chart's default render (`make manifests`; tests/deploy/test_chart.py keeps it current)
SHIPPED = ROOT / "deploy" / "hami-py.yaml"

Ledger = dict[tuple[str, str, str, str], tuple[int, int]]


def shipped_docs(path: Path = SHIPPED) -> list[dict[str, Any]]:
    """The objects of deploy/hami-py.yaml (or another render of the chart)."""
    return list(iter_docs(path.read_text(encoding="utf-8")))


class Stack:
    def __init__(self, plane: ControlPlane, bindir: Path, install: Install = DEFAULT_INSTALL) -> None:
        self.plane, self.bindir = plane, bindir
        #: the render hami is started from (deploy/hami-py.yaml, or a chart render in another namespace)
        self.install_from = install
        self.workdir = plane.workdir
        self.hami: HamiScheduler | None = None
        self.scheduler: KubeScheduler | None = None
        self.kubelet: KubeletSim | None = None
        self.hami_extra: dict[str, str | None] = {}

    # ------------------------------------------------------------------------------------ install
    def install(self) -> None:
        """Server-side apply of the shipped ServiceAccounts, RBAC and ConfigMaps; kubeconfigs for hami's
        ServiceAccounts (TokenRequest)."""
        admin = self.plane.apiserver.admin_kubeconfig
        docs = [d for d in shipped_docs(self.install_from.path) if d["kind"] in RBAC_KINDS]
        import yaml

        kubectl(self.bindir, admin, "apply", "--server-side", "--field-manager=hami-e2e", "-f", "-",
                input_text=yaml.safe_dump_all(docs))
        namespace = self.install_from.namespace
        self.scheduler_kubeconfig = self.plane.kubeconfig_for(namespace, "hami-scheduler")
        self.device_kubeconfig = self.plane.kubeconfig_for(namespace, "hami-device-plugin")

    def device_cluster(self, **kwargs: Any) -> Any:
        """A ``KubeCluster`` as the device plugin's ServiceAccount."""
        from hami_core.cluster.kube import KubeCluster

        return KubeCluster(kubeconfig=str(self.device_kubeconfig), qps=0, **kwargs)

    def admin_cluster(self, **kwargs: Any) -> Any:
        from hami_core.cluster.kube import KubeCluster

        return KubeCluster(kubeconfig=str(self.plane.apiserver.admin_kubeconfig), qps=0, **kwargs)

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self, hami_extra: Mapping[str, str | None] | None = None) -> None:
        self.hami_extra = dict(hami_extra or {})
        self.hami = HamiScheduler(self.workdir, self.plane.ca, self.scheduler_kubeconfig, extra=self.hami_extra,
                                  install=self.install_from)
        self.hami.start(ready=False)
        config = scheduler_config(self.hami.url, self.plane.ca.pem, install=self.install_from)
        self.scheduler = KubeScheduler(self.bindir, self.workdir, "kube-scheduler", config, self.scheduler_kubeconfig)
        self.scheduler.start()
        self.hami.wait_ready()  # --leader-elect: ready once it sees kube-scheduler hold the Lease
        self.register_webhook()
        self.kubelet = KubeletSim(self.admin_cluster(), self.device_cluster(), []).start()

    def register_webhook(self, failure_policy: str | None = None) -> dict[str, Any]:
        assert self.hami is not None
        body = webhook_configuration(f"{self.hami.webhook_url}/webhook", self.plane.ca.pem,
                                     failure_policy=failure_policy, install=self.install_from)
        from kubernetes import client

        api = client.AdmissionregistrationV1Api(self.plane.admin)
        with contextlib.suppress(Exception):
            api.delete_mutating_webhook_configuration(body["metadata"]["name"])
        api.create_mutating_webhook_configuration(body, _preload_content=False)
        return body

    def restart_hami(self, extra: Mapping[str, str | None] | None = None) -> None:
        """Stop hami and start it again on the same ports (kube-scheduler keeps calling the same URL)."""
        assert self.hami is not None
        old = self.hami
        old.stop()
        self.hami_extra = dict(extra or {})
        self.hami = HamiScheduler(self.workdir, self.plane.ca, self.scheduler_kubeconfig, extra=self.hami_extra,
                                  port=old.port, metrics_port=old.metrics_port, webhook_port=old.webhook_port,
                                  install=self.install_from)
        self.hami.tls, self.hami.argv = old.tls, [a.replace(str(self.hami.tls.cert), str(old.tls.cert))
                                                  .replace(str(self.hami.tls.key), str(old.tls.key))
                                                  for a in self.hami.argv]
        self.hami.start()

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        for component in (self.scheduler, self.hami):
            if component is not None:
                component.stop()

    # ------------------------------------------------------------------------------------ objects
    def create_nodes(self, count: int, prefix: str, *, gpus: int = 8, register: bool = True,
                     kubelet: bool = True, wait: bool = True) -> list[str]:
        names = [f"{prefix}-{i}" for i in range(count)]
        core = self.plane.core()
        for name in names:
            create_node(core, name, gpus=gpus, register=register)
        if kubelet and self.kubelet is not None:
            self.kubelet.add_nodes(names)
        if wait and register and gpus:
            self.wait_hami_nodes(names)
        return names

    def delete_nodes(self, names: Iterable[str]) -> None:
        core = self.plane.core()
        for name in names:
            with contextlib.suppress(Exception):
                core.delete_node(name, _preload_content=False)

    def delete_pods(self, namespace: str) -> None:
        """Every pod of ``namespace``, at once (grace 0), and wait until they are gone."""
        core = self.plane.core()
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0, _preload_content=False)
        wait_until(f"pods of {namespace} gone", lambda: not self.pods(namespace), 60, 0.2)

    def pods(self, namespace: str) -> list[dict[str, Any]]:
        import json

        resp = self.plane.core().list_namespaced_pod(namespace, _preload_content=False)
        return list(json.loads(resp.data)["items"])

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        import json

        return dict(json.loads(self.plane.core().read_namespaced_pod(name, namespace, _preload_content=False).data))

    def create_pods(self, namespace: str, pods: Sequence[Mapping[str, Any]]) -> None:
        core = self.plane.core()
        for pod in pods:
            core.create_namespaced_pod(namespace, dict(pod), _preload_content=False)

    def wait_bound(self, namespace: str, count: int, timeout_s: float = 120.0) -> list[dict[str, Any]]:
        def bound() -> list[dict[str, Any]] | None:
            pods = self.pods(namespace)
            done = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
            return pods if len(done) >= count else None

        return wait_until(f"{count} pods of {namespace} bound", bound, timeout_s, 0.25)  # type: ignore[return-value]

    def events(self, namespace: str) -> list[dict[str, Any]]:
        import json

        resp = self.plane.core().list_namespaced_event(namespace, _preload_content=False)
        return list(json.loads(resp.data)["items"])

    # ------------------------------------------------------------------------------------ hami's view
    def hami_metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        assert self.hami is not None
        out: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        for family in text_string_to_metric_families(self.hami.get("/metrics", metrics=True)):
            for sample in family.samples:
                out[sample.name].append((dict(sample.labels), sample.value))
        return out

    def wait_hami_nodes(self, names: Iterable[str], timeout_s: float = 60.0) -> None:
        """Until hami's inventory holds every node of ``names`` (from its metrics)."""
        wanted = set(names)

        def known() -> bool:
            have = {labels["node"] for labels, _ in self.hami_metrics().get("hami_gpu_memory_limit_bytes", [])}
            return wanted <= have

        wait_until(f"hami knows {len(wanted)} nodes", known, timeout_s, 0.2)

    def hami_ledger(self, namespace: str | None = None) -> Ledger:
        """(namespace, pod, node, device) -> (MiB, cores) booked in hami's ledger, from its metrics."""
        mem: dict[tuple[str, str, str, str], float] = defaultdict(float)
        cores: dict[tuple[str, str, str, str], float] = defaultdict(float)
        metrics = self.hami_metrics()
        for labels, value in metrics.get("hami_vgpu_memory_allocated_bytes", []):
            if namespace is None or labels["namespace"] == namespace:
                mem[(labels["namespace"], labels["pod"], labels["node"], labels["device_uuid"])] += value
        for labels, value in metrics.get("hami_vgpu_core_allocated_ratio", []):
            if namespace is None or labels["namespace"] == namespace:
                cores[(labels["namespace"], labels["pod"], labels["node"], labels["device_uuid"])] += value
        return {k: (int(mem[k] // (1024 * 1024)), int(cores.get(k, 0))) for k in mem}

    def api_ledger(self, namespace: str) -> Ledger:
        """The same, decoded from the allocation annotations the API server holds for ``namespace``'s pods."""
        out: dict[tuple[str, str, str, str], list[int]] = {}
        for pod in self.pods(namespace):
            meta = pod["metadata"]
            node = (meta.get("annotations") or {}).get("hami.io/vgpu-node") or ""
            for uuid, mem, cores in allocated(pod):
                entry = out.setdefault((namespace, meta["name"], node, uuid), [0, 0])
                entry[0] += mem
                entry[1] += cores
        return {k: (v[0], v[1]) for k, v in out.items()}

    def wait(self, seconds: float) -> None:
        time.sleep(seconds)
