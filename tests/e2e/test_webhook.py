"""Scenario 2: the mutating webhook as kube-apiserver calls it (AdmissionReview over TLS, registered from
deploy/hami-py.yaml's hami-webhook with only its URL and caBundle rewritten), and the allocation-identity rule with real
API-server identities: an ordinary user ``alice`` (a client certificate of the cluster CA, RBAC to create and
patch pods in her namespace) is denied scheduler-owned annotations on create and on update; hami's
ServiceAccounts may write them, and the shipped matchConditions keep the webhook out of their requests and of
every update that leaves hami.io/ annotations alone (the audit log shows which webhooks each request called)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from realkube.controlplane import write_kubeconfig
from realkube.objects import gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

from hami_core.wire import keys

pytestmark = pytest.mark.e2e


def _plain_pod(name: str, namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"limits": {"cpu": "100m"}}}]}}


def _limits(pod: dict) -> dict:
    return pod["spec"]["containers"][0]["resources"]["limits"]


def test_gpu_pod_is_mutated_and_plain_pod_left_alone(stack: Stack, ns: str) -> None:
    stack.create_pods(ns, [gpu_pod("mem-only", namespace=ns, gpus=1, mem=3000),
                           {**gpu_pod("whole", namespace=ns), "spec": {**gpu_pod("whole", namespace=ns)["spec"]}},
                           _plain_pod("plain", ns)])
    mem_only = gpu_pod("mem-only2", namespace=ns, mem=3000)
    del mem_only["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    stack.create_pods(ns, [mem_only])

    whole = stack.pod(ns, "whole")
    assert whole["spec"]["schedulerName"] == "hami-scheduler"
    assert _limits(whole)["nvidia.com/gpucores"] == "100"  # HAMi: a whole card without gpumem gets all its cores
    defaulted = stack.pod(ns, "mem-only2")
    assert defaulted["spec"]["schedulerName"] == "hami-scheduler"
    assert _limits(defaulted)["nvidia.com/gpu"] == "1"  # defaultGPUNum
    assert stack.pod(ns, "mem-only")["spec"]["schedulerName"] == "hami-scheduler"

    plain = stack.pod(ns, "plain")
    assert plain["spec"]["schedulerName"] == "default-scheduler"
    assert _limits(plain) == {"cpu": "100m"}


def test_webhook_label_opts_a_pod_out(stack: Stack, ns: str) -> None:
    stack.create_pods(ns, [gpu_pod("opted-out", namespace=ns, mem=1000, labels={"hami.io/webhook": "ignore"})])
    assert stack.pod(ns, "opted-out")["spec"]["schedulerName"] == "default-scheduler"


@pytest.fixture
def hami_down(stack: Stack) -> Iterator[None]:
    assert stack.hami is not None
    stack.hami.stop()
    try:
        yield
    finally:
        stack.register_webhook()  # as shipped
        stack.restart_hami(stack.hami_extra)


def test_failure_policy_with_hami_down(stack: Stack, ns: str, hami_down: None) -> None:
    # as shipped: failurePolicy Ignore, the pod is created unmutated (and no scheduler takes it)
    assert stack.register_webhook()["webhooks"][0]["failurePolicy"] == "Ignore"
    stack.create_pods(ns, [gpu_pod("while-down", namespace=ns, mem=1000)])
    assert stack.pod(ns, "while-down")["spec"]["schedulerName"] == "default-scheduler"
    # an operator who chose Fail gets the creation refused, naming the webhook
    stack.register_webhook(failure_policy="Fail")
    with pytest.raises(ApiException) as err:
        stack.create_pods(ns, [gpu_pod("refused", namespace=ns, mem=1000)])
    assert err.value.status == 500 and "vgpu.hami.io" in (err.value.body or ""), err.value.body


# --- allocation identity --------------------------------------------------------------------------------------

ALLOCATION = "GPU-00000000-0000-4000-8000-000000000000,NVIDIA,80000,100:;"
GUARD = "owned-annotations.vgpu.hami.io"


def _user_kubeconfig(stack: Stack, name: str) -> Path:
    """A kubeconfig of the ordinary user ``name``: a client certificate of the cluster CA (CN = user name)."""
    path = stack.workdir / f"user-{name}.kubeconfig"
    if not path.exists():
        pair = stack.plane.ca.issue(f"user-{name}", name, client=True)
        write_kubeconfig(path, stack.plane.apiserver.url, stack.plane.ca.cert, user=name, client=pair)
    return path


def _grant_pod_editing(stack: Stack, ns: str, user: str) -> None:
    """What a namespace's "edit" role gives on pods, plus pods/status (which can change metadata too)."""
    rbac = client.RbacAuthorizationV1Api(stack.plane.admin)
    rbac.create_namespaced_role(ns, {"metadata": {"name": "pod-editor"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "create", "update", "patch"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["update", "patch"]}]}, _preload_content=False)
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": f"pod-editor-{user}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]},
        _preload_content=False)


@pytest.fixture
def alice(stack: Stack, ns: str) -> Any:
    """CoreV1Api as ``alice``, who may create, update and patch pods (and their status) in ``ns``."""
    _grant_pod_editing(stack, ns, "alice")
    return client.CoreV1Api(stack.plane.api_client(_user_kubeconfig(stack, "alice")))


def _as(stack: Stack, kubeconfig: Path) -> Any:
    return client.CoreV1Api(stack.plane.api_client(kubeconfig))


def _annotate(core: Any, ns: str, name: str, annos: dict[str, str | None], *, status: bool = False) -> None:
    body = {"metadata": {"annotations": annos}}
    if status:
        core.patch_namespaced_pod_status(name, ns, body, _preload_content=False)
    else:
        core.patch_namespaced_pod(name, ns, body, _preload_content=False)


def _refused(call: Any) -> ApiException:
    with pytest.raises(ApiException) as err:
        call()
    return err.value


def _webhooks_called(stack: Stack, ns: str, name: str, since: datetime) -> list[tuple[str, str]]:
    """(user, webhook) for every webhook kube-apiserver called on a patch/update of pod ``ns/name`` since
    ``since``, from the audit annotations it records per call (``mutation.webhook.admission.k8s.io/...``)."""
    time.sleep(1.2)  # the audit log is written in batches of at most a second
    out = []
    for ev in stack.plane.apiserver.audit_events():
        ref = ev.get("objectRef") or {}
        if (ev.get("stage") != "ResponseComplete" or ev.get("verb") not in ("patch", "update")
                or ref.get("namespace") != ns or ref.get("name") != name or ref.get("resource") != "pods"):
            continue
        at = datetime.fromisoformat(ev["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if at < since:
            continue
        for key, value in (ev.get("annotations") or {}).items():
            if key.startswith("mutation.webhook.admission.k8s.io/"):
                out.append((ev["user"]["username"], json.loads(value)["webhook"]))
    return out


@pytest.mark.parametrize("variant", ["gpu-pod", "other-scheduler-opted-out"])
def test_create_with_a_scheduler_owned_annotation_is_denied(stack: Stack, ns: str, alice: Any, variant: str) -> None:
    pod = gpu_pod("forged", namespace=ns, mem=1000)
    pod["metadata"]["annotations"] = {keys.VGPU_DEVICES_ALLOCATED: ALLOCATION, keys.VGPU_NODE: "gpu-1"}
    if variant != "gpu-pod":   # neither another schedulerName nor the opt-out label takes a pod past the rule
        pod["spec"]["schedulerName"] = "default-scheduler"
        pod["metadata"]["labels"] = {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}
    err = _refused(lambda: alice.create_namespaced_pod(ns, pod, _preload_content=False))
    assert err.status == 403 and "vgpu.hami.io" in err.body, err.body
    assert f"annotation {keys.VGPU_DEVICES_ALLOCATED} is written by the HAMi scheduler" in err.body, err.body
    assert not stack.pods(ns)


def test_an_ordinary_user_cannot_write_an_allocation(stack: Stack, ns: str, alice: Any) -> None:
    alice.create_namespaced_pod(ns, gpu_pod("mine", namespace=ns, mem=1000), _preload_content=False)
    started = datetime.now(UTC)
    for status in (False, True):   # the pod, and its status subresource (which can change metadata too)
        err = _refused(lambda s=status: _annotate(alice, ns, "mine", {keys.VGPU_DEVICES_ALLOCATED: ALLOCATION},
                                                   status=s))
        assert err.status == 403 and GUARD in err.body, err.body
        assert f"annotation {keys.VGPU_DEVICES_ALLOCATED} is written by the HAMi scheduler" in err.body
        assert "cannot be changed by alice" in err.body, err.body
    assert keys.VGPU_DEVICES_ALLOCATED not in (stack.pod(ns, "mine")["metadata"].get("annotations") or {})
    # an annotation of her own is hers to change: the guard is not even called, and the pod is not mutated
    before = stack.pod(ns, "mine")["spec"]
    _annotate(alice, ns, "mine", {"example.com/owner": "alice"})
    after = stack.pod(ns, "mine")
    assert after["metadata"]["annotations"]["example.com/owner"] == "alice" and after["spec"] == before
    called = _webhooks_called(stack, ns, "mine", started)
    assert called.count(("alice", GUARD)) == 2 and len(called) == 2, called


def test_the_scheduler_may_and_its_own_patches_skip_the_webhook(stack: Stack, ns: str, alice: Any,
                                                                 make_nodes: Any) -> None:
    make_nodes(1, "ident")
    stack.create_pods(ns, [gpu_pod("p", namespace=ns, mem=1000)])
    started = datetime.now(UTC)
    stack.wait_bound(ns, 1, 60)
    wait_until("allocated", lambda: (stack.pod(ns, "p")["metadata"].get("annotations") or {}).get(keys.BIND_PHASE)
               == keys.BIND_PHASE_SUCCESS, 30)
    annos = stack.pod(ns, "p")["metadata"]["annotations"]
    assert annos[keys.VGPU_DEVICES_ALLOCATED]   # the scheduler wrote it, the device plugin set the bind phase
    # the scheduler's ServiceAccount rewrites an owned key by hand too; alice may not undo or redo it
    scheduler = _as(stack, stack.scheduler_kubeconfig)
    _annotate(scheduler, ns, "p", {keys.BIND_TIME: "1757923200"})
    _annotate(_as(stack, stack.device_kubeconfig), ns, "p", {keys.BIND_TIME: "1757923201"})
    assert stack.pod(ns, "p")["metadata"]["annotations"][keys.BIND_TIME] == "1757923201"
    for change in ({keys.BIND_TIME: None}, {keys.VGPU_DEVICES_ALLOCATED: ALLOCATION}):
        err = _refused(lambda c=change: _annotate(alice, ns, "p", c))
        assert err.status == 403 and "cannot be changed by alice" in err.body, err.body
    called = _webhooks_called(stack, ns, "p", started)
    # matchConditions: hami's filter/bind/Allocate patches and the two by hand above never reached the webhook
    assert called and all(user == "alice" for user, _ in called), called


def test_the_guard_fails_closed_with_hami_down(stack: Stack, ns: str, alice: Any, hami_down: None) -> None:
    """failurePolicy Fail on the UPDATE entry: with the webhook unreachable, alice's write of an owned key is
    refused, while her other annotations and hami's own writes (kept off the webhook by matchConditions) still go
    through."""
    stack.create_pods(ns, [gpu_pod("p", namespace=ns, mem=1000)])   # CREATE: Ignore, as HAMi
    err = _refused(lambda: _annotate(alice, ns, "p", {keys.VGPU_NODE: "gpu-1"}))
    assert err.status == 500 and GUARD in err.body, err.body
    _annotate(alice, ns, "p", {"example.com/owner": "alice"})
    _annotate(_as(stack, stack.scheduler_kubeconfig), ns, "p", {keys.VGPU_NODE: "gpu-1"})
    assert stack.pod(ns, "p")["metadata"]["annotations"][keys.VGPU_NODE] == "gpu-1"
