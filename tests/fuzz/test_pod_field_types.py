"""A valid pod with one field of the wrong JSON type, over real HTTP to ``/filter`` and ``/webhook``: the answer is
a 4xx naming the pod and the field (``/filter``: HTTP 400; ``/webhook``: an AdmissionReview denied with code 400),
never a 500.

Found attacking the scheduler as a tenant would: ``hami.io/gpu-scheduler-policy: -1`` (a JSON number where
Kubernetes has ``map[string]string``) and ``containers[].resources: null`` reached code that splits strings and
indexes objects. The filter judges the pod as the scheduler's own Pod watch holds it (docs/security.md), so the fuzz
stores each mutated pod in the cluster too (the in-memory store, unlike the API server, keeps any JSON) and posts
it: both the body's and the stored copy's checks are exercised.
"""

from __future__ import annotations

import copy
import http.client
import itertools
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_helpers import all_vendor_engine, annotation_keys
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import HTTP_SERVERS, Options, Scheduler

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
_SETTINGS = settings(max_examples=80, deadline=None, database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_names = itertools.count()


@pytest.fixture(scope="module", params=HTTP_SERVERS)
def service(request: pytest.FixtureRequest) -> Iterator[Scheduler]:
    """The scheduler service on each HTTP server (they must answer alike)."""
    cluster = MemoryCluster(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])
    svc = Scheduler(all_vendor_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host=None,
                                                          sync_wait_s=2.0, http_server=request.param))
    svc.extender.view_wait_s = 0.05  # input handling is under test here, not a lagging watch
    svc.start()
    yield svc
    svc.stop()


def _post(svc: Scheduler, path: str, body: Any) -> tuple[int, str, bytes]:
    host, port = svc.server.address
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("POST", path, body=json.dumps(body, allow_nan=True).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type", ""), resp.read()
    finally:
        conn.close()


def _review(pod: Any) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "CREATE", "namespace": "ns", "object": pod}}


def _pod(name: str = "p", limits: dict[str, str] | None = None,
         annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod as the API server stores one: every field hami reads, each of its right type."""
    limits = limits if limits is not None else {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000",
                                                "nvidia.com/gpucores": "20"}
    container = {"name": "main", "image": "busybox",
                 "resources": {"limits": dict(limits), "requests": {"cpu": "500m", "memory": "1Gi"}},
                 "env": [{"name": "A", "value": "b"}], "securityContext": {"runAsUser": 1000}}
    init = {"name": "init", "image": "busybox", "resources": {"limits": dict(limits)}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "labels": {"app": "train"},
                         "annotations": dict(annotations if annotations is not None else
                                             {"hami.io/gpu-scheduler-policy": "binpack"})},
            "spec": {"schedulerName": "hami-scheduler", "containers": [container], "initContainers": [init],
                     "securityContext": {"fsGroup": 2000}},
            "status": {"phase": "Pending", "initContainerStatuses": [{"state": {"waiting": {}}}]}}


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = value


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if path:
        yield path
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*path, i))


def _is_400_naming(status: int, payload: bytes, ref: str) -> bool:
    text = payload.decode()
    return status == 400 and text.startswith(f"ExtenderArgs.Pod {ref}: ") and text.count("\n") == 1


@pytest.mark.parametrize(("path", "value", "field"), [
    (("metadata", "annotations", "hami.io/gpu-scheduler-policy"), -1,
     "metadata.annotations['hami.io/gpu-scheduler-policy'] must be a string, got int"),
    (("metadata", "annotations", "hami.io/gpu-scheduler-policy"), ["binpack"],
     "metadata.annotations['hami.io/gpu-scheduler-policy'] must be a string, got list"),
    (("metadata", "annotations", "nvidia.com/numa-bind"), True,
     "metadata.annotations['nvidia.com/numa-bind'] must be a string, got bool"),
    (("metadata", "annotations", "hami.io/device-scoring-weights"), {"slot": 1},
     "metadata.annotations['hami.io/device-scoring-weights'] must be a string, got dict"),
    (("metadata", "annotations", "nvidia.com/use-gputype"), 1.5,
     "metadata.annotations['nvidia.com/use-gputype'] must be a string, got float"),
    (("metadata", "annotations"), ["a"], "metadata.annotations must be an object, got list"),
    (("spec",), None, "spec must be an object, got null"),
    (("metadata", "labels", "app"), 7, "metadata.labels['app'] must be a string, got int"),
    (("metadata", "labels"), "app=train", "metadata.labels must be an object, got str"),
    (("spec", "containers", 0, "resources"), None, "spec.containers[0].resources must be an object, got null"),
    (("spec", "initContainers", 0, "resources"), None,
     "spec.initContainers[0].resources must be an object, got null"),
    (("spec", "containers", 0, "resources", "limits"), None,
     "spec.containers[0].resources.limits must be an object, got null"),
    (("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"), ["1"],
     "spec.containers[0].resources.limits['nvidia.com/gpu'] must be a quantity string, got list"),
    (("spec", "containers", 0, "resources", "limits", "nvidia.com/gpumem"), True,
     "spec.containers[0].resources.limits['nvidia.com/gpumem'] must be a quantity string, got bool"),
    (("spec", "containers", 0, "resources", "requests", "cpu"), None,
     "spec.containers[0].resources.requests['cpu'] must be a quantity string, got null"),
    (("spec", "containers", 0, "resources", "limits", "nvidia.com/gpu"), math.inf,
     "spec.containers[0].resources.limits['nvidia.com/gpu'] must be a finite quantity, got inf"),
    (("spec", "containers"), {"name": "main"}, "spec.containers must be a list, got dict"),
    (("spec", "containers", 0, "name"), 5, "spec.containers[0].name must be a string, got int"),
    (("spec", "containers", 0, "env"), {"A": "b"}, "spec.containers[0].env must be a list, got dict"),
    (("spec", "containers", 0, "env", 0), "A=b", "spec.containers[0].env[0] must be an object, got str"),
    (("spec", "containers", 0, "env", 0, "value"), 1, "spec.containers[0].env[0].value must be a string, got int"),
    (("spec", "containers", 0, "securityContext"), [], "spec.containers[0].securityContext must be an object, "
                                                       "got list"),
    (("spec", "securityContext"), "root", "spec.securityContext must be an object, got str"),
    (("spec", "schedulerName"), 1, "spec.schedulerName must be a string, got int"),
    (("spec", "nodeName"), ["node-a"], "spec.nodeName must be a string, got list"),
    (("status", "phase"), 0, "status.phase must be a string, got int"),
    (("status", "initContainerStatuses", 0, "state"), "waiting",
     "status.initContainerStatuses[0].state must be an object, got str"),
])
def test_a_wrongly_typed_field_is_a_4xx_naming_it(service: Scheduler, path: tuple[Any, ...], value: Any,
                                                  field: str) -> None:
    pod = _pod(f"typed-{next(_names)}")
    _set(pod, path, value)
    ref = f"ns/{pod['metadata']['name']}"
    status, _, payload = _post(service, "/filter", {"Pod": pod, "NodeNames": ["node-a"]})
    assert (status, payload.decode()) == (400, f"ExtenderArgs.Pod {ref}: {field}\n")
    status, _, payload = _post(service, "/webhook", _review(pod))
    response = json.loads(payload)["response"]
    assert status == 200 and response["allowed"] is False
    assert response["status"] == {"code": 400, "message": f"request.object {ref}: {field}"}


def test_a_stored_pod_with_a_wrongly_typed_field_is_refused_by_name(service: Scheduler) -> None:
    """The body is fine; the copy the scheduler holds is not (an in-memory store keeps anything): the filter judges
    the stored copy and refuses it, naming the field."""
    clean = _pod(f"stored-{next(_names)}")
    bad = copy.deepcopy(clean)
    bad["metadata"]["annotations"]["hami.io/gpu-scheduler-policy"] = -1
    service.cluster.add_pod(bad)  # type: ignore[attr-defined]
    status, _, payload = _post(service, "/filter", {"Pod": clean, "NodeNames": ["node-a"]})
    assert status == 200
    assert json.loads(payload)["Error"] == (
        f"pod ns/{clean['metadata']['name']}: as stored: metadata.annotations['hami.io/gpu-scheduler-policy'] must "
        "be a string, got int; nothing was reserved")


_VENDOR_LIMITS = [
    {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "20"},
    {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"},
    {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "10", "cambricon.com/mlu.smlu.vcore": "10"},
    {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "4096"},
    {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000", "hygon.com/dcucores": "10"},
    {"iluvatar.ai/BI-V100-vgpu": "1", "iluvatar.ai/BI-V100.vMem": "4"},
    {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4"},
    {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4"},
    {"kunlunxin.com/xpu": "1"},
    {"enflame.com/gcu": "1"},
]
_ANNOTATION_VALUES = ["binpack", "spread", "true", "false", "1", "0", "GPU-node-a-0", "", "A10,T4", "mig"]
#: JSON values of every type, for the field chosen; one whose type matches the field's is drawn again
_WRONG = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63), st.floats(allow_nan=True),
                   st.text(max_size=8), st.lists(st.integers(0, 3) | st.text(max_size=3), max_size=2),
                   st.dictionaries(st.text(max_size=4), st.integers(0, 3) | st.text(max_size=3), max_size=2))


def _json_type(value: Any) -> str:
    return "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__


@_SETTINGS
@given(data=st.data())
def test_no_wrongly_typed_field_takes_the_server_down(service: Scheduler, data: st.DataObject) -> None:
    annotations = data.draw(st.dictionaries(st.sampled_from(annotation_keys()), st.sampled_from(_ANNOTATION_VALUES),
                                            max_size=4), label="annotations")
    name = f"fuzz-{next(_names)}"
    pod = _pod(name, data.draw(st.sampled_from(_VENDOR_LIMITS), label="limits"), annotations)
    path = data.draw(st.sampled_from(list(_paths(pod))), label="path")
    original = pod
    for part in path:
        original = original[part]
    value = data.draw(_WRONG.filter(lambda v: _json_type(v) != _json_type(original)), label="value")
    mutated = copy.deepcopy(pod)
    _set(mutated, path, value)
    # the store needs a usable name to key the pod by; a pod whose identity is broken is stored as it was
    identity = path[:1] == ("metadata",) and (len(path) == 1 or path[1] in ("name", "namespace", "uid"))
    stored = service.cluster.add_pod(pod if identity else mutated)  # type: ignore[attr-defined]
    try:
        status, ctype, payload = _post(service, "/filter", {"Pod": mutated, "NodeNames": ["node-a", "node-b"]})
        assert status in (200, 400), (status, payload[:300])
        if status == 200:
            assert ctype == "application/json" and isinstance(json.loads(payload), dict)
        else:
            assert payload.decode().count("\n") == 1 and "Traceback" not in payload.decode(), payload
        status, _, payload = _post(service, "/webhook", _review(mutated))
        assert status in (200, 400), (status, payload[:300])
        if status == 200:
            response = json.loads(payload)["response"]
            # A JSON number is a legal quantity (``limits: {mthreads.com/vgpu: 0}``), so a drawn value can be
            # well-typed but refused by the vendor's own check: HAMi answers that with an Errored 500 (spec
            # scheduler.md §4, MutateAdmission error), which names the container. Any other 500 is a crash.
            if response["status"]["code"] == 500:
                assert isinstance(value, int | float) and not isinstance(value, bool), response
                assert response["status"]["message"].startswith("container "), response
    finally:
        meta = stored["metadata"]
        service.cluster.delete_pod(meta["namespace"], meta["name"])  # type: ignore[attr-defined]
