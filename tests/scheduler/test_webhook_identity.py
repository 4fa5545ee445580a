"""Allocation identity at the webhook (HAMi PRs #3042, #3074), over HTTPS as kube-apiserver calls it: a pod CREATE
carrying a scheduler-owned annotation is denied naming the key, whoever sends it and whatever its schedulerName
or opt-out label; an UPDATE that adds, changes or removes one is allowed only from a trusted identity; an UPDATE
is never patched."""

from __future__ import annotations

import base64
import copy
import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from core_helpers import ACME_ALLOCATED, ACME_TO_ALLOCATE, AcmePlugin
from sched_helpers import gpu_pod, make_engine, post

import hami_nvidia.plugin
from hami_core.cli import main
from hami_core.cluster.memory import MemoryCluster
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.scheduler.certs import write_self_signed
from hami_core.scheduler.extender import Extender
from hami_core.scheduler.identity import TrustedIdentities, default_users
from hami_core.scheduler.server import SchedulerServer
from hami_core.scheduler.webhook import Webhook
from hami_core.sim.loader import bundled
from hami_core.wire import keys
from hami_core.wire.owned import CORE_OWNED, changed_owned, owned_annotations

SCHEDULER_SA, DEVICE_PLUGIN_SA = default_users()
ALICE = {"username": "alice", "groups": ["system:authenticated"]}
KUBELET = {"username": "system:node:gpu-1", "groups": ["system:nodes", "system:authenticated"]}
ALLOCATION = "GPU-0,NVIDIA,1000,10:;"

Review = Callable[..., dict[str, Any]]


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_self_signed(tmp_path_factory.mktemp("tls"))


def _serve(tls: tuple[Path, Path], webhook: Webhook) -> Iterator[Review]:
    cert, key = tls
    server = SchedulerServer(Extender(webhook.engine, MemoryCluster()), webhook, "127.0.0.1", 0,
                             cert_file=str(cert), key_file=str(key))
    server.start()
    ctx = ssl.create_default_context(cafile=str(cert))
    url = f"https://localhost:{server.address[1]}/webhook"

    def review(operation: str, obj: Any, *, old: Any = None, user: Any = None, sub: str | None = None,
               version: str = "admission.k8s.io/v1") -> dict[str, Any]:
        request: dict[str, Any] = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "operation": operation, "namespace": "team-a", "object": obj}
        if old is not None:
            request["oldObject"] = old
        if user is not None:
            request["userInfo"] = user
        if sub is not None:
            request["subResource"] = sub
        status, _, out = post(url, {"apiVersion": version, "kind": "AdmissionReview", "request": request},
                              context=ctx)
        assert status == 200 and out["response"]["uid"] == "u-1", out
        return dict(out["response"])

    try:
        yield review
    finally:
        server.shutdown()


@pytest.fixture
def review(tls: tuple[Path, Path]) -> Iterator[Review]:
    yield from _serve(tls, Webhook(make_engine()))


def _with_annotations(pod: dict[str, Any], **annos: str) -> dict[str, Any]:
    out = copy.deepcopy(pod)
    out["metadata"].setdefault("annotations", {}).update(annos)
    return out


def _pod(namespace: str = "team-a") -> dict[str, Any]:
    return gpu_pod("p", mem=1000, namespace=namespace)


def _denied(response: dict[str, Any], key: str) -> str:
    assert response["allowed"] is False and "patch" not in response, response
    status = response["status"]
    assert (status["code"], status["reason"]) == (403, "Forbidden"), status
    assert key in status["message"], status["message"]
    return str(status["message"])


def _allowed_untouched(response: dict[str, Any]) -> None:
    assert response["allowed"] is True, response
    assert "patch" not in response and "patchType" not in response, response


# --- CREATE --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", CORE_OWNED)
def test_create_carrying_an_owned_key_is_denied_naming_it(review: Review, key: str) -> None:
    message = _denied(review("CREATE", _with_annotations(_pod(), **{key: ALLOCATION})), key)
    assert message.startswith("pod team-a/p: annotation ") and "creating a pod" in message


@pytest.mark.parametrize("variant", ["other-scheduler", "opt-out-label", "generate-name", "empty-value",
                                     "trusted-sender", "v1beta1"])
def test_no_path_around_the_create_rule(review: Review, variant: str) -> None:
    """HAMi checks before its other-scheduler shortcut; hami-py also before the opt-out label (a tenant sets it on
    their own pod) and whoever sends the CREATE (no hami component creates pods)."""
    pod = _with_annotations(_pod(), **{keys.VGPU_DEVICES_TO_ALLOCATE: ALLOCATION})
    user: Any = ALICE
    version = "admission.k8s.io/v1"
    if variant == "other-scheduler":
        pod["spec"]["schedulerName"] = "default-scheduler"
    elif variant == "opt-out-label":
        pod["metadata"]["labels"] = {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}
    elif variant == "generate-name":
        pod["metadata"] = {**{k: v for k, v in pod["metadata"].items() if k != "name"}, "generateName": "job-"}
    elif variant == "empty-value":
        pod["metadata"]["annotations"][keys.VGPU_DEVICES_TO_ALLOCATE] = ""
    elif variant == "trusted-sender":
        user = {"username": SCHEDULER_SA}
    else:
        version = "admission.k8s.io/v1beta1"
    message = _denied(review("CREATE", pod, user=user, version=version), keys.VGPU_DEVICES_TO_ALLOCATE)
    if variant == "generate-name":
        assert message.startswith("pod team-a/job-*: ")


def test_create_without_owned_keys_is_still_mutated(review: Review) -> None:
    pod = _with_annotations(_pod(), **{"example.com/owner": "me", keys.GPU_SCHEDULER_POLICY: "spread"})
    pod["spec"]["schedulerName"] = "default-scheduler"
    response = review("CREATE", pod, user=ALICE)
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"} in ops


def test_every_installed_vendor_key_is_owned(tls: tuple[Path, Path]) -> None:
    """Derived from the loaded backends: with every vendor section of HAMi's chart, each backend's to-allocate and
    allocated key is refused on CREATE."""
    engine = Engine(yaml.safe_load(bundled("device-config.yaml")))
    vendor_keys = {k for b in engine.backends.values() for k in (b.to_allocate_annotation, b.allocated_annotation)
                   if k}
    assert len({b.vendor for b in engine.backends.values()}) >= 9, "vendor plugins not installed?"
    webhook = Webhook(engine)
    assert vendor_keys <= set(webhook.owned) and set(CORE_OWNED) <= set(webhook.owned)
    assert "hami.io/Ascend910B3-devices-allocated" in webhook.owned and "hami.io/kunlun-allocated" in webhook.owned
    for review in _serve(tls, webhook):
        for key in sorted(vendor_keys):
            _denied(review("CREATE", _with_annotations(_pod(), **{key: "x"})), key)


def test_a_new_vendor_is_covered_without_a_list(tls: tuple[Path, Path]) -> None:
    pm = get_plugin_manager(load_entrypoints=False, plugins=[hami_nvidia.plugin, AcmePlugin()])
    engine = Engine({"nvidia": {}, "acme": {}}, plugins=pm)
    assert {ACME_ALLOCATED, ACME_TO_ALLOCATE} <= set(Webhook(engine).owned)
    assert ACME_ALLOCATED not in owned_annotations(make_engine().backends.values())  # not a fixed list
    for review in _serve(tls, Webhook(engine)):
        _denied(review("CREATE", _with_annotations(_pod(), **{ACME_ALLOCATED: "x"})), ACME_ALLOCATED)
        old = _pod()
        _denied(review("UPDATE", _with_annotations(old, **{ACME_TO_ALLOCATE: "x"}), old=old, user=ALICE),
                ACME_TO_ALLOCATE)


# --- UPDATE --------------------------------------------------------------------------------------------


def _scheduled() -> dict[str, Any]:
    return _with_annotations(_pod(), **{keys.VGPU_NODE: "gpu-1", keys.VGPU_DEVICES_ALLOCATED: ALLOCATION,
                                        keys.VGPU_DEVICES_TO_ALLOCATE: ALLOCATION,
                                        keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING})


def _changes() -> list[tuple[str, Callable[[dict[str, str]], None], str]]:
    return [
        ("add", lambda a: a.__setitem__(keys.BIND_TIME, "1757923200"), keys.BIND_TIME),
        ("modify", lambda a: a.__setitem__(keys.VGPU_DEVICES_ALLOCATED, "GPU-9,NVIDIA,80000,100:;"),
         keys.VGPU_DEVICES_ALLOCATED),
        ("remove", lambda a: a.pop(keys.VGPU_NODE), keys.VGPU_NODE),
        ("empty", lambda a: a.__setitem__(keys.BIND_PHASE, ""), keys.BIND_PHASE),
        ("all-annotations-dropped", lambda a: a.clear(), keys.BIND_PHASE),
    ]


@pytest.mark.parametrize(("change", "key"), [(c[1], c[2]) for c in _changes()], ids=[c[0] for c in _changes()])
@pytest.mark.parametrize("who", ["alice", "kubelet-status", "no-userinfo", "admin"])
def test_update_of_an_owned_key_by_anyone_else_is_denied(review: Review, change: Callable[[dict[str, str]], None],
                                                         key: str, who: str) -> None:
    old = _scheduled()
    new = copy.deepcopy(old)
    change(new["metadata"]["annotations"])
    user: Any = {"alice": ALICE, "kubelet-status": KUBELET, "no-userinfo": None,
                 "admin": {"username": "kubernetes-admin", "groups": ["system:masters"]}}[who]
    sub = "status" if who == "kubelet-status" else None
    message = _denied(review("UPDATE", new, old=old, user=user, sub=sub), key)
    assert "cannot be changed by" in message and "--trusted-identities" in message
    if user is not None:
        assert user["username"] in message


@pytest.mark.parametrize("user", [SCHEDULER_SA, DEVICE_PLUGIN_SA])
def test_update_of_owned_keys_by_the_components_is_allowed_untouched(review: Review, user: str) -> None:
    old = _pod()
    new = _scheduled()
    new["spec"].pop("schedulerName")  # a CREATE would set it: an UPDATE is never mutated
    _allowed_untouched(review("UPDATE", new, old=old, user={"username": user, "groups": ["system:serviceaccounts"]}))
    _allowed_untouched(review("UPDATE", _pod(), old=new, user={"username": user}))


def test_update_that_leaves_owned_keys_alone_is_allowed_untouched(review: Review) -> None:
    old = _scheduled()
    new = _with_annotations(old, **{"example.com/note": "hi"})
    new["spec"].pop("schedulerName")  # what a CREATE would set again
    new["spec"]["containers"][0]["resources"]["limits"].pop("nvidia.com/gpumem")
    _allowed_untouched(review("UPDATE", new, old=old, user=ALICE))
    new["metadata"]["labels"] = {"app": "x", keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}
    _allowed_untouched(review("UPDATE", new, old=old, user=ALICE))
    _allowed_untouched(review("UPDATE", new, old=old, user=KUBELET, sub="status"))
    bare_old, bare_new = _pod(), _pod()
    bare_new["metadata"]["annotations"] = {}  # absent and empty annotations are the same: no owned key
    _allowed_untouched(review("UPDATE", bare_new, old=bare_old, user=ALICE))


def test_configured_identities_replace_the_defaults(tls: tuple[Path, Path]) -> None:
    trusted = TrustedIdentities.of(["system:serviceaccount:gpu:vendor-plugin"], ["hami:operators"])
    old, new = _pod(), _scheduled()
    for review in _serve(tls, Webhook(make_engine(), trusted=trusted)):
        _allowed_untouched(review("UPDATE", new, old=old, user={"username": "system:serviceaccount:gpu:vendor-plugin"}))
        _allowed_untouched(review("UPDATE", new, old=old, user={"username": "bob", "groups": ["hami:operators"]}))
        _denied(review("UPDATE", new, old=old, user={"username": SCHEDULER_SA}), keys.BIND_PHASE)
        _denied(review("UPDATE", new, old=old, user={"username": "bob", "groups": "hami:operators"}), keys.BIND_PHASE)


@pytest.mark.parametrize(("old", "new", "field"), [
    (None, _pod(), "request.oldObject is not a Pod object"),
    ("junk", _pod(), "request.oldObject is not a Pod object"),
    (_pod(), {"metadata": {"annotations": ["a"]}}, "request.object.metadata.annotations must be an object, got list"),
    ({"metadata": 3}, _pod(), "request.oldObject.metadata must be an object, got int"),
    (_pod(), None, "request.object is not a Pod object"),
])
def test_malformed_update_is_a_400_naming_the_field(review: Review, old: Any, new: Any, field: str) -> None:
    response = review("UPDATE", new, old=old, user=ALICE)
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert response["status"]["message"].startswith(field), response


def test_operations_not_registered_are_allowed_untouched(review: Review) -> None:
    _allowed_untouched(review("DELETE", _scheduled(), old=_scheduled(), user=ALICE))
    response = review(7, _pod())  # type: ignore[arg-type]
    assert response["allowed"] is False and response["status"]["code"] == 400


def test_changed_owned_tells_absent_from_empty() -> None:
    owned = (keys.BIND_PHASE,)
    assert changed_owned({}, {keys.BIND_PHASE: ""}, owned) == keys.BIND_PHASE
    assert changed_owned({keys.BIND_PHASE: ""}, {}, owned) == keys.BIND_PHASE
    assert changed_owned({keys.BIND_PHASE: "1"}, {keys.BIND_PHASE: 1}, owned) == keys.BIND_PHASE
    assert changed_owned({keys.BIND_PHASE: "x", "a": "1"}, {keys.BIND_PHASE: "x", "a": "2"}, owned) is None


# --- the flags -----------------------------------------------------------------------------------------


def test_trusted_flags_reach_the_webhook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hami_core.scheduler.app as app

    seen: list[app.Scheduler] = []

    class Built(app.Scheduler):
        def start(self) -> None:
            seen.append(self)
            raise OSError("stopped by the test before serving")

    monkeypatch.setattr(app, "Scheduler", Built)
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text("")
    base = ["scheduler", "--cluster-file", str(cluster_file), "--http-bind", "127.0.0.1:0", "--metrics-bind", ""]
    assert main(base) != 0
    assert seen[-1].webhook.trusted == TrustedIdentities(frozenset(default_users()))
    assert main([*base, "--trusted-identities", "system:serviceaccount:hami:hami-scheduler, alice",
                 "--trusted-groups=hami:operators"]) != 0
    assert seen[-1].webhook.trusted == TrustedIdentities(frozenset({"system:serviceaccount:hami:hami-scheduler",
                                                                    "alice"}), frozenset({"hami:operators"}))


@pytest.mark.parametrize(("value", "error"), [("", "entry 1 of '' is empty"), ("a,,b", "entry 2 of 'a,,b' is empty"),
                                              ("al ice", "'al ice' contains whitespace")])
def test_bad_trusted_identities_are_a_usage_error(capsys: pytest.CaptureFixture[str], value: str,
                                                   error: str) -> None:
    assert main(["scheduler", f"--trusted-identities={value}"]) == 2
    err = capsys.readouterr().err
    assert f"argument --trusted-identities: {error}" in err and "Traceback" not in err


def test_no_trusted_identity_at_all_is_refused() -> None:
    with pytest.raises(ValueError, match="name at least one user or group"):
        TrustedIdentities.of([], [])
