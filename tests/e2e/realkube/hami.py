"""hami-py's own components as processes against the real control plane, started from what deploy/ ships:

* :func:`scheduler_args`: the ``vgpu-scheduler-extender`` container's args of deploy/hami-py.yaml's Deployment
  with only the addresses, file paths and credentials rewritten for a process on loopback (``--in-cluster`` →
  ``--kubeconfig``), so the test proves the shipped args parse and run;
* :func:`scheduler_config`: the KubeSchedulerConfiguration of deploy/hami-py.yaml (ConfigMap
  hami-scheduler-newversion) with only the
  extender's URL and TLS settings rewritten (the rest as shipped);
* :func:`webhook_configuration`: deploy/hami-py.yaml's hami-webhook (both entries, matchConditions as shipped) with
  ``clientConfig`` pointing at the hami process's webhook listener.
"""

from __future__ import annotations

import base64
import copy
import shutil
import ssl
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .controlplane import ROOT
from .pki import CA, Pair
from .procs import Proc, free_port, wait_until

__all__ = ["DEFAULT_INSTALL", "HamiDevicePlugin", "HamiScheduler", "Install", "hami_argv", "scheduler_args",
           "scheduler_config", "shipped_scheduler_args", "webhook_configuration"]

DEPLOY = ROOT / "deploy"
#: the chart's default render (tests/chart_helpers.py; `make manifests`), and its device-config.yaml
SHIPPED = DEPLOY / "hami-py.yaml"
DEVICE_CONFIG = DEPLOY / "device-config.yaml"
NAMESPACE = "kube-system"


@dataclass(frozen=True)
class Install:
    """What the harness starts hami from: a render of the chart (``path``), the namespace it was rendered for, and
    its device-config.yaml as a file (the ConfigMap's payload)."""

    path: Path
    namespace: str
    device_config: Path

    @classmethod
    def of_render(cls, path: Path, namespace: str) -> Install:
        """A render of the chart written to ``path``; its device config is written beside it."""
        (cm,) = [d for d in _docs(path) if d.get("kind") == "ConfigMap"
                 and d["metadata"]["name"] == "hami-scheduler-device"]
        device_config = path.with_name(path.stem + ".device-config.yaml")
        device_config.write_text(cm["data"]["device-config.yaml"])
        return cls(path, namespace, device_config)


#: deploy/hami-py.yaml, as every e2e test but the chart's runs hami
DEFAULT_INSTALL = Install(SHIPPED, NAMESPACE, DEVICE_CONFIG)


def hami_argv() -> list[str]:
    """The ``hami`` command of the running interpreter's environment."""
    exe = Path(sys.executable).parent / "hami"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("hami")
    return [found] if found else [sys.executable, "-m", "hami_core.cli"]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _shipped(kind: str, name: str, install: Install = DEFAULT_INSTALL) -> dict[str, Any]:
    for doc in _docs(install.path):
        if doc.get("kind") == kind and doc["metadata"]["name"] == name:
            return doc
    raise LookupError(f"{install.path}: no {kind} {name}")


def _container(path: Path, kind: str, name: str) -> dict[str, Any]:
    for doc in _docs(path):
        if doc.get("kind") == kind:
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == name:
                    return dict(c)
    raise LookupError(f"{path}: no {kind} container {name}")


def _rewrite(args: Sequence[str], replace: Mapping[str, str | None], env: Mapping[str, str]) -> list[str]:
    """``args`` with ``--flag=value`` replaced (``None``: dropped) and ``$(VAR)`` expanded as kubelet does."""
    out, seen = [], set()
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in replace:
            seen.add(flag)
            if replace[flag] is not None:
                out.append(f"{flag}={replace[flag]}" if replace[flag] != "" else flag)
            continue
        for var, value in env.items():
            arg = arg.replace(f"$({var})", value)
        out.append(arg)
    out += [f"{f}={v}" if v != "" else f for f, v in replace.items() if f not in seen and v is not None]
    return out


def _knows_flag(flag: str) -> bool:
    """Whether ``hami scheduler`` (this checkout's) takes ``flag``."""
    import argparse

    from hami_core.cli import _build_parser

    sub = next(a for a in _build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return flag in sub.choices["scheduler"]._option_string_actions


def shipped_scheduler_args(install: Install = DEFAULT_INSTALL) -> list[str]:
    """The ``vgpu-scheduler-extender`` container's args as deploy/ (or ``install``) ships them."""
    container = _container(install.path, "Deployment", "vgpu-scheduler-extender")
    return list(container["args"])


def scheduler_args(kubeconfig: Path, port: int, metrics_port: int, tls: Pair,
                   extra: Mapping[str, str | None], *, webhook_port: int | None = None,
                   install: Install = DEFAULT_INSTALL) -> list[str]:
    """``--webhook-bind`` (when shipped) moves to ``webhook_port`` on loopback: kube-apiserver runs here too."""
    shipped = shipped_scheduler_args(install)
    replace: dict[str, str | None] = {
        "--in-cluster": None, "--kubeconfig": str(kubeconfig), "--http-bind": f"127.0.0.1:{port}",
        "--tls-cert": str(tls.cert), "--tls-key": str(tls.key), "--metrics-bind": f"127.0.0.1:{metrics_port}",
        "--device-config": str(install.device_config)}
    if webhook_port is not None and any(a.split("=", 1)[0] == "--webhook-bind" for a in shipped):
        replace["--webhook-bind"] = f"127.0.0.1:{webhook_port}"
    if _knows_flag("--metrics-device-detail"):
        # the harness reads hami's per-device and per-pod series (Stack.wait_hami_nodes, hami_ledger)
        replace["--metrics-device-detail"] = ""
    replace.update(extra)
    return _rewrite(shipped, replace, {"POD_NAMESPACE": install.namespace, "POD_NAME": "hami-scheduler-e2e"})


def device_plugin_args(kubeconfig: Path, node: str, kubelet_dir: Path, devices_file: Path) -> list[str]:
    container = _container(SHIPPED, "DaemonSet", "device-plugin")
    replace: dict[str, str | None] = {
        "--in-cluster": None, "--kubeconfig": str(kubeconfig), "--node-name": node,
        "--kubelet-dir": str(kubelet_dir), "--devices-file": str(devices_file),
        "--device-config": str(DEVICE_CONFIG)}
    return _rewrite(container["args"], replace, {})


def scheduler_config(extender_url: str | None, ca_pem: bytes | None, *,
                     overrides: Mapping[str, Any] | None = None, install: Install = DEFAULT_INSTALL) -> dict[str, Any]:
    """The shipped KubeSchedulerConfiguration; its extender's URL and TLS rewritten (``extender_url=None``: the
    extender removed, kube-scheduler alone)."""
    cm = _shipped("ConfigMap", "hami-scheduler-newversion", install)
    config = yaml.safe_load(cm["data"]["config.yaml"])
    if extender_url is None:
        config.pop("extenders", None)
    else:
        for ext in config.get("extenders") or []:
            ext["urlPrefix"] = extender_url
            ext["tlsConfig"] = {"caData": base64.b64encode(ca_pem or b"").decode()}
    for key, value in (overrides or {}).items():
        config[key] = value
    return config


def webhook_configuration(url: str, ca_pem: bytes, *, failure_policy: str | None = None,
                          install: Install = DEFAULT_INSTALL) -> dict[str, Any]:
    """deploy/hami-py.yaml's hami-webhook, every entry (CREATE and the UPDATE guard with its matchConditions, as
    shipped) calling ``url`` (kube-apiserver cannot reach a Service here: no kube-proxy); ``failure_policy``
    replaces every entry's."""
    doc = copy.deepcopy(_shipped("MutatingWebhookConfiguration", "hami-webhook", install))
    for hook in doc["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_pem).decode()}
        if failure_policy is not None:
            hook["failurePolicy"] = failure_policy
    return doc


class HamiScheduler:
    """``hami scheduler`` as its own process, in Kubernetes mode, serving HTTPS with a certificate of ``ca``."""

    def __init__(self, workdir: Path, ca: CA, kubeconfig: Path, *, name: str = "hami-scheduler",
                 extra: Mapping[str, str | None] | None = None, namespace_uts: str | None = None,
                 port: int | None = None, metrics_port: int | None = None, webhook_port: int | None = None,
                 install: Install = DEFAULT_INSTALL) -> None:
        self.workdir, self.name = workdir, name
        self.port, self.metrics_port = port or free_port(), metrics_port or free_port()
        self.tls = ca.issue(f"{name}-serving", name, hosts=["127.0.0.1", "localhost"], server=True)
        self.ca_pem = ca.pem
        #: the extender (``--http-bind``), which kube-scheduler calls
        self.url = f"https://127.0.0.1:{self.port}"
        separate = any(a.split("=", 1)[0] == "--webhook-bind" for a in shipped_scheduler_args(install))
        self.webhook_port = (webhook_port or free_port()) if separate else self.port
        #: the webhook's listener (``--webhook-bind`` when deploy/ ships it, else the extender's), which
        #: kube-apiserver calls
        self.webhook_url = f"https://127.0.0.1:{self.webhook_port}"
        self.argv = [*hami_argv(), *scheduler_args(kubeconfig, self.port, self.metrics_port, self.tls, extra or {},
                                                   webhook_port=self.webhook_port, install=install)]
        if namespace_uts:
            self.argv = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', namespace_uts, *self.argv]
        self.proc: Proc | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        return ctx

    def get(self, path: str, *, metrics: bool = False) -> str:
        """GET ``path`` from the webhook's listener (with ``--webhook-bind`` the probes are served there, where
        kubelet's probes go), or from the metrics port."""
        url = f"http://127.0.0.1:{self.metrics_port}{path}" if metrics else self.webhook_url + path
        with urllib.request.urlopen(url, timeout=10, context=None if metrics else self.context()) as resp:
            return resp.read().decode()

    def start(self, *, ready: bool = True, timeout_s: float = 60.0) -> HamiScheduler:
        self.proc = Proc(self.name, self.argv, self.workdir / "logs" / f"{self.name}.log")
        if ready:
            self.wait_ready(timeout_s)
        else:
            wait_until(f"{self.name} serving", lambda: self.get("/healthz") == "", timeout_s, 0.1, proc=self.proc)
        return self

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        assert self.proc is not None
        wait_until(f"{self.name} ready", lambda: self.get("/readyz").strip() == "ok", timeout_s, 0.1, proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc = None


class HamiDevicePlugin:
    """``hami device-plugin`` for one node, with fake GPUs from a devices file and the project's fake kubelet."""

    def __init__(self, workdir: Path, kubeconfig: Path, node: str, kubelet_dir: Path,
                 gpus: Sequence[Mapping[str, Any]]) -> None:
        self.workdir, self.node = workdir, node
        self.devices_file = workdir / f"{node}.devices.yaml"
        self.devices_file.write_text(yaml.safe_dump({"devices": [dict(g) for g in gpus]}))
        self.argv = [*hami_argv(), *device_plugin_args(kubeconfig, node, kubelet_dir, self.devices_file)]
        self.proc: Proc | None = None

    def start(self) -> HamiDevicePlugin:
        self.proc = Proc(f"hami-device-plugin-{self.node}", self.argv,
                         self.workdir / "logs" / f"hami-device-plugin-{self.node}.log")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None
