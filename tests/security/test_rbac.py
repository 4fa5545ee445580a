"""RBAC stays least-privilege: every Role/ClusterRole in deploy/ grants exactly the table below (group,
resource, resource names, verbs), no wildcard anywhere, Secrets only to the cert generator and only in its
namespace, and nothing is bound to a built-in admin role or can escalate its own rights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

#: (kind, name) -> {(apiGroup, resource, resourceNames, verb)}; any change to deploy/ RBAC must change this table.
EXPECTED: dict[tuple[str, str], set[tuple[str, str, tuple[str, ...], str]]] = {
    ("ClusterRole", "hami-scheduler"): {
        ("", "nodes", (), v) for v in ("get", "list", "watch", "patch")} | {
        ("", "pods", (), v) for v in ("get", "list", "watch", "patch", "delete")} | {
        ("", "pods/binding", (), "create"), ("", "events", (), "create"), ("", "pods/status", (), "patch"),
        ("policy", "poddisruptionbudgets", (), "list"),
        ("", "namespaces", (), "get"),  # the webhook reads a namespace's device mode (DRA or device plugin)
        # and, in DRA mode, writes the pod's requests as a ResourceClaimTemplate (or reuses it on a retry)
        ("resource.k8s.io", "resourceclaimtemplates", (), "get"),
        ("resource.k8s.io", "resourceclaimtemplates", (), "create")} | {
        ("", "resourcequotas", (), v) for v in ("list", "watch")},
    ("Role", "hami-scheduler-lease"): {
        ("coordination.k8s.io", "leases", (), "create"),
        ("coordination.k8s.io", "leases", ("hami-scheduler",), "get"),
        ("coordination.k8s.io", "leases", ("hami-scheduler",), "update")},
    ("ClusterRole", "hami-device-plugin-monitor"): {
        ("", "nodes", (), "get"), ("", "nodes", (), "patch"),
        ("", "pods", (), "list"), ("", "pods", (), "patch")},
    ("Role", "hami-certgen"): {
        ("", "secrets", (), "create"), ("", "secrets", ("hami-scheduler-tls",), "get")},
    ("ClusterRole", "hami-certgen"): {
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ("hami-webhook",), "get"),
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ("hami-webhook",), "update")},
}
#: Built-in roles that may be bound: stock kube-scheduler needs exactly these (as HAMi's chart binds them).
BUILTIN_ALLOWED = {"system:kube-scheduler", "system:volume-scheduler", "extension-apiserver-authentication-reader"}
DANGEROUS_VERBS = {"*", "escalate", "bind", "impersonate", "delete", "deletecollection"}


def _objects() -> list[dict[str, Any]]:
    out = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(doc, dict) and doc.get("apiVersion", "").startswith("rbac.authorization.k8s.io/"):
                out.append(doc)
    return out


def _grants(role: dict[str, Any]) -> set[tuple[str, str, tuple[str, ...], str]]:
    return {(group, resource, tuple(rule.get("resourceNames") or ()), verb)
            for rule in role.get("rules") or []
            for group in rule.get("apiGroups") or [""]
            for resource in rule.get("resources") or []
            for verb in rule.get("verbs") or []}


def test_roles_grant_exactly_the_table() -> None:
    roles = {(o["kind"], o["metadata"]["name"]): o for o in _objects() if o["kind"] in ("Role", "ClusterRole")}
    assert set(roles) == set(EXPECTED), "a Role/ClusterRole was added or removed: review it and update EXPECTED"
    for key, role in roles.items():
        assert _grants(role) == EXPECTED[key], key
        assert not role.get("aggregationRule"), key
        for rule in role.get("rules") or []:
            assert not rule.get("nonResourceURLs"), key


def test_no_wildcards_or_escalation_verbs() -> None:
    for key, grants in EXPECTED.items():
        for group, resource, _names, verb in grants:
            assert "*" not in (group, resource, verb), key
            if (key, resource, verb) == (("ClusterRole", "hami-scheduler"), "pods", "delete"):
                continue  # reviewed: preemption evicts victims as kube-scheduler does (its own role has it too)
            assert verb not in DANGEROUS_VERBS, (key, verb)
    for obj in _objects():  # also what EXPECTED does not model (apiGroups lists, resourceNames)
        for rule in obj.get("rules") or []:
            values = [v for f in ("apiGroups", "resources", "verbs", "resourceNames") for v in rule.get(f) or []]
            assert not any("*" in v for v in values), (obj["metadata"]["name"], rule)


def test_secrets_only_for_the_cert_generator_in_its_namespace() -> None:
    holders = {key for key, grants in EXPECTED.items() if any(r == "secrets" for _, r, _, _ in grants)}
    assert holders == {("Role", "hami-certgen")}  # a namespaced Role: not the cluster's Secrets
    reads = {(names, verb) for _, r, names, verb in EXPECTED[("Role", "hami-certgen")] if r == "secrets"}
    assert all(names == ("hami-scheduler-tls",) for names, verb in reads if verb != "create")
    assert not any(verb in ("list", "watch") for _, verb in reads)


def test_bindings_reference_our_roles_or_the_stock_scheduler_roles() -> None:
    ours = {name for _, name in EXPECTED}
    for obj in _objects():
        if not obj["kind"].endswith("Binding"):
            continue
        ref = obj["roleRef"]["name"]
        assert ref in ours or ref in BUILTIN_ALLOWED, f"{obj['metadata']['name']} binds {ref}"
        assert ref not in ("cluster-admin", "admin", "edit", "system:masters")
        for subject in obj["subjects"]:
            assert subject["kind"] == "ServiceAccount", subject  # never a user or a group (system:authenticated)
