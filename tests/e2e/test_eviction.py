"""``hami defrag apply``'s eviction on the real API server: :meth:`KubeCluster.evict_pod` creates ``pods/eviction``
(policy/v1) with the pod's UID as a precondition. A stale UID is refused and the pod stays; a pod that a
PodDisruptionBudget protects is refused (429, a temporary error: the budget may allow it later) and stays; an
unprotected pod goes the graceful way (Terminating until its kubelet confirms)."""

from __future__ import annotations

import pytest
from realkube.objects import gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

from hami_core.cluster.base import ConflictError
from hami_core.cluster.kube import KubeCluster
from hami_core.plugins.errors import TemporaryError

pytestmark = pytest.mark.e2e


def test_eviction_api_preconditions_and_budgets(stack: Stack, ns: str, make_nodes) -> None:
    from kubernetes import client

    make_nodes(1, "evict", gpus=2)
    stack.create_pods(ns, [gpu_pod("free", namespace=ns, mem=1000, labels={"app": "free"}),
                           gpu_pod("kept", namespace=ns, mem=1000, labels={"app": "kept"})])
    stack.wait_bound(ns, 2)
    wait_until("Running", lambda: all(p["status"].get("phase") == "Running" for p in stack.pods(ns)), 30)
    cluster = KubeCluster(kubeconfig=str(stack.plane.apiserver.admin_kubeconfig))

    with pytest.raises(ConflictError):  # the pod's UID changed (recreated since the plan): nothing evicted
        cluster.evict_pod(ns, "free", "00000000-0000-0000-0000-000000000000")
    assert not stack.pod(ns, "free")["metadata"].get("deletionTimestamp")

    client.PolicyV1Api(stack.plane.admin).create_namespaced_pod_disruption_budget(ns, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "kept"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "kept"}}}})
    kept = stack.pod(ns, "kept")
    with pytest.raises(TemporaryError, match="HTTP 429"):
        cluster.evict_pod(ns, "kept", kept["metadata"]["uid"])
    assert not stack.pod(ns, "kept")["metadata"].get("deletionTimestamp")

    free = stack.pod(ns, "free")
    cluster.evict_pod(ns, "free", free["metadata"]["uid"])
    wait_until("evicted", lambda: "free" not in {p["metadata"]["name"] for p in stack.pods(ns)}, 30)
    assert "kept" in {p["metadata"]["name"] for p in stack.pods(ns)}
