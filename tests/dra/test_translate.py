"""The translating webhook: HAMi requests → one ResourceClaimTemplate and the pod's JSON patch (exact output for
NVIDIA and AMD), what DRA cannot express refused by name, idempotent admissions, dry runs creating nothing, and the
webhook answering a DRA-mode namespace's review."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from hami_core.cluster.memory import MemoryCluster
from hami_core.dra.mode import DRA, MODE_LABEL, DraAdmission, NamespaceModes, ensure_template
from hami_core.dra.translate import CLAIM_NAME, TEMPLATE_LABEL, TranslateError, request_name, template_name, translate
from hami_core.engine.facade import Engine
from hami_core.scheduler.webhook import Webhook


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine({"nvidia": {}, "amd": {}})


def pod(limits: dict[str, str], *, name: str | None = "train", generate: str | None = None,
        init: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ml"}
    if name:
        meta["name"] = name
    if generate:
        meta["generateName"] = generate
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x",
                                            "resources": {"limits": dict(limits), "requests": dict(limits)}},
                                           {"name": "side", "image": "y"}]}
    if init is not None:
        spec["initContainers"] = [{"name": "setup", "image": "z", "resources": {"limits": dict(init)}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def apply(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A minimal RFC 6902 applier for add/remove (what the patch uses)."""
    out = json.loads(json.dumps(doc))
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = out
        for p in parts[:-1]:
            target = target[int(p)] if isinstance(target, list) else target[p]
        last = parts[-1]
        if op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
        elif isinstance(target, list):
            target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
        else:
            target[last] = op["value"]
    return out


def test_nvidia_exact_template_and_patch(engine: Engine) -> None:
    p = pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30", "cpu": "1"})
    t = translate(p, engine.requests(p), engine.backends, namespace="ml")
    assert t is not None
    spec = {"spec": {"devices": {"requests": [{"name": "main-gpu", "exactly": {
        "deviceClassName": "hami-core-gpu.project-hami.io", "allocationMode": "ExactCount", "count": 2,
        "capacity": {"requests": {"cores": "30", "memory": "4096Mi"}}}}]}}}
    assert t.template == {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                          "metadata": {"name": template_name(p, spec), "namespace": "ml",
                                       "labels": {TEMPLATE_LABEL: "webhook"}},
                          "spec": spec}
    assert t.name.startswith("train-hami-") and len(t.name) == len("train-hami-") + 10
    assert t.patch == [
        {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu"},
        {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores"},
        {"op": "remove", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpumem"},
        {"op": "remove", "path": "/spec/containers/0/resources/requests/nvidia.com~1gpu"},
        {"op": "remove", "path": "/spec/containers/0/resources/requests/nvidia.com~1gpucores"},
        {"op": "remove", "path": "/spec/containers/0/resources/requests/nvidia.com~1gpumem"},
        {"op": "add", "path": "/spec/containers/0/resources/claims",
         "value": [{"name": CLAIM_NAME, "request": "main-gpu"}]},
        {"op": "add", "path": "/spec/resourceClaims",
         "value": [{"name": CLAIM_NAME, "resourceClaimTemplateName": t.name}]},
    ]
    out = apply(p, t.patch)
    assert out["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1"}, "requests": {"cpu": "1"}, "claims": [{"name": CLAIM_NAME, "request": "main-gpu"}]}
    assert out["spec"]["containers"][1] == p["spec"]["containers"][1]


def test_amd_and_init_container_and_whole_card(engine: Engine) -> None:
    # AMD books a whole card's cores unless told (its default cores are 100): ask 25 to share
    p = pod({"amd.com/gpu": "1", "amd.com/gpumem": "1024", "amd.com/gpucores": "25"}, init={"nvidia.com/gpu": "1"})
    t = translate(p, engine.requests(p), engine.backends, namespace="ml")
    assert t is not None
    assert t.template["spec"]["spec"]["devices"]["requests"] == [
        # the init container asks one whole NVIDIA card: no memory (the published default is the whole card)
        {"name": "setup-gpu", "exactly": {"deviceClassName": "hami-core-gpu.project-hami.io",
                                          "allocationMode": "ExactCount", "count": 1,
                                          "capacity": {"requests": {"cores": "0"}}}},
        {"name": "main-amd", "exactly": {"deviceClassName": "hami-core-amd.project-hami.io",
                                         "allocationMode": "ExactCount", "count": 1,
                                         "capacity": {"requests": {"cores": "25", "memory": "1024Mi"}}}},
    ]
    out = apply(p, t.patch)
    assert out["spec"]["initContainers"][0]["resources"] == {
        "limits": {}, "claims": [{"name": CLAIM_NAME, "request": "setup-gpu"}]}
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": CLAIM_NAME, "request": "main-amd"}]
    assert "amd.com/gpu" not in out["spec"]["containers"][0]["resources"]["requests"]


def test_cores_100_is_the_whole_card(engine: Engine) -> None:
    p = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048", "nvidia.com/gpucores": "100"})
    t = translate(p, engine.requests(p), engine.backends, namespace="ml")
    assert t is not None
    assert t.template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {
        "requests": {"cores": "100"}}


def test_no_hami_request_is_not_translated(engine: Engine) -> None:
    p = pod({"cpu": "1"})
    assert translate(p, engine.requests(p), engine.backends, namespace="ml") is None


def test_memory_percentage_is_refused_by_name(engine: Engine) -> None:
    p = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"})
    with pytest.raises(TranslateError, match=r"pod ml/train: container main: nvidia.com/gpumem-percentage 50% "
                                             r"cannot be translated to DRA.*ask nvidia.com/gpumem in MiB"):
        translate(p, engine.requests(p), engine.backends, namespace="ml")


def test_existing_claim_name_is_refused(engine: Engine) -> None:
    p = pod({"nvidia.com/gpu": "1"})
    p["spec"]["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimName": "x"}]
    with pytest.raises(TranslateError, match=f"spec.resourceClaims already has a claim named {CLAIM_NAME}"):
        translate(p, engine.requests(p), engine.backends, namespace="ml")


def test_existing_claims_are_appended_to(engine: Engine) -> None:
    p = pod({"nvidia.com/gpu": "1"})
    p["spec"]["resourceClaims"] = [{"name": "other", "resourceClaimName": "x"}]
    p["spec"]["containers"][0]["resources"]["claims"] = [{"name": "other"}]
    t = translate(p, engine.requests(p), engine.backends, namespace="ml")
    assert t is not None
    out = apply(p, t.patch)
    assert [c["name"] for c in out["spec"]["resourceClaims"]] == ["other", CLAIM_NAME]
    assert out["spec"]["containers"][0]["resources"]["claims"] == [{"name": "other"},
                                                                   {"name": CLAIM_NAME, "request": "main-gpu"}]


def test_names_are_bounded_and_deterministic(engine: Engine) -> None:
    long = "a" * 250
    p = pod({"nvidia.com/gpu": "1"}, name=None, generate=long + "-")
    p["spec"]["containers"][0]["name"] = "c" * 63
    t1 = translate(p, engine.requests(p), engine.backends, namespace="ml")
    t2 = translate(p, engine.requests(p), engine.backends, namespace="ml")
    assert t1 is not None and t2 is not None
    assert t1.template == t2.template and t1.patch == t2.patch
    assert len(t1.name) <= 253 and t1.name.startswith("aaa")
    rname = t1.template["spec"]["spec"]["devices"]["requests"][0]["name"]
    assert len(rname) <= 63 and rname == request_name("c" * 63, "NVIDIA")
    assert request_name("c" * 63, "NVIDIA") != request_name("c" * 62 + "d", "NVIDIA")
    # another request gives another template name (the digest covers the spec)
    q = pod({"nvidia.com/gpu": "2"}, name=None, generate=long + "-")
    q["spec"]["containers"][0]["name"] = "c" * 63
    t3 = translate(q, engine.requests(q), engine.backends, namespace="ml")
    assert t3 is not None and t3.name != t1.name


def test_ensure_template_is_idempotent_and_names_a_conflict(engine: Engine) -> None:
    cluster = MemoryCluster()
    p = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    t = translate(p, engine.requests(p), engine.backends, namespace="ml")
    assert t is not None
    assert ensure_template(cluster, t, dry_run=True) == "dry-run"
    with pytest.raises(Exception, match="not found"):
        cluster.get_resource_claim_template("ml", t.name)
    assert ensure_template(cluster, t) == "created"
    assert ensure_template(cluster, t) == "reused"
    stored = cluster.get_resource_claim_template("ml", t.name)
    assert stored["spec"] == t.template["spec"]
    cluster.delete_resource_claim_template("ml", t.name)
    clash = json.loads(json.dumps(t.template))
    clash["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    cluster.create_resource_claim_template(clash)
    with pytest.raises(TranslateError, match=f"ResourceClaimTemplate ml/{t.name} exists with a different spec"):
        ensure_template(cluster, t)


def review(p: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "operation": "CREATE", "namespace": "ml", "object": p, "dryRun": dry_run}}


def test_webhook_translates_in_a_dra_namespace_only(engine: Engine) -> None:
    cluster = MemoryCluster()
    hook = Webhook(engine, dra=DraAdmission(engine, cluster))
    p = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    # not labelled: device-plugin mode, the usual mutation (schedulerName set to hami's)
    plain = hook.review(review(p))["response"]
    ops = json.loads(base64.b64decode(plain["patch"]))
    assert any(op["path"] == "/spec/schedulerName" for op in ops)
    cluster.add_namespace({"metadata": {"name": "ml", "labels": {MODE_LABEL: DRA}}})
    hook = Webhook(engine, dra=DraAdmission(engine, cluster))
    dry = hook.review(review(p, dry_run=True))["response"]
    assert dry["allowed"] is True
    t = translate(p, engine.requests(p), engine.backends, namespace="ml")
    assert t is not None
    assert json.loads(base64.b64decode(dry["patch"])) == t.patch
    with pytest.raises(Exception, match="not found"):  # a dry run creates nothing
        cluster.get_resource_claim_template("ml", t.name)
    real = hook.review(review(p))["response"]
    assert json.loads(base64.b64decode(real["patch"])) == t.patch
    assert not any(op["path"] == "/spec/schedulerName" for op in t.patch)  # left to the default scheduler
    assert cluster.get_resource_claim_template("ml", t.name)["spec"] == t.template["spec"]
    again = hook.review(review(p))["response"]  # a retried admission reuses the template
    assert again["allowed"] is True and again["patch"] == real["patch"]
    bad = hook.review(review(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"})))["response"]
    assert bad["allowed"] is False and bad["status"]["code"] == 400
    assert "gpumem-percentage 50%" in bad["status"]["message"]


def test_cluster_mode_dra_translates_every_namespace(engine: Engine) -> None:
    modes = NamespaceModes(MemoryCluster(), DRA)
    assert modes.mode("anything") == DRA
    with pytest.raises(ValueError, match="--device-mode 'both'"):
        NamespaceModes(MemoryCluster(), "both")


def test_namespace_mode_is_cached() -> None:
    cluster = MemoryCluster()
    now = [0.0]
    modes = NamespaceModes(cluster, ttl_s=30, clock=lambda: now[0])
    assert modes.mode("ml") == "device-plugin"  # unreadable: device-plugin mode
    cluster.add_namespace({"metadata": {"name": "ml", "labels": {MODE_LABEL: DRA}}})
    assert modes.mode("ml") == "device-plugin"
    now[0] = 31
    assert modes.mode("ml") == DRA


def test_templates_and_namespaces_through_the_official_client(engine: Engine) -> None:
    from kubeapi.fake_apiserver import FakeApiServer
    from kubernetes import client

    from hami_core.cluster.base import ConflictError, NotFoundError
    from hami_core.cluster.kube import KubeCluster

    with FakeApiServer() as server:
        api = client.ApiClient(client.Configuration(host=server.url))
        cluster = KubeCluster(api_client=api, qps=0, request_timeout_s=5)
        try:
            server.create("namespaces", "", {"metadata": {"name": "ml", "labels": {MODE_LABEL: DRA}}})
            assert NamespaceModes(cluster).mode("ml") == DRA
            assert NamespaceModes(cluster).mode("other") == "device-plugin"  # not found
            p = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048"})
            t = translate(p, engine.requests(p), engine.backends, namespace="ml")
            assert t is not None
            assert ensure_template(cluster, t) == "created"
            assert ensure_template(cluster, t) == "reused"
            stored = cluster.get_resource_claim_template("ml", t.name)
            assert stored["kind"] == "ResourceClaimTemplate" and stored["spec"] == t.template["spec"]
            assert ("POST", "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaimtemplates") in \
                [(m, path) for m, path, _ in server.requests]
            with pytest.raises(ConflictError):
                cluster.create_resource_claim_template(t.template)
            cluster.delete_resource_claim_template("ml", t.name)
            with pytest.raises(NotFoundError):
                cluster.get_resource_claim_template("ml", t.name)
        finally:
            cluster.close()
            api.close()


def test_scheduler_device_mode_flag_reaches_the_webhook(engine: Engine) -> None:
    import argparse

    from hami_core.scheduler.app import Options, Scheduler
    from hami_core.scheduler.cli import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).device_mode == "device-plugin"
    assert parser.parse_args(["--device-mode", "dra"]).device_mode == "dra"
    with pytest.raises(SystemExit):
        parser.parse_args(["--device-mode", "both"])
    cluster = MemoryCluster()
    service = Scheduler(engine, cluster, Options(host="127.0.0.1", port=0, metrics_host=None, device_mode="dra"))
    try:
        p = pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
        answer = service.webhook.review(review(p))["response"]  # no Namespace object: the cluster's mode rules
        t = translate(p, engine.requests(p), engine.backends, namespace="ml")
        assert t is not None and json.loads(base64.b64decode(answer["patch"])) == t.patch
        assert cluster.get_resource_claim_template("ml", t.name)["spec"] == t.template["spec"]
    finally:
        service.stop()


def test_more_devices_than_a_claim_holds_is_refused(engine: Engine) -> None:
    p = pod({"nvidia.com/gpu": "33"})
    with pytest.raises(TranslateError, match=r"pod ml/train: 1 device requests for 33 devices .* at most 32"):
        translate(p, engine.requests(p), engine.backends, namespace="ml")
    p = pod({"nvidia.com/gpu": "32"})
    assert translate(p, engine.requests(p), engine.backends, namespace="ml") is not None
