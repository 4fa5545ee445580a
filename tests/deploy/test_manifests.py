"""deploy/ (the chart's committed render, see tests/chart_helpers.py): every file parses, and the manifests agree
with the code.

Pure Python (PyYAML): helm need not be installed (tests/deploy/test_chart.py renders the chart itself and checks
deploy/ is its current render). Checked against the code, not by hand: the extender's managedResources cover every
resource name the vendor plugins register, container args parse with the real ``hami`` argparse parser, and RBAC
grants every (resource, verb) the Kubernetes client calls of each component need.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, MANIFESTS

from hami_core import cli
from hami_core.engine.facade import Engine
from hami_core.sim.loader import bundled

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
RENDERS = sorted(DEPLOY / name for name in MANIFESTS)
NAMESPACE = "kube-system"


def _yaml_files() -> list[Path]:
    return sorted(DEPLOY.glob("*.yaml"))


def _objects(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if isinstance(d, dict)]


def _all_objects() -> list[dict[str, Any]]:
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for path in RENDERS:
        for obj in _objects(path):
            seen[(obj["kind"], obj["metadata"]["name"])] = obj
    return list(seen.values())


def _get(kind: str, name: str) -> dict[str, Any]:
    for obj in _all_objects():
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"{kind}/{name} not found under deploy/")


def _get_in(path: Path, kind: str, name: str) -> dict[str, Any]:
    for obj in _objects(path):
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"{kind}/{name} not found in {path}")


def _containers(kind: str, name: str, path: Path = DEPLOY / "hami-py.yaml") -> dict[str, dict[str, Any]]:
    spec = _get_in(path, kind, name)["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*spec.get("initContainers", []), *spec["containers"]]}


# --- structure -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_parses(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert docs, f"{path} is empty"
    if path.name == "device-config.yaml":
        assert docs[0] == yaml.safe_load(_get_in(DEPLOY / "hami-py.yaml", "ConfigMap", "hami-scheduler-device")[
            "data"]["device-config.yaml"]), "deploy/device-config.yaml is not hami-py.yaml's device config"
        return
    for d in docs:
        assert "kind" in d and "metadata" in d, path


def test_only_renders_under_deploy() -> None:
    """deploy/ is generated: nothing in it that `make manifests` does not write (no hand-kept kustomize tree)."""
    names = {p.name for p in DEPLOY.iterdir()}
    assert names == {*MANIFESTS, "device-config.yaml"}, sorted(names)


@pytest.mark.parametrize("render", RENDERS, ids=lambda p: p.name)
def test_render(render: Path) -> None:
    objs = _objects(render)
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
    for obj in objs:
        if obj["kind"] not in cluster_scoped:
            assert obj["metadata"].get("namespace") == NAMESPACE, (obj["kind"], obj["metadata"]["name"])
    kinds = {o["kind"] for o in objs}
    assert {"Deployment", "DaemonSet", "Service", "MutatingWebhookConfiguration", "PodDisruptionBudget",
            "NetworkPolicy"} <= kinds
    for svc in (o for o in objs if o["kind"] == "Service"):   # nothing is published on the nodes
        assert svc["spec"].get("type", "ClusterIP") == "ClusterIP", svc["metadata"]["name"]
        assert all("nodePort" not in p for p in svc["spec"]["ports"]), svc["metadata"]["name"]
    hami = next(c for o in objs if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
                if c["name"] == "vgpu-scheduler-extender")
    metrics_bind = {e["name"]: e.get("value") for e in hami["env"]}["METRICS_BIND"]
    scheduler_svc = next(o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == "hami-scheduler")
    svc_ports = {p["name"] for p in scheduler_svc["spec"]["ports"]}
    policies = {o["metadata"]["name"]: o for o in objs if o["kind"] == "NetworkPolicy"}
    prometheus = render.name == "hami-py-prometheus.yaml"
    if prometheus:   # metrics opened to Prometheus, and to Prometheus only
        assert metrics_bind == "0.0.0.0:9395" and svc_ports == {"http", "monitor"}
        (rule,) = policies["hami-prometheus"]["spec"]["ingress"]
        assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                                 "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]
        assert {p["port"] for p in rule["ports"]} == {"metrics", "monitorport"}
        # the dashboard reads HAMi's per-device series, which the scheduler exports only when asked
        assert "--metrics-device-detail" in hami["args"]
    else:
        assert metrics_bind == "127.0.0.1:9395" and svc_ports == {"http"} and "hami-prometheus" not in policies
        assert "--metrics-device-detail" not in hami["args"]
    webhook = next(o for o in objs if o["kind"] == "MutatingWebhookConfiguration")
    if render.name == "hami-py-cert-manager.yaml":
        assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/hami-scheduler"
        assert "Certificate" in kinds and "Job" not in kinds
    else:
        assert "Job" in kinds and "Certificate" not in kinds
    assert ("ServiceMonitor" in kinds) == prometheus
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
    assert ext["filterVerb"] == "filter" and ext["bindVerb"] == "bind" and ext["preemptVerb"] == "preempt"
    assert ext["nodeCacheCapable"] is True
    assert "prioritizeVerb" not in ext
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


def test_extender_is_on_loopback_and_the_webhook_behind_the_service() -> None:
    """kube-scheduler reaches the extender on loopback (nothing outside the pod can call /filter or /bind);
    kube-apiserver reaches the webhook through the Service, on the listener of --webhook-bind."""
    (ext,) = _scheduler_config()["extenders"]
    url = re.fullmatch(r"(https?)://127\.0\.0\.1:(\d+)", ext["urlPrefix"])
    assert url, ext["urlPrefix"]
    assert (url.group(1) == "https") == ext["enableHTTPS"]
    hami = _containers("Deployment", "hami-scheduler")["vgpu-scheduler-extender"]
    env = {e["name"]: e.get("value") for e in hami["env"]}
    args = _parse(hami["args"], {"METRICS_BIND": str(env["METRICS_BIND"])})
    assert args.http_bind == f"127.0.0.1:{url.group(2)}"
    assert bool(args.tls_cert and args.tls_key) == ext["enableHTTPS"]
    ports = {p["name"]: p["containerPort"] for p in hami["ports"]}
    assert args.webhook_bind == f"0.0.0.0:{ports['webhook']}" and ports["webhook"] != int(url.group(2))
    assert env["METRICS_BIND"] == args.metrics_bind == f"127.0.0.1:{ports['metrics']}" == "127.0.0.1:9395"
    for probe in ("livenessProbe", "readinessProbe"):   # kubelet probes the pod IP: the webhook listener
        assert hami[probe]["httpGet"]["port"] == "webhook" and hami[probe]["httpGet"]["scheme"] == "HTTPS"
    assert args.scheduler_name == "hami-scheduler" and args.device_config == "/device-config.yaml"
    assert args.kube_qps >= 50 and args.kube_burst >= 2 * args.kube_qps  # not HAMi's 5/10: see the manifest
    kube = _containers("Deployment", "hami-scheduler")["kube-scheduler"]
    assert "--config=/config/config.yaml" in kube["command"]
    svc = _get("Service", "hami-scheduler")
    assert svc["spec"]["type"] == "ClusterIP"
    (port,) = svc["spec"]["ports"]   # the metrics port only with components/servicemonitor
    assert (port["name"], port["port"], port["targetPort"]) == ("http", 443, "webhook") and "nodePort" not in port
    pod_labels = _get("Deployment", "hami-scheduler")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert pod_labels["hami.io/webhook"] == "ignore"
    pdb = _get("PodDisruptionBudget", "hami-scheduler")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()


def test_network_policies_open_only_the_webhook_port() -> None:
    sched = _get("NetworkPolicy", "hami-scheduler")["spec"]
    pod_labels = _get("Deployment", "hami-scheduler")["spec"]["template"]["metadata"]["labels"]
    assert sched["podSelector"]["matchLabels"].items() <= pod_labels.items() and sched["policyTypes"] == ["Ingress"]
    (rule,) = sched["ingress"]
    assert rule["ports"] == [{"port": "webhook", "protocol": "TCP"}]   # the Service's target, nothing else
    plugin = _get("NetworkPolicy", "hami-device-plugin")["spec"]
    ds_labels = _get("DaemonSet", "hami-device-plugin")["spec"]["template"]["metadata"]["labels"]
    assert plugin["podSelector"]["matchLabels"].items() <= ds_labels.items()
    assert plugin["policyTypes"] == ["Ingress"] and not plugin.get("ingress")   # closed until Prometheus is let in
    prom = _get("NetworkPolicy", "hami-prometheus")["spec"]
    assert prom["podSelector"]["matchLabels"].items() <= pod_labels.items() & ds_labels.items()
    named = {p["name"] for c in [*_containers("Deployment", "hami-scheduler").values(),
                                 *_containers("DaemonSet", "hami-device-plugin").values()] for p in c.get("ports", [])}
    assert {p["port"] for r in prom["ingress"] for p in r["ports"]} <= named


def _deployed_engines() -> list[Engine]:
    """Engines with every vendor section of HAMi's chart, and with deploy/'s device config."""
    deployed = yaml.safe_load(_get("ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"])
    return [Engine(yaml.safe_load(bundled("device-config.yaml"))), Engine(deployed)]


def test_webhook_registration() -> None:
    create, update = _get("MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    from types import SimpleNamespace

    from hami_core.scheduler.routes import Routes

    served = Routes(SimpleNamespace(filter=None, bind=None), SimpleNamespace(review=None))  # type: ignore[arg-type]
    expr = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    for hook in (create, update):
        svc = hook["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["port"], svc["path"]) == ("hami-scheduler", NAMESPACE, 443,
                                                                            "/webhook")
        assert served.unrouted(svc["path"]) is None and served.unrouted("/nowhere") is not None  # the servers route it
        assert hook["sideEffects"] == "None" and hook["reinvocationPolicy"] == "Never"
        assert expr in hook["namespaceSelector"]["matchExpressions"]   # namespaces: the cluster admin's opt-out
        # a pod's own label is the tenant's: it must not take the pod past the allocation-identity rule
        assert "objectSelector" not in hook
    assert create["name"] == "vgpu.hami.io" and create["failurePolicy"] == "Ignore"   # as HAMi
    assert create["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                "resources": ["pods"], "scope": "*"}]
    assert "matchConditions" not in create
    assert update["failurePolicy"] == "Fail"   # the guard fails closed
    assert update["rules"] == [{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                "resources": ["pods", "pods/status"], "scope": "*"}]
    assert "admission.k8s.io/v1" in [f"admission.k8s.io/{v}" for v in update["admissionReviewVersions"]]
    tls = {v["name"]: v for v in _get("Deployment", "hami-scheduler")["spec"]["template"]["spec"]["volumes"]}["tls"]
    assert tls["secret"]["secretName"] == "hami-scheduler-tls"
    assert _get("Certificate", "hami-scheduler")["spec"]["secretName"] == "hami-scheduler-tls"
    patch = _containers("Job", "hami-certgen")["patch"]["args"]
    assert not any(a.startswith("--patch-failure-policy") for a in patch), "certgen would overwrite Fail"


def test_update_match_conditions_agree_with_the_code() -> None:
    """The CEL filter sends every update the webhook would deny: it watches a prefix of every scheduler-owned key
    (derived from the installed vendor plugins, so a vendor with another prefix fails here) and exempts exactly
    the identities the scheduler's --trusted-identities trusts."""
    from hami_core.scheduler.identity import default_users
    from hami_core.wire.owned import owned_annotations

    (_, update) = _get("MutatingWebhookConfiguration", "hami-webhook")["webhooks"]
    conditions = {c["name"]: c["expression"] for c in update["matchConditions"]}
    assert set(conditions) == {"hami-annotation-changed", "not-a-hami-component"}
    prefixes = re.findall(r"k\.startsWith\('([^']+)'\)", conditions["hami-annotation-changed"])
    assert prefixes
    for engine in _deployed_engines():
        uncovered = [k for k in owned_annotations(engine.backends.values()) if not k.startswith(tuple(prefixes))]
        assert not uncovered, f"matchConditions would not send updates of {uncovered}"
    exempt = re.findall(r"'([^']+)'", conditions["not-a-hami-component"].split(" in ", 1)[1])
    assert conditions["not-a-hami-component"].startswith("!(request.userInfo.username in [")
    hami = _containers("Deployment", "hami-scheduler")["vgpu-scheduler-extender"]
    args = _parse(hami["args"], {"POD_NAMESPACE": NAMESPACE})
    assert sorted(exempt) == sorted(args.trusted_identities) == sorted(default_users(NAMESPACE))
    sas = {(o["metadata"]["name"]) for o in _all_objects() if o["kind"] == "ServiceAccount"}
    assert {u.rsplit(":", 1)[1] for u in exempt} <= sas, "trusted identities must be deploy/'s ServiceAccounts"
    assert _containers("DaemonSet", "hami-device-plugin") and _get("DaemonSet", "hami-device-plugin")["spec"][
        "template"]["spec"]["serviceAccountName"] == "hami-device-plugin"
    assert _get("Deployment", "hami-scheduler")["spec"]["template"]["spec"]["serviceAccountName"] == "hami-scheduler"


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
    assert svc["spec"]["type"] == "ClusterIP" and "nodePort" not in port
    # the named port: only device-plugin pods that run a monitor have it (other vendors' pods are no endpoints)
    assert (port["name"], port["port"], port["targetPort"]) == ("monitorport", 31992, "monitorport")
    assert {p["name"]: p["containerPort"] for p in containers["vgpu-monitor"]["ports"]}["monitorport"] == 9394


# --- RBAC, derived from the client calls in the code ---------------------------------------------------

KUBE = ROOT / "hami_core" / "cluster" / "kube.py"
LEADER = ROOT / "hami_core" / "cluster" / "leader.py"
VERB = {"read": "get", "list": "list", "patch": "patch", "create": "create", "replace": "update", "delete": "delete"}
RESOURCE = {"node": "nodes", "pod": "pods", "pod_binding": "pods/binding", "pod_status": "pods/status",
            "pod_eviction": "pods/eviction",  # hami defrag apply (hami_core/defrag: no chart role uses it)
            "event": "events", "lease": "leases", "resource_quota": "resourcequotas", "resourcequota": "resourcequotas",
            "pod_disruption_budget": "poddisruptionbudgets", "namespace": "namespaces",
            # resource.k8s.io/v1 (ResourceV1Api, through KubeCluster._resource_v1())
            "resource_slice": "resourceslices", "device_class": "deviceclasses", "resource_claim": "resourceclaims",
            "resource_claim_template": "resourceclaimtemplates"}


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
                 and isinstance(n.value, ast.Attribute) and n.value.attr in ("core", "policy")}
        calls |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Call)
                  and isinstance(n.value.func, ast.Attribute) and n.value.func.attr == "_resource_v1"}
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


def _used_by(package: str, *, owners: tuple[str, ...] = ("cluster",),
             functions: tuple[str, ...] | None = None) -> set[tuple[str, str]]:
    """The (resource, verb) pairs of the KubeCluster calls in ``package`` (a folder or a file of hami_core), made
    on an object named one of ``owners``; only inside the top-level ``functions`` when given."""
    methods = _kube_methods()
    used: set[tuple[str, str]] = set()
    where = ROOT / "hami_core" / package
    for path in [where] if where.is_file() else where.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        roots = [n for n in tree.body if getattr(n, "name", None) in functions] if functions else [tree]
        for node in (n for root in roots for n in ast.walk(root)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in methods:
                owner = node.func.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name in owners:
                    used |= methods[node.func.attr]
    return used


def dra_driver_uses() -> set[tuple[str, str]]:
    """What ``hami dra-driver`` calls: the publisher, the kubelet plugin (its ``claims`` source is the cluster),
    the one-mode-per-node check and its event. Not mode.py's webhook half (the scheduler runs that)."""
    return (_used_by("dra/driver.py") | _used_by("dra/cli.py") | _used_by("dra/kubelet", owners=("claims",))
            | _used_by("dra/mode.py", functions=("check_dra_node",)) | _used_by("cluster/devicemode.py")
            | _used_by("plugins/node_context.py"))


def _granted(role_kind: str, name: str) -> set[tuple[str, str]]:
    rules = _get(role_kind, name)["rules"]
    return {(res, verb) for rule in rules for res in rule["resources"] for verb in rule["verbs"]}


def test_rbac_derivation_sees_the_client_calls() -> None:
    methods = _kube_methods()
    assert methods["bind"] == {("pods/binding", "create")}
    assert methods["event"] == {("events", "create")}  # queued; the recorder's thread posts it
    assert methods["evict_pod"] == {("pods/eviction", "create")}  # hami defrag apply, in no chart role
    assert ("pods", "watch") in methods["watch"]
    assert methods["watch_resource_quotas"] == {("resourcequotas", "list"), ("resourcequotas", "watch")}
    assert methods["create_resource_slice"] == {("resourceslices", "create")}
    assert methods["get_resource_claim"] == {("resourceclaims", "get")}
    assert ("resourceclaimtemplates", "create") in _used_by("dra/mode.py")
    assert ("resourceclaims", "get") in dra_driver_uses() and ("events", "create") in dra_driver_uses()


@pytest.mark.parametrize(("package", "role"), [("scheduler", "hami-scheduler"), ("dra/mode.py", "hami-scheduler"),
                                               ("node", "hami-device-plugin-monitor"),
                                               ("monitor", "hami-device-plugin-monitor")])
def test_rbac_grants_what_the_code_uses(package: str, role: str) -> None:
    used = _used_by(package)
    assert used, package
    missing = used - _granted("ClusterRole", role)
    assert not missing, f"{role} lacks {sorted(missing)} used by hami_core/{package}"


# The scheduler also runs the webhook's DRA step (hami_core/dra/mode.py: the namespace's device mode).
@pytest.mark.parametrize(("packages", "role"), [(("scheduler", "dra/mode.py"), "hami-scheduler"),
                                                (("node", "monitor"), "hami-device-plugin-monitor")])
def test_rbac_grants_nothing_more(packages: tuple[str, ...], role: str) -> None:
    used = set().union(*(_used_by(p) for p in packages))
    extra = _granted("ClusterRole", role) - used
    assert not extra, f"{role} grants {sorted(extra)} that hami_core/{'/'.join(packages)} never uses"


def test_dra_driver_rbac_is_what_its_code_uses() -> None:
    """charts/hami-py's hami-dra-driver ClusterRole (rendered with dra.enabled) grants exactly what
    :func:`dra_driver_uses` derives."""
    from chart_helpers import NO_HELM, find_helm, render

    helm = find_helm()
    if helm is None:
        pytest.skip(NO_HELM)
    (role,) = [o for o in render(helm, set_values={"dra.enabled": "true"}, kube_version="v1.37.0")
               if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "hami-dra-driver"]
    granted = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    used = dra_driver_uses()
    assert not used - granted, f"hami-dra-driver lacks {sorted(used - granted)}"
    assert not granted - used, f"hami-dra-driver grants {sorted(granted - used)} that hami dra-driver never uses"


def test_leader_lease_access() -> None:
    calls = {n.attr for n in ast.walk(ast.parse(LEADER.read_text(encoding="utf-8")))
             if isinstance(n, ast.Attribute) and re.match(r"(read|create|patch)_namespaced_lease$", n.attr)}
    assert calls == {"read_namespaced_lease", "create_namespaced_lease", "patch_namespaced_lease"}
    # hami runs the elector with campaign=False (follows kube-scheduler's Lease): it only reads.
    assert "campaign=False" in (ROOT / "hami_core" / "scheduler" / "cli.py").read_text(encoding="utf-8")
    role = _get("Role", "hami-scheduler-lease")
    named = [r for r in role["rules"] if r.get("resourceNames") == ["hami-scheduler"]]
    assert named and "get" in named[0]["verbs"]


def test_every_rbac_verb_is_justified() -> None:
    for path in [*_yaml_files(), *sorted((CHART / "templates").rglob("*.yaml"))]:
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
