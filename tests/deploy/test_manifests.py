"""deploy/: every kustomization resolves and parses, and the manifests agree with the code.

Pure Python (PyYAML): kustomize need not be installed. When ``kubectl`` is on PATH every overlay is also
rendered with ``kubectl kustomize`` (skipped with a message otherwise). Checked against the code, not by hand:
the extender's managedResources cover every resource name the vendor plugins register, container args parse
with the real ``hami`` argparse parser, and RBAC grants every (resource, verb) the Kubernetes client calls of
each component need.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core import cli
from hami_core.engine.facade import Engine
from hami_core.sim.loader import bundled

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = sorted(p.parent for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
NAMESPACE = "kube-system"


def _yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*.yaml") if "dashboards" not in p.relative_to(DEPLOY).parts)


def _kustomization(directory: Path) -> dict[str, Any]:
    return yaml.safe_load((directory / "kustomization.yaml").read_text(encoding="utf-8"))


def _objects(directory: Path) -> Iterator[dict[str, Any]]:
    """The objects a kustomization lists (resources and components, recursively; patches not applied)."""
    k = _kustomization(directory)
    for entry in [*k.get("resources", []), *k.get("components", [])]:
        path = (directory / entry).resolve()
        if path.is_dir():
            yield from _objects(path)
        else:
            yield from (d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d)
    for gen in k.get("configMapGenerator", []):
        data = {Path(f).name: (directory / f).read_text(encoding="utf-8") for f in gen.get("files", [])}
        yield {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data}


def _all_objects() -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for overlay in OVERLAYS:
        for obj in _objects(overlay):
            seen[(obj["kind"], obj["metadata"]["name"])] = obj
    return list(seen.values())


def _get(kind: str, name: str) -> dict[str, Any]:
    for obj in _all_objects():
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"{kind}/{name} not found under deploy/")


def _containers(kind: str, name: str) -> dict[str, dict[str, Any]]:
    spec = _get(kind, name)["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


# --- structure -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    if path.name == "device-config.yaml":
        return
    assert docs, f"{path} is empty"
    for d in docs:
        assert "kind" in d and ("metadata" in d or d["kind"] in {"Kustomization", "Component"}), path


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("kustomization.yaml")),
                         ids=lambda p: str(p.parent.relative_to(DEPLOY)))
def test_kustomization_references_exist(path: Path) -> None:
    k = yaml.safe_load(path.read_text(encoding="utf-8"))
    base = path.parent
    for entry in [*k.get("resources", []), *k.get("components", [])]:
        target = (base / entry).resolve()
        assert target.exists(), f"{path}: {entry} does not exist"
        if target.is_dir():
            assert (target / "kustomization.yaml").is_file(), f"{path}: {entry} has no kustomization.yaml"
        else:
            assert list(yaml.safe_load_all(target.read_text(encoding="utf-8"))), target
    for gen in k.get("configMapGenerator", []):
        for f in gen.get("files", []):
            assert (base / f).is_file(), f"{path}: generator file {f} missing"
    referenced = {(base / e).resolve() for e in k.get("resources", [])}
    if k.get("kind") != "Component" and base.name == "base":
        unreferenced = {p.resolve() for p in base.glob("*.yaml")} - referenced - {path.resolve()}
        unreferenced -= {(base / f).resolve() for g in k.get("configMapGenerator", []) for f in g["files"]}
        assert not unreferenced, f"files in {base} no kustomization lists: {sorted(map(str, unreferenced))}"


def test_overlays_exist() -> None:
    assert {p.name for p in OVERLAYS} >= {"default", "cert-manager", "prometheus"}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_renders_with_kubectl(overlay: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed: overlays checked by the pure-Python loader only")
    out = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    objs = [d for d in yaml.safe_load_all(out.stdout) if d]
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
    for obj in objs:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace") == NAMESPACE, (obj["kind"], obj["metadata"]["name"])
    kinds = {o["kind"] for o in objs}
    assert {"Deployment", "DaemonSet", "Service", "MutatingWebhookConfiguration", "PodDisruptionBudget"} <= kinds
    webhook = next(o for o in objs if o["kind"] == "MutatingWebhookConfiguration")
    if overlay.name == "cert-manager":
        assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/hami-scheduler"
        assert "Certificate" in kinds
    else:
        assert "Job" in kinds
    assert ("ServiceMonitor" in kinds) == (overlay.name == "prometheus")
    _validate_against_kubernetes(objs)


#: The Kubernetes version the manifests are validated against (kubernetes-validate's bundled schemas).
KUBERNETES_VERSION = "1.31.0"
#: Custom resources (cert-manager, Prometheus operator) have no schema in kubernetes-validate.
CUSTOM_KINDS = {"Certificate", "Issuer", "ServiceMonitor"}


def _validate_against_kubernetes(objs: list[dict[str, Any]]) -> None:
    try:
        import kubernetes_validate
    except ImportError:
        pytest.skip("kubernetes-validate not installed: rendered objects not schema-validated")
    for obj in objs:
        if obj["kind"] in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} at "
                                 f"{'/'.join(str(p) for p in exc.path)}") from None


# --- scheduler -----------------------------------------------------------------------------------------


def _scheduler_config() -> dict[str, Any]:
    return yaml.safe_load(_get("ConfigMap", "hami-scheduler-newversion")["data"]["config.yaml"])


def _resource_names(config: Any) -> set[str]:
    names: set[str] = set()
    for backend in Engine(config).backends.values():
        names |= set(backend.resource_names.all())
    return names


def test_extender_stanza() -> None:
    cfg = _scheduler_config()
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["hami-scheduler"]
    assert cfg["leaderElection"]["resourceName"] == "hami-scheduler"
    (ext,) = cfg["extenders"]
    assert ext["filterVerb"] == "filter" and ext["bindVerb"] == "bind"
    assert ext["nodeCacheCapable"] is True
    assert "prioritizeVerb" not in ext and "preemptVerb" not in ext
    assert ext.get("ignorable", False) is False
    assert ext["httpTimeout"] == "30s"
    managed = {m["name"]: m for m in ext["managedResources"]}
    assert all(m.get("ignoredByScheduler") is True for m in managed.values())
    every = _resource_names(yaml.safe_load(bundled("device-config.yaml")))
    assert every, "no vendor plugin installed?"
    assert every <= set(managed), f"not managed: {sorted(every - set(managed))}"
    deployed = _resource_names(yaml.safe_load(_get("ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]))
    assert deployed <= set(managed)


def _parse(args: list[str], env: dict[str, str]) -> Any:
    args = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), "x"), a) for a in args]
    return cli._build_parser().parse_args(args)   # strict: an unknown flag exits


def test_extender_points_at_the_hami_container_behind_the_service() -> None:
    (ext,) = _scheduler_config()["extenders"]
    url = re.fullmatch(r"(https?)://127\.0\.0\.1:(\d+)", ext["urlPrefix"])
    assert url, ext["urlPrefix"]
    assert (url.group(1) == "https") == ext["enableHTTPS"]
    hami = _containers("Deployment", "hami-scheduler")["vgpu-scheduler-extender"]
    args = _parse(hami["args"], {})
    assert args.http_bind.rsplit(":", 1)[1] == url.group(2)
    assert bool(args.tls_cert and args.tls_key) == ext["enableHTTPS"]
    ports = {p["name"]: p["containerPort"] for p in hami["ports"]}
    assert ports["https"] == int(url.group(2))
    assert args.metrics_bind.rsplit(":", 1)[1] == str(ports["metrics"]) == "9395"
    assert args.scheduler_name == "hami-scheduler" and args.device_config == "/device-config.yaml"
    assert args.kube_qps >= 50 and args.kube_burst >= 2 * args.kube_qps  # not HAMi's 5/10: see the manifest
    kube = _containers("Deployment", "hami-scheduler")["kube-scheduler"]
    assert "--config=/config/config.yaml" in kube["command"]
    svc = _get("Service", "hami-scheduler")
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert svc_ports["http"]["port"] == 443 and svc_ports["http"]["nodePort"] == 31998
    assert svc_ports["http"]["targetPort"] == "https"
    assert svc_ports["monitor"]["port"] == 31993 and svc_ports["monitor"]["targetPort"] == "metrics"
    pod_labels = _get("Deployment", "hami-scheduler")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert pod_labels["hami.io/webhook"] == "ignore"
    pdb = _get("PodDisruptionBudget", "hami-scheduler")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_webhook_registration() -> None:
    (hook,) = _get("MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    assert hook["name"] == "vgpu.hami.io"
    svc = hook["clientConfig"]["service"]
    assert (svc["name"], svc["namespace"], svc["port"]) == ("hami-scheduler", NAMESPACE, 443)
    assert svc["path"] == "/webhook"
    from types import SimpleNamespace

    from hami_core.scheduler.routes import Routes

    served = Routes(SimpleNamespace(filter=None, bind=None), SimpleNamespace(review=None))  # type: ignore[arg-type]
    assert served.unrouted(svc["path"]) is None and served.unrouted("/nowhere") is not None  # the servers route it
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "*"}]
    expr = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert expr in hook["objectSelector"]["matchExpressions"]
    assert expr in hook["namespaceSelector"]["matchExpressions"]
    tls = {v["name"]: v for v in _get("Deployment", "hami-scheduler")["spec"]["template"]["spec"]["volumes"]}["tls"]
    assert tls["secret"]["secretName"] == "hami-scheduler-tls"
    assert _get("Certificate", "hami-scheduler")["spec"]["secretName"] == "hami-scheduler-tls"


# --- node side -----------------------------------------------------------------------------------------


def test_daemonset() -> None:
    ds = _get("DaemonSet", "hami-device-plugin")
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpu": "on"}
    assert ds["spec"]["template"]["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert not spec.get("hostPID") and not spec.get("hostNetwork")
    containers = _containers("DaemonSet", "hami-device-plugin")
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert set(host.values()) == {"/var/lib/kubelet/device-plugins", "/usr/local/vgpu", "/tmp/vgpulock",
                                  "/usr/local/vgpu/containers"}
    for c in containers.values():
        sc = c["securityContext"]
        assert not sc.get("privileged") and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        for m in c["volumeMounts"]:   # kubelet mounts host paths into workloads: they must match inside
            if m["name"] in host:
                assert m["mountPath"] == host[m["name"]], m
    plugin = _parse(containers["device-plugin"]["args"], {})
    assert plugin.kubelet_dir == "/var/lib/kubelet/device-plugins" and plugin.in_cluster
    env = {e["name"]: e for e in containers["device-plugin"]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HOOK_PATH"]["value"] + "/vgpu" == host["lib"]
    monitor = _parse(containers["vgpu-monitor"]["args"], {})
    assert monitor.containers_dir == host["ctrs"] and monitor.port == 9394
    svc = _get("Service", "hami-device-plugin-monitor")
    (port,) = svc["spec"]["ports"]
    assert (port["name"], port["port"], port["nodePort"], port["targetPort"]) == ("monitorport", 31992, 31992, 9394)


# --- RBAC, derived from the client calls in the code ---------------------------------------------------

KUBE = ROOT / "hami_core" / "cluster" / "kube.py"
LEADER = ROOT / "hami_core" / "cluster" / "leader.py"
VERB = {"read": "get", "list": "list", "patch": "patch", "create": "create", "replace": "update", "delete": "delete"}
RESOURCE = {"node": "nodes", "pod": "pods", "pod_binding": "pods/binding", "event": "events", "lease": "leases",
            "resource_quota": "resourcequotas", "resourcequota": "resourcequotas"}


def _client_call(method: str) -> tuple[str, str]:
    """``read_namespaced_pod`` -> (pods, get); ``list_pod_for_all_namespaces`` -> (pods, list)."""
    verb, rest = method.split("_", 1)
    rest = rest.removeprefix("namespaced_").removesuffix("_for_all_namespaces")
    return RESOURCE[rest], VERB[verb]


def _kube_methods() -> dict[str, set[tuple[str, str]]]:
    """KubeCluster method -> the (resource, verb) pairs its CoreV1Api calls need (a watch needs list+watch)."""
    tree = ast.parse(KUBE.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KubeCluster")
    out: dict[str, set[tuple[str, str]]] = {}
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        calls = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                 and isinstance(n.value, ast.Attribute) and n.value.attr == "core"}
        perms = {_client_call(c) for c in calls if c != "api_client"}
        for n in ast.walk(fn):   # list_nodes/list_pods go through self._list("Node"/"Pod")
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "_list"
                    and n.args and isinstance(n.args[0], ast.Constant)):
                perms.add((RESOURCE[str(n.args[0].value).lower()], "list"))
            # a watch starts a reflector per kind (``_Reflector(self, "Node", ...)``): it lists and watches that kind
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "_Reflector"
                    and len(n.args) > 1 and isinstance(n.args[1], ast.Constant)):
                perms |= {(RESOURCE[str(n.args[1].value).lower()], verb) for verb in ("list", "watch")}
        out[fn.name] = perms
    # A method handed to a helper in __init__ (``self.events = EventRecorder(self._post_event)``) runs on behalf of
    # every method that uses that helper (``event`` queues, the recorder's thread calls ``_post_event``).
    init = next(fn for fn in cls.body if isinstance(fn, ast.FunctionDef) and fn.name == "__init__")
    wired: dict[str, set[str]] = {}
    for n in ast.walk(init):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
            handed = {a.attr for a in ast.walk(n.value) if isinstance(a, ast.Attribute) and a.attr in out}
            for target in n.targets:
                if isinstance(target, ast.Attribute) and handed:
                    wired.setdefault(target.attr, set()).update(handed)
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name != "__init__":
            for n in ast.walk(fn):
                if isinstance(n, ast.Attribute) and n.attr in wired:
                    for handed in wired[n.attr]:
                        out[fn.name] |= out[handed]
    return out


def _used_by(package: str) -> set[tuple[str, str]]:
    methods = _kube_methods()
    used: set[tuple[str, str]] = set()
    for path in (ROOT / "hami_core" / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods:
                owner = node.func.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name == "cluster":
                    used |= methods[node.func.attr]
    return used


def _granted(role_kind: str, name: str) -> set[tuple[str, str]]:
    rules = _get(role_kind, name)["rules"]
    return {(res, verb) for rule in rules for res in rule["resources"] for verb in rule["verbs"]}


def test_rbac_derivation_sees_the_client_calls() -> None:
    methods = _kube_methods()
    assert methods["bind"] == {("pods/binding", "create")}
    assert methods["event"] == {("events", "create")}  # queued; the recorder's thread posts it
    assert ("pods", "watch") in methods["watch"]
    assert methods["watch_resource_quotas"] == {("resourcequotas", "list"), ("resourcequotas", "watch")}


@pytest.mark.parametrize(("package", "role"), [("scheduler", "hami-scheduler"),
                                               ("node", "hami-device-plugin-monitor"),
                                               ("monitor", "hami-device-plugin-monitor")])
def test_rbac_grants_what_the_code_uses(package: str, role: str) -> None:
    used = _used_by(package)
    assert used, package
    missing = used - _granted("ClusterRole", role)
    assert not missing, f"{role} lacks {sorted(missing)} used by hami_core/{package}"


@pytest.mark.parametrize(("packages", "role"), [(("scheduler",), "hami-scheduler"),
                                                (("node", "monitor"), "hami-device-plugin-monitor")])
def test_rbac_grants_nothing_more(packages: tuple[str, ...], role: str) -> None:
    used = set().union(*(_used_by(p) for p in packages))
    extra = _granted("ClusterRole", role) - used
    assert not extra, f"{role} grants {sorted(extra)} that hami_core/{'/'.join(packages)} never uses"


def test_leader_lease_access() -> None:
    calls = {n.attr for n in ast.walk(ast.parse(LEADER.read_text(encoding="utf-8")))
             if isinstance(n, ast.Attribute) and re.match(r"(read|create|patch)_namespaced_lease$", n.attr)}
    assert calls == {"read_namespaced_lease", "create_namespaced_lease", "patch_namespaced_lease"}
    # hami runs the elector with campaign=False (follows kube-scheduler's Lease): it only reads.
    assert "campaign=False" in (ROOT / "hami_core" / "cli.py").read_text(encoding="utf-8")
    role = _get("Role", "hami-scheduler-lease")
    named = [r for r in role["rules"] if r.get("resourceNames") == ["hami-scheduler"]]
    assert named and "get" in named[0]["verbs"]


def test_every_rbac_verb_is_justified() -> None:
    for path in _yaml_files():
        text = path.read_text(encoding="utf-8")
        if "kind: ClusterRole\n" not in text and "kind: Role\n" not in text:
            continue
        verbs_indent = -1
        for line in text.splitlines():
            indent = len(line) - len(line.lstrip())
            if line.strip() == "verbs:":
                verbs_indent = indent
            elif verbs_indent >= 0 and indent > verbs_indent and line.strip().startswith("- "):
                assert "#" in line, f"{path.name}: verb without a justification: {line.strip()}"
            else:
                verbs_indent = -1
