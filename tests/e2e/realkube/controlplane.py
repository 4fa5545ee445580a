"""etcd, kube-apiserver, kube-scheduler and kube-controller-manager from ``make e2e-bin``, on 127.0.0.1 with
ephemeral ports and a temporary folder, and what talks to them: kubeconfigs, the official client, ServiceAccount
tokens.

kube-apiserver runs as a cluster installer sets it up: its secure port only, serving certificates from the
harness's CA, client-certificate authentication (the admin is in ``system:masters``), ServiceAccount tokens
signed with the harness's key (so the TokenRequest API works and each hami component can run as its own
ServiceAccount), RBAC authorization, the MutatingAdmissionWebhook admission plugin, and an audit log (JSON lines,
``Metadata`` level) from which the tests read every request each identity made and what it got.

No kube-controller-manager runs in the session's control plane, so the harness does what its controllers would
where a test needs it: a namespace's ``default`` ServiceAccount. The DRA tests start one with only its
resourceclaim controller and garbage collector (:class:`KubeControllerManager`): the first turns a pod's
ResourceClaimTemplate into a claim and deallocates the claim when the pod goes, the second deletes the claim once
its pod is gone. ``TaintNodesByCondition`` is off because no node-lifecycle controller
would ever lift the ``not-ready`` taint it puts on a new Node.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import ssl
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .pki import CA, Pair
from .procs import Proc, free_port, wait_until

__all__ = ["ApiServer", "ControlPlane", "Etcd", "KubeControllerManager", "KubeScheduler", "binaries",
           "write_kubeconfig"]

ROOT = Path(__file__).resolve().parents[3]
BIN_ENV = "HAMI_E2E_BIN"
NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")


def binaries() -> Path | None:
    """The folder ``make e2e-bin`` printed (``$HAMI_E2E_BIN``), if it holds every component; else ``None``."""
    folder = os.environ.get(BIN_ENV)
    if not folder:
        return None
    path = Path(folder)
    return path if all(os.access(path / n, os.X_OK) for n in NAMES) else None


def write_kubeconfig(path: Path, server: str, ca: Path, *, user: str, token: str | None = None,
                     client: Pair | None = None) -> Path:
    """A kubeconfig for ``server``, authenticated by ``token`` or by the ``client`` certificate."""
    creds: dict[str, Any] = {"token": token} if token is not None else {}
    if client is not None:
        creds = {"client-certificate": str(client.cert), "client-key": str(client.key)}
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "e2e",
              "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
              "users": [{"name": user, "user": creds}],
              "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}]}
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


class Etcd:
    """One etcd member (``--unsafe-no-fsync``: a test's data need not survive a power cut)."""

    def __init__(self, bindir: Path, workdir: Path) -> None:
        self.bindir, self.workdir = bindir, workdir
        self.client_port, self.peer_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.proc: Proc | None = None

    def start(self) -> Etcd:
        peer = f"http://127.0.0.1:{self.peer_port}"
        self.proc = Proc("etcd", [str(self.bindir / "etcd"), "--name=e2e", f"--data-dir={self.workdir / 'etcd'}",
                                  f"--listen-client-urls={self.url}", f"--advertise-client-urls={self.url}",
                                  f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                                  f"--initial-cluster=e2e={peer}", "--log-level=warn", "--unsafe-no-fsync",
                                  "--quota-backend-bytes=4294967296"],
                         self.workdir / "logs" / "etcd.log")
        wait_until("etcd healthy", lambda: self._post("/health", None).get("health") == "true", 30, proc=self.proc)
        return self

    def _post(self, path: str, body: Any) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="GET" if body is None else "POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def revision(self) -> int:
        """The store's current revision (etcd's v3 JSON gateway)."""
        head = self._post("/v3/kv/range", {"key": base64.b64encode(b"/registry/").decode()})["header"]
        return int(head["revision"])

    def compact(self) -> int:
        """Compact the whole history up to the current revision (every older resourceVersion is gone)."""
        rev = self.revision()
        self._post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata"}]}


class ApiServer:
    """kube-apiserver on its secure port, backed by ``etcd``."""

    def __init__(self, bindir: Path, workdir: Path, etcd: Etcd, ca: CA, *, audit: bool = True,
                 extra_args: Sequence[str] = ()) -> None:
        self.bindir, self.workdir, self.etcd, self.ca = bindir, workdir, etcd, ca
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.audit = audit
        self.extra_args = list(extra_args)
        pki = workdir / "pki"
        self.serving = ca.issue("apiserver", "kube-apiserver", server=True,
                                hosts=["127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                                       "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "10.96.0.1"])
        self.sa_key, self.sa_pub = ca.service_account_keys()
        self.admin_cert = ca.issue("admin", "e2e-admin", organizations=["system:masters"], client=True)
        self.audit_log = workdir / "logs" / "audit.log"
        (pki / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        self.admin_kubeconfig = write_kubeconfig(workdir / "admin.kubeconfig", self.url, ca.cert, user="e2e-admin",
                                                 client=self.admin_cert)
        self.proc: Proc | None = None
        self.starts = 0

    def argv(self) -> list[str]:
        pki = self.workdir / "pki"
        args = [str(self.bindir / "kube-apiserver"),
                f"--etcd-servers={self.etcd.url}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}", f"--cert-dir={pki}",
                f"--tls-cert-file={self.serving.cert}", f"--tls-private-key-file={self.serving.key}",
                f"--client-ca-file={self.ca.cert}",
                # the front-proxy settings kubeadm writes; kube-scheduler's delegated authentication reads them
                f"--requestheader-client-ca-file={self.ca.cert}", "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.sa_pub}", f"--service-account-signing-key-file={self.sa_key}",
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,DefaultTolerationSeconds,Priority,"
                "MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ResourceQuota",
                "--disable-admission-plugins=TaintNodesByCondition",
                "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true", "--profiling=false",
                # the kubernetes Service's endpoints would be 127.0.0.1, which the reconciler refuses
                "--endpoint-reconciler-type=none",
                "--v=1"]
        if self.audit:
            args += [f"--audit-policy-file={pki / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
                     "--audit-log-format=json", "--audit-log-mode=batch", "--audit-log-batch-max-wait=1s",
                     "--audit-log-maxsize=0"]
        return args + self.extra_args

    def start(self, timeout_s: float = 90.0) -> ApiServer:
        self.starts += 1
        self.proc = Proc("kube-apiserver", self.argv(), self.workdir / "logs" / f"kube-apiserver-{self.starts}.log")
        wait_until("kube-apiserver ready", lambda: self.get_text("/readyz") == "ok", timeout_s, 0.25, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(20)
            self.proc = None

    def ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca.cert))
        ctx.load_cert_chain(str(self.admin_cert.cert), str(self.admin_cert.key))
        return ctx

    def get_text(self, path: str) -> str:
        """GET ``path`` as the admin (``/readyz``, ``/version``, ``/metrics``)."""
        with urllib.request.urlopen(self.url + path, timeout=10, context=self.ssl_context()) as resp:
            return resp.read().decode()

    def audit_events(self) -> list[dict[str, Any]]:
        """Every request in the audit log so far (its batch is flushed within a second)."""
        if not self.audit_log.exists():
            return []
        out = []
        for line in self.audit_log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


class KubeScheduler:
    """kube-scheduler started from a KubeSchedulerConfiguration (``config``: the document as a mapping)."""

    def __init__(self, bindir: Path, workdir: Path, name: str, config: Mapping[str, Any], kubeconfig: Path, *,
                 namespace_uts: str | None = None) -> None:
        self.bindir, self.workdir, self.name = bindir, workdir, name
        self.port = free_port()
        self.kubeconfig = kubeconfig
        config = json.loads(json.dumps(config))
        config.setdefault("clientConnection", {})["kubeconfig"] = str(kubeconfig)
        self.config_path = workdir / f"{name}.config.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.namespace_uts = namespace_uts
        self.proc: Proc | None = None

    def start(self) -> KubeScheduler:
        argv = [str(self.bindir / "kube-scheduler"), f"--config={self.config_path}", "--bind-address=127.0.0.1",
                f"--secure-port={self.port}", f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}", "--v=2"]
        if self.namespace_uts:
            # Its own hostname, as each replica's pod has one: kube-scheduler's Lease identity is
            # <hostname>_<uuid>, and hami (--leader-elect) follows the holder by hostname.
            argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', self.namespace_uts, *argv]
        self.proc = Proc(self.name, argv, self.workdir / "logs" / f"{self.name}.log")
        ctx = ssl._create_unverified_context()

        def healthy() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz", timeout=5, context=ctx) as r:
                return r.read() == b"ok"

        wait_until(f"{self.name} healthy", healthy, 60, 0.25, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc = None


class KubeControllerManager:
    """kube-controller-manager running only ``controllers`` (default: the resourceclaim controller and the garbage
    collector), as the admin, with no leader election (one per control plane)."""

    def __init__(self, bindir: Path, workdir: Path, kubeconfig: Path,
                 controllers: Sequence[str] = ("resourceclaim-controller", "garbage-collector-controller")) -> None:
        self.bindir, self.workdir, self.kubeconfig = bindir, workdir, kubeconfig
        self.controllers = list(controllers)
        self.port = free_port()
        self.proc: Proc | None = None

    def start(self) -> KubeControllerManager:
        argv = [str(self.bindir / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                f"--controllers={','.join(self.controllers)}", "--leader-elect=false", "--bind-address=127.0.0.1",
                f"--secure-port={self.port}", f"--cert-dir={self.workdir / 'pki' / 'kcm'}",
                "--use-service-account-credentials=false", "--v=2"]
        self.proc = Proc("kube-controller-manager", argv, self.workdir / "logs" / "kube-controller-manager.log")
        ctx = ssl._create_unverified_context()

        def healthy() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{self.port}/healthz", timeout=5, context=ctx) as r:
                return r.read() == b"ok"

        wait_until("kube-controller-manager healthy", healthy, 60, 0.25, proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None


class ControlPlane:
    """etcd + kube-apiserver in ``workdir``, with the admin's official client. A context manager."""

    def __init__(self, bindir: Path, workdir: Path, *, audit: bool = True, apiserver_args: Sequence[str] = ()) -> None:
        self.bindir, self.workdir = bindir, workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.ca = CA(workdir / "pki")
        self.etcd = Etcd(bindir, workdir)
        self.apiserver = ApiServer(bindir, workdir, self.etcd, self.ca, audit=audit, extra_args=apiserver_args)
        self._clients: list[Any] = []

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        started = time.monotonic()
        self.etcd.start()
        self.apiserver.start()
        self.boot_s = time.monotonic() - started
        return self

    def stop(self) -> None:
        for api in self._clients:
            with contextlib.suppress(Exception):
                api.close()
        self._clients.clear()
        self.apiserver.stop()
        self.etcd.stop()

    # ------------------------------------------------------------------------------------ clients
    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """An official ``kubernetes.client.ApiClient`` (admin unless ``kubeconfig``)."""
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig or self.apiserver.admin_kubeconfig),
                                client_configuration=configuration)
        api = client.ApiClient(configuration)
        self._clients.append(api)
        return api

    @property
    def admin(self) -> Any:
        if not hasattr(self, "_admin"):
            self._admin = self.api_client()
        return self._admin

    def core(self, api: Any = None) -> Any:
        from kubernetes import client

        return client.CoreV1Api(api or self.admin)

    def token(self, namespace: str, service_account: str, seconds: int = 7200) -> str:
        """A ServiceAccount token from the TokenRequest API (what a projected token volume holds)."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "spec": {"expirationSeconds": seconds}}
        resp = self.core().create_namespaced_service_account_token(service_account, namespace, body,
                                                                   _preload_content=False)
        return str(json.loads(resp.data)["status"]["token"])

    def kubeconfig_for(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig that authenticates as ``system:serviceaccount:<namespace>:<service_account>``."""
        token = self.token(namespace, service_account)
        path = self.workdir / f"{namespace}.{service_account}.kubeconfig"
        return write_kubeconfig(path, self.apiserver.url, self.ca.cert,
                                user=f"system:serviceaccount:{namespace}:{service_account}", token=token)

    def ensure_namespace(self, name: str) -> None:
        """The namespace and its ``default`` ServiceAccount (kube-controller-manager's job; none runs here)."""
        from kubernetes.client.exceptions import ApiException

        core = self.core()
        for create in (lambda: core.create_namespace({"metadata": {"name": name}}),
                       lambda: core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})):
            try:
                create()
            except ApiException as exc:
                if exc.status != 409:
                    raise


def kubectl(bindir: Path, kubeconfig: Path, *args: str, input_text: str | None = None,
            check: bool = True) -> Any:
    """Run the ``kubectl`` built with the control plane; returns the CompletedProcess."""
    import subprocess

    exe = bindir / "kubectl"
    if not exe.exists():
        exe = Path(shutil.which("kubectl") or "kubectl")
    return subprocess.run([str(exe), f"--kubeconfig={kubeconfig}", *args], input=input_text, text=True,
                          capture_output=True, check=check, timeout=120)


def iter_docs(text: str) -> Iterator[dict[str, Any]]:
    for doc in yaml.safe_load_all(text):
        if doc:
            yield doc
