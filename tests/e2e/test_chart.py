"""Scenario: charts/hami-py installed the way a HAMi user installs it, into a namespace of its own.

``helm template`` renders the chart for this control plane's version and a non-default namespace; every object is
applied server-side (kube-apiserver validates and stores it: nothing refused, nothing left out); then hami and
kube-scheduler run from that render (the Deployment's args, the KubeSchedulerConfiguration, the webhook, as the
chart's ServiceAccounts in that namespace) and a GPU pod is admitted, scheduled, bound and allocated. The autouse
RBAC guard of conftest.py fails the test if the chart's RBAC refused any request of hami's identities.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chart_helpers import NO_HELM, find_helm, template_text
from realkube.controlplane import ControlPlane, iter_docs, kubectl
from realkube.hami import Install
from realkube.objects import gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

pytestmark = pytest.mark.e2e

NAMESPACE = "hami-chart"


@pytest.fixture(scope="module")
def helm() -> Path:
    found = find_helm()
    if found is None:
        if os.environ.get("HAMI_E2E_REQUIRE") == "1":
            pytest.fail(NO_HELM)
        pytest.skip(NO_HELM)
    return found


@pytest.fixture(scope="module")
def chart_plane(bindir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of its own: the session's holds deploy/'s install (same webhook and ClusterRole names)."""
    with ControlPlane(bindir, tmp_path_factory.mktemp("chart")) as plane:
        yield plane


@pytest.fixture(scope="module")
def rendered(helm: Path, chart_plane: ControlPlane) -> tuple[Path, str]:
    """The chart rendered for this cluster's version and NAMESPACE: (file, the version)."""
    version = json.loads(chart_plane.apiserver.get_text("/version"))["gitVersion"]
    path = chart_plane.workdir / "hami-py.rendered.yaml"
    path.write_text(template_text(helm, namespace=NAMESPACE, kube_version=version))
    return path, version


def _docs(path: Path) -> list[dict[str, Any]]:
    return list(iter_docs(path.read_text()))


@pytest.fixture(scope="module")
def own_stack(chart_plane: ControlPlane, bindir: Path, rendered: tuple[Path, str]) -> Iterator[Stack]:
    """The whole render applied server-side, then hami + kube-scheduler + the kubelet parts started from it."""
    path, _ = rendered
    chart_plane.ensure_namespace(NAMESPACE)
    admin = chart_plane.apiserver.admin_kubeconfig
    out = kubectl(bindir, admin, "apply", "--server-side", "--field-manager=hami-e2e", "-f", str(path), check=False)
    assert out.returncode == 0, out.stderr
    applied = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(applied) == len(_docs(path)) and all(line.endswith("serverside-applied") for line in applied), out.stdout
    stack = Stack(chart_plane, bindir, Install.of_render(path, NAMESPACE))
    stack.install()
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def test_the_render_is_stored_as_rendered(own_stack: Stack, bindir: Path, rendered: tuple[Path, str]) -> None:
    path, version = rendered
    docs = _docs(path)
    admin = own_stack.plane.apiserver.admin_kubeconfig
    for doc in docs:
        meta = doc["metadata"]
        where = ["-n", meta["namespace"]] if "namespace" in meta else []
        if doc["kind"] == "MutatingWebhookConfiguration":
            continue   # the harness re-registered it with a URL (no kube-proxy here to reach the Service)
        resource = doc["kind"].lower() + (f".{_group(doc)}" if _group(doc) else "")
        got = kubectl(bindir, admin, "get", resource, meta["name"], *where, "-o", "json", check=False)
        assert got.returncode == 0, f"{doc['kind']}/{meta['name']}: {got.stderr}"
        stored = json.loads(got.stdout)
        assert stored["metadata"].get("labels", {}).items() >= meta.get("labels", {}).items(), meta["name"]
    namespaced = {d["metadata"]["namespace"] for d in docs if "namespace" in d["metadata"]}
    assert namespaced == {NAMESPACE, "kube-system"}   # kube-system: only the authentication reader's RoleBinding
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    image = next(c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]
                 if c["name"] == "kube-scheduler")
    # kube-scheduler matches the cluster it was rendered for (.Capabilities.KubeVersion)
    assert image == "registry.k8s.io/kube-scheduler:" + re.sub(r"^(v\d+\.\d+\.\d+).*$", r"\1", version)


def _group(doc: dict[str, Any]) -> str:
    api = str(doc["apiVersion"])
    return api.split("/")[0] if "/" in api else ""


def test_a_gpu_pod_is_scheduled_from_the_chart(own_stack: Stack) -> None:
    stack = own_stack
    stack.plane.ensure_namespace("chart-work")
    (node,) = stack.create_nodes(1, "chart")
    try:
        stack.create_pods("chart-work", [gpu_pod("p", namespace="chart-work", mem=2000)])
        (pod,) = stack.wait_bound("chart-work", 1, 60)
        assert pod["spec"]["schedulerName"] == "hami-scheduler"   # the chart's webhook set it
        assert pod["spec"]["nodeName"] == node
        wait_until("allocated", lambda: stack.pod("chart-work", "p")["metadata"]["annotations"].get(
            "hami.io/bind-phase") == "success", 30)
        (entry,) = stack.api_ledger("chart-work").values()
        assert entry[0] == 2000
        # kube-scheduler holds the chart's Lease in the chart's namespace, and hami follows it there
        from kubernetes import client

        lease = client.CoordinationV1Api(stack.plane.admin).read_namespaced_lease("hami-scheduler", NAMESPACE)
        assert lease.spec.holder_identity
    finally:
        stack.delete_pods("chart-work")
        stack.delete_nodes([node])
