"""Scenario 1: the shipped manifests (deploy/hami-py.yaml, the chart's default render) on the real API server, and
hami's components running with the RBAC they ship (the autouse guard of conftest.py fails any test in which RBAC
refused one of their requests)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from realkube import audit
from realkube.controlplane import kubectl
from realkube.objects import gpu_pod
from realkube.procs import wait_until
from realkube.stack import SHIPPED, Stack, shipped_docs

pytestmark = pytest.mark.e2e


def test_shipped_manifests_pass_server_side_dry_run(stack: Stack, bindir: Path) -> None:
    admin = stack.plane.apiserver.admin_kubeconfig
    docs = shipped_docs()
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "DaemonSet", "MutatingWebhookConfiguration", "ClusterRole", "ConfigMap", "Job"} <= kinds
    # as on a cluster without hami: the stack's own registration (clientConfig.url) would merge with the shipped
    # clientConfig.service into an invalid object
    kubectl(bindir, admin, "delete", "mutatingwebhookconfiguration", "hami-webhook")
    try:
        out = kubectl(bindir, admin, "apply", "--server-side", "--dry-run=server", "--field-manager=hami-e2e",
                      "--force-conflicts", "-f", str(SHIPPED), check=False)
    finally:
        stack.register_webhook()
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == len(docs) and all("(server dry run)" in line for line in lines), out.stdout
    # a dry run: the Deployment is not there
    got = kubectl(bindir, admin, "get", "deployment", "hami-scheduler", "-n", "kube-system", check=False)
    assert got.returncode != 0 and "NotFound" in got.stderr


def test_components_run_as_their_service_accounts(stack: Stack, ns: str, make_nodes) -> None:
    started = datetime.now(UTC)
    (_node,) = make_nodes(1, "rbac")
    stack.create_pods(ns, [gpu_pod("p", namespace=ns, mem=1000)])
    stack.wait_bound(ns, 1, 60)
    wait_until("allocated", lambda: stack.pod(ns, "p")["metadata"]["annotations"].get("hami.io/bind-phase")
               == "success", 20)
    time.sleep(1.5)
    used = audit.summary(audit.calls(stack.plane.apiserver.audit_events(), since=started))
    # both identities did their work through the API server (so the guard had something to judge)
    for call in [("hami-scheduler", "patch", "pods"), ("hami-scheduler", "create", "pods/binding"),
                 ("hami-scheduler", "patch", "nodes"), ("hami-device-plugin", "patch", "pods"),
                 ("hami-device-plugin", "get", "nodes")]:
        assert used[call] > 0, (call, sorted(used))
    # kube-scheduler runs as hami-scheduler too, and renews its Lease through the shipped Role
    everything = audit.calls(stack.plane.apiserver.audit_events(),
                             users=["system:serviceaccount:kube-system:hami-scheduler"], since=started)
    assert any(c.resource == "leases" and c.verb == "update" and c.code == 200 for c in everything)


@pytest.mark.expect_forbidden
def test_a_verb_missing_from_the_cluster_role_is_caught(stack: Stack, ns: str, make_nodes, bindir: Path) -> None:
    """The guard's own test: take ``patch pods`` away from hami-scheduler (system:kube-scheduler, which the same
    ServiceAccount holds, does not grant it); the filter's allocation patch is refused, the audit log shows it, and
    once the shipped role is back the pod binds."""
    admin = stack.plane.apiserver.admin_kubeconfig
    role = next(d for d in shipped_docs() if d["kind"] == "ClusterRole" and
                d["metadata"]["name"] == "hami-scheduler")
    rules = [dict(r) for r in role["rules"]]
    for rule in rules:
        if rule["resources"] == ["pods"]:
            rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    crippled = {**role, "rules": rules}
    kubectl(bindir, admin, "apply", "--server-side", "--field-manager=hami-e2e", "--force-conflicts", "-f", "-",
            input_text=yaml.safe_dump(crippled))
    started = datetime.now(UTC)
    try:
        make_nodes(1, "norbac")
        stack.create_pods(ns, [gpu_pod("p", namespace=ns, mem=1000)])

        def refused() -> list[audit.Call]:
            return [c for c in audit.forbidden(audit.calls(stack.plane.apiserver.audit_events(), since=started))
                    if c.resource == "pods"]

        (first, *_) = wait_until("a refused pod patch in the audit log", refused, 40, 0.5)
        assert first.user.endswith(":hami-scheduler") and first.verb == "patch" and first.name == "p"
        assert not stack.pod(ns, "p")["spec"].get("nodeName")
    finally:
        kubectl(bindir, admin, "apply", "--server-side", "--field-manager=hami-e2e", "--force-conflicts", "-f", "-",
                input_text=yaml.safe_dump(role))
    stack.wait_bound(ns, 1, 60)  # kube-scheduler retries it once hami may bind again
