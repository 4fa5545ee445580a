"""charts/hami-py with a real helm: ``helm lint`` and ``helm template`` with the default values and the value sets
of charts/hami-py/ci/, asserting on the rendered objects; and deploy/ is the chart's current render.

helm is found by tests/chart_helpers.py (``$HAMI_HELM``, the ``make e2e-bin`` build, PATH); without it every test
here skips with that message.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, CI, DEPLOY, NO_HELM, find_helm, manifests, render

from hami_core.engine.facade import Engine

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}


@pytest.fixture(scope="module")
def helm() -> Path:
    found = find_helm()
    if found is None:
        pytest.skip(NO_HELM)
    return found


def _one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def _containers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = obj["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


def _device_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(yaml.safe_load(_one(objs, "ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]))


def _scheduler_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(yaml.safe_load(_one(objs, "ConfigMap", "hami-scheduler-newversion")["data"]["config.yaml"]))


def _managed(objs: list[dict[str, Any]]) -> list[str]:
    (ext,) = _scheduler_config(objs)["extenders"]
    return [m["name"] for m in ext["managedResources"]]


def _engine_names(config: dict[str, Any]) -> set[str]:
    return {n for b in Engine(config).backends.values() for n in b.resource_names.all()}


def _walk_strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for v in node.values():
            yield from _walk_strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk_strings(v)
    elif isinstance(node, str):
        yield node


# --- lint and deploy/ ----------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, *sorted(p.name for p in CI.glob("*.yaml"))])
def test_helm_lint(helm: Path, values: str | None) -> None:
    argv = [str(helm), "lint", "--strict", str(CHART), *(["-f", str(CI / values)] if values else [])]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_deploy_is_the_current_render(helm: Path) -> None:
    stale = [name for name, text in manifests(helm).items()
             if not (DEPLOY / name).exists() or (DEPLOY / name).read_text(encoding="utf-8") != text]
    assert not stale, f"deploy/{', deploy/'.join(stale)} differ from charts/hami-py: run `make manifests`"


# --- namespace -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("how", "expected"), [({"values": ["namespace-values.yaml"]}, "gpu-system"),
                                               ({"namespace": "from-release"}, "from-release"),
                                               ({"set_values": {"namespaceOverride": "hami-ns"}}, "hami-ns")])
def test_namespace_is_followed_everywhere(helm: Path, how: dict[str, Any], expected: str) -> None:
    objs = render(helm, **how)
    for obj in objs:
        name = (obj["kind"], obj["metadata"]["name"])
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], name
        elif name == ("RoleBinding", "hami-scheduler-authentication-reader"):
            # the Role and the ConfigMap it grants are kube-system's, wherever hami runs
            assert obj["metadata"]["namespace"] == "kube-system"
        else:
            assert obj["metadata"]["namespace"] == expected, name
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == expected, name
    for hook in _one(objs, "MutatingWebhookConfiguration", "hami-webhook")["webhooks"]:
        assert hook["clientConfig"]["service"]["namespace"] == expected
    (_, update) = _one(objs, "MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    exempt = update["matchConditions"][1]["expression"]
    assert f"'system:serviceaccount:{expected}:hami-scheduler'" in exempt
    assert f"'system:serviceaccount:{expected}:hami-device-plugin'" in exempt and "kube-system" not in exempt
    assert _scheduler_config(objs)["leaderElection"]["resourceNamespace"] == expected
    everything = yaml.safe_dump_all(objs)
    # no object still points at the default namespace, except the authentication reader's
    assert everything.count("kube-system") == 1, "kube-system left in a render for namespace " + expected


def test_cert_manager_names_follow_the_namespace(helm: Path) -> None:
    objs = render(helm, values=["namespace-values.yaml", "cert-manager-values.yaml"])
    cert = _one(objs, "Certificate", "hami-scheduler")
    assert cert["spec"]["dnsNames"] == ["hami-scheduler", "hami-scheduler.gpu-system.svc",
                                        "hami-scheduler.gpu-system.svc.cluster.local"]
    webhook = _one(objs, "MutatingWebhookConfiguration", "hami-webhook")
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpu-system/hami-scheduler"
    assert not [o for o in objs if o["kind"] == "Job"], "certgen and cert-manager both rendered"


# --- resource names, device config ---------------------------------------------------------------------


@pytest.mark.parametrize("values", [[], ["two-vendors-values.yaml"]])
def test_managed_resources_are_the_device_config_names(helm: Path, values: list[str]) -> None:
    objs = render(helm, values=values)
    managed = _managed(objs)
    assert managed == sorted(set(managed)), "managedResources not sorted and unique"
    config = _device_config(objs)
    # the names the vendor plugins register from this very config: nothing missing, nothing extra
    assert set(managed) == _engine_names(config)
    assert {"nvidia.com/gpu", "nvidia.com/gpumem", "huawei.com/Ascend910B3-memory", "iluvatar.ai/BI-V100.vCore",
            "enflame.com/gcu", "kunlunxin.com/vxpu", "aws.amazon.com/neuroncore"} <= set(managed)
    (ext,) = _scheduler_config(objs)["extenders"]
    assert all(m["ignoredByScheduler"] is True for m in ext["managedResources"])


def test_a_resource_name_is_written_once(helm: Path) -> None:
    """Renaming a resource in values renames it in the device config and in managedResources, together."""
    objs = render(helm, set_values={"devices.nvidia.config.resourceMemoryName": "example.com/vram"})
    assert _device_config(objs)["nvidia"]["resourceMemoryName"] == "example.com/vram"
    managed = set(_managed(objs))
    assert "example.com/vram" in managed and "nvidia.com/gpumem" not in managed
    assert managed == _engine_names(_device_config(objs))


def test_a_null_config_drops_the_vendor(helm: Path) -> None:
    objs = render(helm, set_values={"devices.amd.config": "null"})
    assert "amd" not in _device_config(objs)
    assert not [n for n in _managed(objs) if n.startswith("amd.com/")]
    assert "nvidia" in _device_config(objs)


def test_an_enabled_vendor_needs_its_section(helm: Path) -> None:
    with pytest.raises(RuntimeError, match=r"devices\.amd\.config is null"):
        render(helm, set_values={"devices.amd.config": "null", "devices.amd.enabled": "true"})


def test_extra_device_config_keys(helm: Path, tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"deviceConfig": {"extra": {"scheduler": {"nodeLockTimeout": 120}}}}))
    assert _device_config(render(helm, values=[values]))["scheduler"] == {"nodeLockTimeout": 120}
    values.write_text(yaml.safe_dump({"deviceConfig": {"extra": {"nvidia": {}}}}))
    with pytest.raises(RuntimeError, match=r"deviceConfig\.extra\.nvidia"):
        render(helm, values=[values])


# --- device plugins ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "vendors"), [([], {"nvidia"}), (["two-vendors-values.yaml"], {"nvidia", "ascend"})])
def test_one_daemonset_per_enabled_vendor(helm: Path, values: list[str], vendors: set[str]) -> None:
    objs = render(helm, values=values)
    daemonsets = {o["metadata"]["labels"]["hami.io/vendor"]: o for o in objs if o["kind"] == "DaemonSet"}
    assert set(daemonsets) == vendors
    assert daemonsets["nvidia"]["metadata"]["name"] == "hami-device-plugin"   # HAMi's name
    for vendor, ds in daemonsets.items():
        spec = ds["spec"]["template"]["spec"]
        assert ds["spec"]["selector"]["matchLabels"]["hami.io/vendor"] == vendor   # selectors never overlap
        plugin = _containers(ds)["device-plugin"]
        assert f"--vendor={vendor}" in plugin["args"] and "--device-config=/device-config.yaml" in plugin["args"]
        assert spec["serviceAccountName"] == "hami-device-plugin"
        assert {v["name"]: v for v in spec["volumes"]}["device-config"]["configMap"]["name"] == "hami-scheduler-device"
        # HAMi-core and the monitor are the nvidia plugin's; another vendor's pod has neither
        assert ("vgpu-monitor" in _containers(ds)) == (vendor == "nvidia")
        assert ("lifecycle" in plugin) == (vendor == "nvidia")
    if "ascend" in vendors:
        spec = daemonsets["ascend"]["spec"]["template"]["spec"]
        assert daemonsets["ascend"]["metadata"]["name"] == "hami-device-plugin-ascend"
        assert spec["nodeSelector"] == {"ascend": "on"}
        assert spec["tolerations"] == [{"key": "huawei.com/Ascend910B3", "operator": "Exists", "effect": "NoSchedule"}]


def _checksums(objs: list[dict[str, Any]]) -> dict[str, str]:
    return {o["metadata"]["name"]: o["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
            for o in objs if o["kind"] in ("Deployment", "DaemonSet")}


def test_checksum_changes_with_the_config(helm: Path) -> None:
    base = _checksums(render(helm))
    assert set(base) == {"hami-scheduler", "hami-device-plugin"} and all(len(v) == 64 for v in base.values())
    assert render(helm) and _checksums(render(helm)) == base   # deterministic
    device = _checksums(render(helm, set_values={"devices.nvidia.config.deviceSplitCount": "20"}))
    assert all(device[k] != base[k] for k in base), "a device-config change must roll every pod that mounts it"
    sched = _checksums(render(helm, set_values={"scheduler.leaderElection.leaseDuration": "30s"}))
    assert sched["hami-scheduler"] != base["hami-scheduler"] and sched["hami-device-plugin"] == base[
        "hami-device-plugin"]
    unrelated = _checksums(render(helm, set_values={"scheduler.replicas": "2"}))
    assert unrelated == base


# --- scheduler -----------------------------------------------------------------------------------------


def test_kube_scheduler_follows_the_cluster_version(helm: Path) -> None:
    def image(**kw: Any) -> str:
        dep = _one(render(helm, **kw), "Deployment", "hami-scheduler")
        return str(_containers(dep)["kube-scheduler"]["image"])

    assert image(kube_version="v1.33.2") == "registry.k8s.io/kube-scheduler:v1.33.2"
    assert image(kube_version="v1.30.8-eks-2d5f260") == "registry.k8s.io/kube-scheduler:v1.30.8"
    pinned = image(set_values={"scheduler.kubeScheduler.image.tag": "v1.32.0"})
    assert pinned == "registry.k8s.io/kube-scheduler:v1.32.0"


def test_images_registry_tags_and_pull_secrets(helm: Path) -> None:
    objs = render(helm, set_values={"global.imageRegistry": "reg.example.com", "global.imagePullSecrets[0]": "regcred",
                                    "scheduler.extender.image.pullSecrets[0]": "extcred",
                                    "devicePlugin.image.tag": "dev"})
    dep = _one(objs, "Deployment", "hami-scheduler")
    import hami_core

    assert _containers(dep)["vgpu-scheduler-extender"]["image"] == f"reg.example.com/hami-py:{hami_core.__version__}"
    assert _containers(dep)["kube-scheduler"]["image"].startswith("registry.k8s.io/")   # its own registry wins
    assert dep["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}, {"name": "extcred"}]
    ds = _containers(_one(objs, "DaemonSet", "hami-device-plugin"))
    assert ds["device-plugin"]["image"] == "reg.example.com/hami-py:dev"
    assert ds["vgpu-monitor"]["image"] == f"reg.example.com/hami-py:{hami_core.__version__}"
    job = _one(objs, "Job", "hami-certgen")
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert "imagePullSecrets" not in _one(render(helm), "Deployment", "hami-scheduler")["spec"]["template"]["spec"]


def test_replicas_anti_affinity_and_leader_election(helm: Path) -> None:
    dep = _one(render(helm, set_values={"scheduler.replicas": "3"}), "Deployment", "hami-scheduler")
    assert dep["spec"]["replicas"] == 3
    (term,) = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"][
        "labels"].items()
    hard = _one(render(helm, set_values={"scheduler.podAntiAffinity": "hard"}), "Deployment", "hami-scheduler")
    assert "requiredDuringSchedulingIgnoredDuringExecution" in hard["spec"]["template"]["spec"]["affinity"][
        "podAntiAffinity"]
    none = _one(render(helm, set_values={"scheduler.podAntiAffinity": "none"}), "Deployment", "hami-scheduler")
    assert "affinity" not in none["spec"]["template"]["spec"]
    with pytest.raises(RuntimeError, match=r"scheduler\.podAntiAffinity"):
        render(helm, set_values={"scheduler.podAntiAffinity": "sometimes"})
    with pytest.raises(RuntimeError, match=r"scheduler\.replicas"):
        render(helm, set_values={"scheduler.replicas": "2", "scheduler.leaderElect": "false"})
    objs = render(helm, set_values={"scheduler.leaderElect": "false"})
    assert _scheduler_config(objs)["leaderElection"]["leaderElect"] is False
    assert not [a for a in _containers(_one(objs, "Deployment", "hami-scheduler"))["vgpu-scheduler-extender"]["args"]
                if a.startswith("--leader-elect")]


def test_scheduler_flags_from_values(helm: Path) -> None:
    from hami_core import cli

    objs = render(helm, set_values={"scheduler.nodeLock.timeout": "120", "scheduler.nodeLock.wait": "0",
                                    "scheduler.kubeQPS": "30", "scheduler.kubeBurst": "60",
                                    "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy": "spread",
                                    "scheduler.kubeScheduler.qps": "70",
                                    "scheduler.priorityClassName": "", "scheduler.runtimeClassName": "gvisor",
                                    "scheduler.nodeSelector.role": "control",
                                    "scheduler.tolerations[0].key": "dedicated",
                                    "scheduler.tolerations[0].operator": "Exists"})
    dep = _one(objs, "Deployment", "hami-scheduler")
    hami = _containers(dep)["vgpu-scheduler-extender"]
    args = cli._build_parser().parse_args([a.replace("$(METRICS_BIND)", "127.0.0.1:9395")
                                           .replace("$(POD_NAMESPACE)", "ns") for a in hami["args"]])
    assert (args.node_lock_timeout, args.node_lock_wait, args.kube_qps, args.kube_burst) == (120, 0, 30, 60)
    assert args.node_scheduler_policy == "spread" and args.gpu_scheduler_policy == "spread"
    spec = dep["spec"]["template"]["spec"]
    assert "priorityClassName" not in spec and spec["runtimeClassName"] == "gvisor"
    assert spec["nodeSelector"] == {"role": "control"} and spec["tolerations"] == [
        {"key": "dedicated", "operator": "Exists"}]
    assert _scheduler_config(objs)["clientConnection"]["qps"] == 70


def test_webhook_values(helm: Path) -> None:
    objs = render(helm, set_values={"scheduler.admissionWebhook.failurePolicy": "Fail",
                                    "scheduler.admissionWebhook.whitelistNamespaces[0]": "istio-system",
                                    "scheduler.admissionWebhook.objectSelector.matchLabels.team": "ml",
                                    "scheduler.admissionWebhook.admissionReviewVersions[0]": "v1"})
    create, update = _one(objs, "MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    assert create["failurePolicy"] == "Fail" and update["failurePolicy"] == "Fail"
    expected = [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]},
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["istio-system"]}]
    assert create["namespaceSelector"]["matchExpressions"] == expected == update["namespaceSelector"][
        "matchExpressions"]
    assert create["objectSelector"] == {"matchLabels": {"team": "ml"}}
    assert "objectSelector" not in update   # a pod's own labels never take it past the guard
    assert create["admissionReviewVersions"] == ["v1"] == update["admissionReviewVersions"]
    default_create, default_update = _one(render(helm), "MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    assert default_create["failurePolicy"] == "Ignore" and default_update["failurePolicy"] == "Fail"
    assert "objectSelector" not in default_create


def test_service_types(helm: Path) -> None:
    objs = render(helm, set_values={"scheduler.service.type": "NodePort", "scheduler.service.nodePorts.http": "31998",
                                    "devicePlugin.service.type": "NodePort"})
    svc = _one(objs, "Service", "hami-scheduler")
    assert svc["spec"]["type"] == "NodePort" and svc["spec"]["ports"][0]["nodePort"] == 31998
    mon = _one(objs, "Service", "hami-device-plugin-monitor")
    assert mon["spec"]["type"] == "NodePort" and "nodePort" not in mon["spec"]["ports"][0]
    for svc in (o for o in render(helm) if o["kind"] == "Service"):
        assert svc["spec"]["type"] == "ClusterIP", svc["metadata"]["name"]   # HAMi's current default


# --- monitoring ----------------------------------------------------------------------------------------


def test_service_monitors(helm: Path) -> None:
    assert not [o for o in render(helm) if o["kind"] == "ServiceMonitor"]   # opt-in
    objs = render(helm, values=["prometheus-values.yaml"], set_values={"serviceMonitor.labels.release": "prom-x"})
    monitors = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ServiceMonitor"}
    assert set(monitors) == {"hami-scheduler", "hami-device-plugin-monitor"}
    services = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Service"}
    for name, sm in monitors.items():
        assert sm["metadata"]["labels"]["release"] == "prom-x"
        (endpoint,) = sm["spec"]["endpoints"]
        svc = next(s for s in services.values() if sm["spec"]["selector"]["matchLabels"].items()
                   <= s["metadata"]["labels"].items())
        assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]}, name


def test_dashboards_configmap(helm: Path) -> None:
    assert not [o for o in render(helm) if o["metadata"]["name"] == "hami-dashboards"]
    cm = _one(render(helm, values=["dashboards-values.yaml"]), "ConfigMap", "hami-dashboards")
    files = sorted(p.name for p in (CHART / "dashboards").glob("*.json"))
    assert files and sorted(cm["data"]) == files
    for name in files:
        assert json.loads(cm["data"][name]) == json.loads((CHART / "dashboards" / name).read_text(encoding="utf-8"))
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"


# --- schema --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", sorted(p.name for p in CI.glob("*.yaml")))
def test_value_sets_validate_against_kubernetes(helm: Path, values: str) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for obj in render(helm, values=[values]):
        if obj["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):
            continue
        try:
            kubernetes_validate.validate(obj, "1.31.0", strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{values}: {obj['kind']}/{obj['metadata']['name']}: {exc.message}") from None
        if obj["metadata"]["name"] != "hami-dashboards":   # Grafana's legends are {{label}} by design
            assert "{{" not in "".join(_walk_strings(obj)), f"{values}: unrendered template in {obj['kind']}"
