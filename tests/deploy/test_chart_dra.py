"""charts/hami-py in DRA mode (``dra.enabled``): the DeviceClasses are hami_core.dra.deviceclass's, one per backend
of each enabled vendor; the hami-dra-driver DaemonSet runs a command hami parses, with RBAC for ResourceSlices and
nothing on the host. Off by default: the default render has none of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import CHART, NO_HELM, find_helm, render

from hami_core import cli
from hami_core.cluster.devicemode import DRA, MODE_LABEL
from hami_core.dra.deviceclass import device_class
from hami_core.engine.facade import Engine

VALUES = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
#: Not in charts/hami-py/ci/: those value sets are validated against Kubernetes 1.31, which has no resource.k8s.io/v1.
DRA_VALUES = Path(__file__).with_name("dra-values.yaml")
SCHEMA_VERSION = "1.37.0"


@pytest.fixture(scope="module")
def helm() -> Path:
    found = find_helm()
    if found is None:
        pytest.skip(NO_HELM)
    return found


@pytest.fixture(scope="module")
def dra(helm: Path) -> list[dict[str, Any]]:
    return render(helm, values=[DRA_VALUES], kube_version=f"v{SCHEMA_VERSION}")


def _of(objs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == kind}


def test_off_by_default(helm: Path) -> None:
    objs = render(helm)
    assert not _of(objs, "DeviceClass")
    assert "hami-dra-driver" not in _of(objs, "DaemonSet")


def test_device_classes_are_the_cores(dra: list[dict[str, Any]]) -> None:
    classes = _of(dra, "DeviceClass")
    words = [*VALUES["dra"]["backends"]["nvidia"], *VALUES["dra"]["backends"]["amd"]]  # the enabled vendors
    assert sorted(classes) == sorted(device_class(w)["metadata"]["name"] for w in words)
    for word in words:
        ours = device_class(word)
        theirs = classes[ours["metadata"]["name"]]
        assert theirs["apiVersion"] == ours["apiVersion"] and theirs["spec"] == ours["spec"]
        assert theirs["metadata"]["annotations"] == ours["metadata"]["annotations"]


def test_backends_are_what_each_vendors_chart_config_declares() -> None:
    for vendor, dev in VALUES["devices"].items():
        declared = sorted(b.name for b in Engine({dev["section"]: dev["config"]}).backends.values())
        assert sorted(VALUES["dra"]["backends"][vendor]) == declared, vendor


def test_driver_daemonset(dra: list[dict[str, Any]]) -> None:
    ds = _of(dra, "DaemonSet")["hami-dra-driver"]
    spec = ds["spec"]["template"]["spec"]
    # the label hami's components read (hami_core.cluster.devicemode): the driver runs exactly on DRA nodes
    assert spec["serviceAccountName"] == "hami-dra-driver" and spec["nodeSelector"] == {MODE_LABEL: DRA}
    assert not spec.get("hostNetwork")
    (container,) = spec["containers"]
    args = cli._build_parser().parse_args(container["args"])  # strict: an unknown flag exits
    assert args.command == "dra-driver" and args.in_cluster and sorted(args.vendor) == ["amd", "nvidia"]
    assert args.resync == 60 and not args.dry_run and not args.withdraw and not args.no_kubelet_plugin
    # the kubelet plugin's folders are kubelet's and the runtime's, mounted from the host at the same paths
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert host == {"plugins-registry": "/var/lib/kubelet/plugins_registry", "plugins": "/var/lib/kubelet/plugins",
                    "cdi": "/var/run/cdi", "lib": "/usr/local/vgpu"}
    assert all(mounts[n] == p for n, p in host.items())
    assert (args.kubelet_registry_dir, args.kubelet_plugins_dir, args.cdi_dir) == (
        host["plugins-registry"], host["plugins"], host["cdi"])
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]


def test_driver_rbac(dra: list[dict[str, Any]]) -> None:
    role = _of(dra, "ClusterRole")["hami-dra-driver"]
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    assert {("resource.k8s.io", "resourceslices", v) for v in ("list", "create", "update", "delete")} <= granted
    # exactly what the driver's code calls: tests/deploy/test_manifests.py derives it
    assert ("", "nodes", "get") in granted and ("", "nodes", "patch") not in granted
    assert not any(r == "deviceclasses" for _, r, _ in granted)  # the chart ships them; the driver never writes them
    (subject,) = _of(dra, "ClusterRoleBinding")["hami-dra-driver"]["subjects"]
    assert subject["name"] == "hami-dra-driver"


def test_the_dra_render_validates_against_kubernetes(dra: list[dict[str, Any]]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for obj in dra:
        try:
            kubernetes_validate.validate(obj, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}") from None


def test_published_slices_validate_against_kubernetes() -> None:
    """What ``hami dra-driver`` publishes (shared, whole-card, MIG-mode, extra attributes) has resource.k8s.io/v1's
    field names and types."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    from dataclasses import replace

    from hami_core.dra.slices import build_slices
    from hami_core.plugins.standard import StandardBackend, standard_dra_devices
    from hami_core.plugins.types import DeviceInfo, ResourceNames

    backend = StandardBackend(name="NVIDIA", vendor="nvidia", resource_names=ResourceNames("nvidia.com/gpu"))
    devices = standard_dra_devices(backend, [
        DeviceInfo(id=f"GPU-{i}", index=i, count=count, devmem=40960, devcore=100, type="NVIDIA-A100", mode=mode,
                   health=True) for i, (count, mode) in enumerate([(10, "hami-core"), (1, "mps"), (7, "mig")])])
    devices[2] = replace(devices[2], shared=False, attributes={"migCapable": True, "firmware": "535.1"})
    for item in build_slices("gpu-1", "NVIDIA", devices, generation=3, vendor="nvidia"):
        item["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": "gpu-1", "uid": "u",
                                                "controller": True}]
        try:
            kubernetes_validate.validate(item, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"ResourceSlice {item['metadata']['name']}: {exc.message}") from None
