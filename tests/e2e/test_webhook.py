"""Scenario 2: the mutating webhook as kube-apiserver calls it (AdmissionReview over TLS, registered from
deploy/base/webhook.yaml with only its URL and caBundle rewritten)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException
from realkube.objects import gpu_pod
from realkube.stack import Stack

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
