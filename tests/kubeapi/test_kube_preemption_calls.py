"""The cluster calls preemption makes (delete with a UID precondition, the pods/status patch, PDB list), through the
official client against the in-test API server, and the same on MemoryCluster."""

from __future__ import annotations

import pytest

from hami_core.cluster.base import ConflictError, NotFoundError
from hami_core.cluster.memory import MemoryCluster


def _pod(name: str, uid: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c"}]}}


def test_delete_pod_honours_the_uid_precondition(kc, server) -> None:
    created = server.create("pods", "default", _pod("victim", "u1"))
    uid = created["metadata"]["uid"]
    with pytest.raises(ConflictError, match="Precondition failed"):
        kc.delete_pod("default", "victim", "some-other-uid")
    kc.delete_pod("default", "victim", uid)
    with pytest.raises(NotFoundError):
        kc.get_pod("default", "victim")
    with pytest.raises(NotFoundError):
        kc.delete_pod("default", "victim", uid)


def test_patch_pod_status_changes_status_alone(kc, server) -> None:
    server.create("pods", "default", _pod("vip", "u2"))
    pod = kc.patch_pod_status("default", "vip", {"status": {"nominatedNodeName": "n1"},
                                                   "metadata": {"labels": {"x": "y"}}})
    assert pod["status"]["nominatedNodeName"] == "n1"
    assert "labels" not in kc.get_pod("default", "vip")["metadata"]


def test_list_pod_disruption_budgets(kc, server) -> None:
    server.create("poddisruptionbudgets", "default", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep-one"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}}, "status": {"disruptionsAllowed": 0}})
    [pdb] = kc.list_pod_disruption_budgets()
    assert (pdb["kind"], pdb["metadata"]["name"], pdb["status"]["disruptionsAllowed"]) == (
        "PodDisruptionBudget", "keep-one", 0)


def test_memory_cluster_does_the_same() -> None:
    cluster = MemoryCluster(pods=[_pod("victim", "u1")])
    with pytest.raises(ConflictError):
        cluster.delete_pod("default", "victim", "other")
    cluster.patch_pod_status("default", "victim", {"status": {"nominatedNodeName": "n1"}})
    assert cluster.get_pod("default", "victim")["status"]["nominatedNodeName"] == "n1"
    cluster.delete_pod("default", "victim", "u1")
    assert cluster.list_pods() == []
    assert cluster.list_pod_disruption_budgets() == []
