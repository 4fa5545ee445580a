"""Fuzz the scheduler's HTTP server end to end: random ``/filter`` (ExtenderArgs), ``/bind``
(ExtenderBindingArgs) and ``/webhook`` (AdmissionReview) bodies over a real socket, against the real
extender and webhook on an engine with every vendor plugin. Every answer is 200 with JSON or 400 with a
one-line text message: never a 500, a traceback or a dropped connection."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_helpers import all_vendor_engine, json_values, pods
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import gpu_pod, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
_SETTINGS = settings(max_examples=40, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def service() -> Iterator[Scheduler]:
    cluster = MemoryCluster(nodes=[nvidia_node("node-a"), nvidia_node("node-b")], pods=[gpu_pod("p")])
    svc = Scheduler(all_vendor_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host=None,
                                                          sync_wait_s=2.0))
    svc.start()
    yield svc
    svc.stop()


def _post(svc: Scheduler, path: str, body: bytes) -> tuple[int, str, bytes]:
    host, port = svc.server.address
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def _check(status: int, ctype: str, payload: bytes) -> None:
    assert status in (200, 400), (status, payload[:300])
    if status == 200:
        assert ctype == "application/json"
        assert isinstance(json.loads(payload), dict)
    else:
        text = payload.decode()
        assert ctype.startswith("text/plain") and text.endswith("\n") and text.count("\n") == 1, text
        assert text.strip() and "Traceback" not in text


def _dump(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


_node_names = json_values | st.lists(st.sampled_from(["node-a", "node-b", "ghost", ""]), max_size=3)
_extender_args = st.fixed_dictionaries({}, optional={
    "Pod": pods() | json_values, "NodeNames": _node_names,
    "Nodes": json_values | st.fixed_dictionaries({"items": st.lists(
        st.fixed_dictionaries({}, optional={"metadata": json_values | st.fixed_dictionaries(
            {"name": st.sampled_from(["node-a", "x"]) | json_values})}) | json_values, max_size=2)})})
_binding_args = st.fixed_dictionaries({}, optional={
    "PodName": st.sampled_from(["p", "ghost", ""]) | json_values, "PodNamespace": st.just("default") | json_values,
    "PodUID": json_values, "Node": st.sampled_from(["node-a", "ghost"]) | json_values})
_review = st.fixed_dictionaries({}, optional={
    "apiVersion": st.sampled_from(["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]) | json_values,
    "kind": st.just("AdmissionReview"),
    "request": json_values | st.fixed_dictionaries({}, optional={
        "uid": st.text(max_size=8) | json_values, "object": pods() | json_values,
        "operation": st.sampled_from(["CREATE", "UPDATE"])})})


@_SETTINGS
@given(body=_extender_args.map(_dump) | json_values.map(_dump) | st.binary(max_size=64))
def test_filter_answers_200_or_400(service: Scheduler, body: bytes) -> None:
    _check(*_post(service, "/filter", body))


@_SETTINGS
@given(body=_binding_args.map(_dump) | json_values.map(_dump) | st.binary(max_size=64))
def test_bind_answers_200_or_400(service: Scheduler, body: bytes) -> None:
    _check(*_post(service, "/bind", body))


@_SETTINGS
@given(body=_review.map(_dump) | json_values.map(_dump) | st.binary(max_size=64))
def test_webhook_answers_200_or_400(service: Scheduler, body: bytes) -> None:
    status, ctype, payload = _post(service, "/webhook", body)
    _check(status, ctype, payload)
    if status == 200:
        review = json.loads(payload)
        assert review["kind"] == "AdmissionReview" and isinstance(review["response"]["allowed"], bool)


@pytest.mark.parametrize(("container", "field"), [
    ({"resources": 1}, "spec.containers[0].resources must be an object, got int"),
    ({"resources": {"limits": True}}, "spec.containers[0].resources.limits must be an object, got bool"),
    ({"resources": {"requests": ["1"]}}, "spec.containers[0].resources.requests must be an object, got list"),
    ("c", "spec.containers[0] must be an object, got str"),
])
def test_a_pod_not_shaped_like_a_pod_is_a_400_naming_the_field(service: Scheduler, container: Any,
                                                                field: str) -> None:
    """Found by the fuzzer above: a container whose ``resources`` was a number reached the vendor plugins, which
    index it, and came back as a 500. The extender now names the field; the webhook refuses the review with 400."""
    pod = {"metadata": {"name": "odd", "namespace": "ns"}, "spec": {"containers": [container]}}
    status, _, payload = _post(service, "/filter", json.dumps({"Pod": pod, "NodeNames": ["node-a"]}).encode())
    assert (status, payload.decode()) == (400, f"ExtenderArgs.Pod ns/odd: {field}\n")
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "u1", "object": pod}}
    status, _, payload = _post(service, "/webhook", json.dumps(review).encode())
    response = json.loads(payload)["response"]
    assert status == 200 and response["allowed"] is False
    assert response["status"] == {"code": 400, "message": f"request.object ns/odd: {field}"}
