"""`hami simulate` through the real CLI entry point: the bundled demo, user YAML, errors, reports."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from hami_core.cli import main


def _run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _placements(report: dict) -> dict[str, dict]:
    return {p["pod"]: p for p in report["runs"][0]["placements"]}


def test_bundled_demo_places_what_fits(capsys: pytest.CaptureFixture[str]) -> None:
    report = _run_json(capsys)
    pods = _placements(report)
    run = report["runs"][0]
    assert (run["policy"], run["node_policy"], run["gpu_policy"], run["seed"]) == ("binpack/spread", "binpack",
                                                                                    "spread", None)
    assert run["tasks"] == 55 and run["placed"] == 52 and run["failed"] == 3
    # a pod without devices still gets a node (binpack: the most allocated one that has room)
    assert pods["default/web-frontend"]["skipped"] and pods["default/web-frontend"]["node"] == "gpu-a100-0"
    big = pods["research/too-big"]
    assert big["node"] is None and big["reason"] == "CardInsufficientMemory"
    assert big["failed"]["gpu-a100-0"] == "8/8 CardInsufficientMemory"
    assert big["failed"]["cpu-0"] == "node unregistered"
    assert "CardCordoned" in big["failed"]["gpu-t4-0"]
    llm = pods["research/train-llm-0"]
    assert llm["node"].startswith("gpu-a100")
    assert llm["annotations"]["hami.io/vgpu-devices-allocated"].count(",NVIDIA,40960,100:") == 4
    assert pods["media/t4-transcode"]["node"] == "gpu-t4-0"
    assert all(d["usedmem"] <= d["totalmem"] for devs in report["nodes"].values() for d in devs)
    assert run["failed_by_reason"] == {"CardInsufficientMemory": 3}


def test_table_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for text in ("Placements (arrival order", "Device usage per node", "Policies compared",
                 "51/54 pods requesting devices were placed"):
        assert text in out


def test_policy_flags_and_lists(capsys: pytest.CaptureFixture[str]) -> None:
    binpack = {pod: p["node"] for pod, p in _placements(_run_json(capsys)).items()}
    spread = {pod: p["node"] for pod, p in _placements(_run_json(capsys, "--node-policy", "spread")).items()}
    assert binpack != spread
    compared = _run_json(capsys, "--policy", "binpack,spread,binpack/mutex")
    assert [r["policy"] for r in compared["runs"]] == ["binpack", "spread", "binpack/mutex"]
    assert [(r["node_policy"], r["gpu_policy"]) for r in compared["runs"]] == [
        ("binpack", "binpack"), ("spread", "spread"), ("binpack", "mutex")]
    assert set(compared["summary"]) == {"binpack", "spread", "binpack/mutex"}
    assert main(["simulate", "--policy", "list"]) == 0
    listed = capsys.readouterr().out
    assert "topology-aware" in listed and "spread" in listed


def test_unknown_policy_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--policy", "fastest"]) == 1
    err = capsys.readouterr().err
    assert "unknown node or GPU policy 'fastest'" in err and "binpack" in err


def test_user_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reg = json.dumps([{"id": "GPU-x", "count": 2, "devmem": 1000, "devcore": 100, "type": "NVIDIA T4", "health": True}])
    (tmp_path / "nodes.yaml").write_text(
        "kind: List\nitems:\n- kind: Node\n  metadata:\n    name: n1\n    annotations:\n"
        f"      hami.io/node-nvidia-register: '{reg}'\n")
    (tmp_path / "pods.yaml").write_text("".join(
        f"---\nkind: Pod\nmetadata: {{name: p{i}}}\nspec:\n  containers:\n  - name: c\n    resources:\n"
        "      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 400}\n" for i in range(3)))
    report = _run_json(capsys, "--cluster", str(tmp_path / "nodes.yaml"), "--workload", str(tmp_path / "pods.yaml"))
    placements = report["runs"][0]["placements"]
    assert [p["node"] for p in placements] == ["n1", "n1", None]
    assert placements[2]["failed"] == {"n1": "1/1 CardTimeSlicingExhausted"}


def _quota_inputs(tmp_path: Path, hard: str) -> tuple[str, str]:
    reg = json.dumps([{"id": f"GPU-{i}", "index": i, "count": 10, "devmem": 10000, "devcore": 100, "type": "NVIDIA T4",
                       "health": True} for i in range(2)])
    (tmp_path / "cluster.yaml").write_text(
        f"kind: Node\nmetadata:\n  name: n1\n  annotations:\n    hami.io/node-nvidia-register: '{reg}'\n"
        "---\nkind: ResourceQuota\napiVersion: v1\nmetadata: {name: gpu-quota, namespace: team-a}\n"
        f"spec:\n  hard: {hard}\n")
    (tmp_path / "pods.yaml").write_text("".join(
        f"---\nkind: Pod\nmetadata: {{name: p{i}, namespace: {ns}}}\nspec:\n  containers:\n  - name: c\n"
        "    resources:\n      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 3000}\n"
        for i, ns in enumerate(["team-a", "team-a", "team-a", "team-b", "team-b", "team-b"])))
    return str(tmp_path / "cluster.yaml"), str(tmp_path / "pods.yaml")


def test_resource_quota_in_the_cluster_file_limits_its_namespace(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A ResourceQuota next to the Nodes caps device memory in its namespace only, as the scheduler does."""
    cluster, pods = _quota_inputs(tmp_path, "{limits.nvidia.com/gpumem: '7000'}")
    report = _run_json(capsys, "--cluster", cluster, "--workload", pods)
    assert report["inputs"]["resource_quotas"] == 1
    placed = {p["pod"]: p for p in report["runs"][0]["placements"]}
    # 3000 + 3000 fit under 7000; the third team-a pod would reach 9000, which HAMi's webhook already refuses
    # (its admission check counts what the namespace uses). team-b has no quota.
    assert [placed[f"team-a/p{i}"]["node"] for i in range(3)] == ["n1", "n1", None]
    assert placed["team-a/p2"]["reason"] == "AdmissionDenied: exceeding resource quota"
    assert all(placed[f"team-b/p{i}"]["node"] == "n1" for i in range(3, 6))
    assert report["runs"][0]["resource_quotas"] == [
        {"namespace": "team-a", "resource": "nvidia.com/gpumem", "used": 6000, "limit": 7000}]
    assert main(["simulate", "--no-progress", "--cluster", cluster, "--workload", pods]) == 0
    out = capsys.readouterr().out
    assert "ResourceQuota use at the end" in out and "team-a" in out


def test_mix_out_leaves_out_pods_the_quota_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--mix-out`` counts only pods the webhook admits: team-a's 3000 MiB pods are over its 2000 MiB quota, so
    the mix is team-b's 1000 MiB class alone (it would be two classes at 0.5 if the quota were skipped)."""
    cluster, pods = _quota_inputs(tmp_path, "{limits.nvidia.com/gpumem: '2000'}")
    text = Path(pods).read_text().split("---\n")
    Path(pods).write_text("---\n".join(doc.replace("gpumem: 3000", "gpumem: 1000") if "team-b" in doc else doc
                                        for doc in text))
    out = tmp_path / "mix.yaml"
    assert main(["simulate", "--no-progress", "--cluster", cluster, "--workload", pods, "--mix-out", str(out)]) == 0
    capsys.readouterr()
    workload = yaml.safe_load(out.read_text())["scheduler"]["fgd"]["workload"]
    assert [(c["memory"], c.get("weight", 1.0)) for c in workload] == [(1000, 1.0)]  # 1.0 is the default, left out


def test_quota_on_memory_given_as_a_percentage_is_enforced_by_the_filter(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A percentage counts 0 at admission (HAMi §11.3) but its MiB on the chosen card count in the filter."""
    cluster, pods = _quota_inputs(tmp_path, "{limits.nvidia.com/gpumem: '7000'}")
    Path(pods).write_text(Path(pods).read_text().replace("nvidia.com/gpumem: 3000", "nvidia.com/gpumem-percentage: 40"))
    report = _run_json(capsys, "--cluster", cluster, "--workload", pods)
    placed = {p["pod"]: p for p in report["runs"][0]["placements"]}
    assert [placed[f"team-a/p{i}"]["node"] for i in range(3)] == ["n1", None, None]  # 4000, then 8000 > 7000
    assert placed["team-a/p1"]["reason"] == "ResourceQuotaNotFit"
    assert placed["team-a/p1"]["failed"] == {"n1": "2/2 ResourceQuotaNotFit"}
    assert report["runs"][0]["resource_quotas"][0]["used"] == 4000


def test_without_a_quota_the_same_workload_all_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, pods = _quota_inputs(tmp_path, "{limits.memory: 1Gi}")  # a quota on a resource HAMi does not manage
    report = _run_json(capsys, "--cluster", cluster, "--workload", pods)
    assert report["runs"][0]["failed"] == 0 and "resource_quotas" not in report["runs"][0]


@pytest.mark.parametrize(("content", "message"), [
    (None, "cannot read Node file"),
    ("kind: Pod\nmetadata: {name: x}\n", "expected kind Node or ResourceQuota"),
    ("kind: ResourceQuota\nmetadata: {name: q}\nspec: {hard: 3}\n", "ResourceQuota default/q: spec.hard must be"),
    ("kind: ResourceQuota\nmetadata: {name: q}\nspec: {hard: {}}\n", "no Node objects"),
    ("kind: Node\nmetadata: {}\n", "Node has no metadata.name"),
    ("- just\n- a list\n", "expected a Node or ResourceQuota object"),
    ("{unclosed", "not valid YAML"),
])
def test_bad_input_is_one_clean_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None,
                                      message: str) -> None:
    path = tmp_path / "nodes.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["simulate", "--cluster", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hami: error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize(("args", "needle"), [
    (["--gpu-policy", "fastest"], "gpuSchedulerPolicy"),
    (["--seeds", "9-3"], "--seeds"),
    (["--trace-pods", "/nonexistent.csv"], "cannot read trace file"),
])
def test_bad_flags(capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    assert main(["simulate", *args]) == 1
    assert needle in capsys.readouterr().err


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_report_and_html_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    assert main(["simulate", "--no-progress", "--policy", "binpack,spread", "--report", str(out), "--html",
                 str(page)]) == 0
    report = json.loads(out.read_text())
    assert report["version"] == 1 and set(report) >= {"inputs", "runs", "summary"}
    for run in report["runs"]:
        assert set(run) >= {"policy", "node_policy", "gpu_policy", "seed", "tasks", "placed", "failed",
                            "failed_by_reason", "gpu_allocation_ratio_at_100", "final_gpu_allocation_ratio",
                            "fragmentation_ratio_at_100", "curve", "per_model", "node_allocation", "wall_s",
                            "decisions_per_s"}
        assert run["curve"][0] == {"arrived": 0.0, "allocated": 0.0, "fragmentation": run["curve"][0]["fragmentation"]}
    for summary in report["summary"].values():
        assert set(summary) >= {"runs", "gpu_allocation_ratio_at_100", "placed", "failed", "fragmentation_ratio_at_100"}
    text = page.read_text()
    checker = _Checker()
    checker.feed(text)
    assert checker.tags.count("svg") >= 3 and "polyline" in checker.tags
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # opens offline


def test_bad_yaml_object_is_skipped_unless_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    reg = json.dumps([{"id": "GPU-x", "count": 2, "devmem": 1000, "devcore": 100, "type": "NVIDIA T4", "health": True}])
    good = f"kind: Node\nmetadata:\n  name: n1\n  annotations:\n    hami.io/node-nvidia-register: '{reg}'\n"
    path = tmp_path / "nodes.yaml"
    path.write_text(good + "---\nkind: Node\nmetadata: {labels: {a: b}}\n")
    report = _run_json(capsys, "--cluster", str(path))
    assert report["inputs"]["nodes"] == 1 and report["inputs"]["skipped_rows"] == 1
    assert "document 2: Node has no metadata.name" in caplog.text
    assert main(["simulate", "--strict", "--cluster", str(path)]) == 1
    assert "document 2: Node has no metadata.name" in capsys.readouterr().err


def test_pod_not_shaped_like_a_pod_is_skipped_unless_strict(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """A workload pod whose container ``resources`` is a number reached the vendor plugins and ended the run with a
    traceback; it is now a named input problem like any malformed object."""
    path = tmp_path / "pods.yaml"
    path.write_text("kind: Pod\nmetadata: {name: bad}\nspec: {containers: [{name: c, resources: 1}]}\n---\n"
                    "kind: Pod\nmetadata: {name: good}\nspec: {containers: [{name: c, resources: {limits: "
                    "{nvidia.com/gpu: 1}}}]}\n")
    report = _run_json(capsys, "--workload", str(path))
    assert report["inputs"]["skipped_rows"] == 1
    problem = "document 1: Pod default/bad: spec.containers[0].resources must be an object, got int"
    assert problem in caplog.text
    assert main(["simulate", "--strict", "--workload", str(path)]) == 1
    assert problem in capsys.readouterr().err


def test_bundled_cluster_has_a_node_of_every_vendor(capsys: pytest.CaptureFixture[str]) -> None:
    """Every vendor plugin in the repository places its example pods on its example node."""
    from hami_core.plugins.manager import get_plugin_manager

    installed = {r.name for r in get_plugin_manager().reports if r.status == "loaded"}
    report = _run_json(capsys)
    by_node = {p["node"] for p in report["runs"][0]["placements"] if p["node"]}
    expected = {"ascend": "ascend-910b3-0", "cambricon": "mlu370-node-0", "hygon": "dcu-node-0",
                "iluvatar": "iluvatar-bi150-0", "metax": "metax-sgpu-node-1", "mthreads": "mtt-node-1",
                "nvidia": "gpu-a100-0", "kunlun": "kl-node-1", "enflame": "enflame-drs-node-1"}
    for vendor, node in expected.items():
        if vendor in installed:
            assert node in by_node, f"{vendor}: no pod placed on {node}"


def test_fgd_policy_in_simulate(capsys: pytest.CaptureFixture[str]) -> None:
    """``--policy fgd`` runs the fragmentation-aware policy at both levels through the real engine."""
    report = _run_json(capsys, "--policy", "binpack,fgd,fgd/binpack")
    runs = {r["policy"]: r for r in report["runs"]}
    assert [(runs[p]["node_policy"], runs[p]["gpu_policy"]) for p in ("fgd", "fgd/binpack")] == [
        ("fgd", "fgd"), ("fgd", "binpack")]
    for policy in ("fgd", "fgd/binpack"):
        run = runs[policy]
        assert run["tasks"] == 55 and run["placed"] + run["failed"] == 55
        assert run["placed"] >= runs["binpack"]["placed"] - 1
    alone = _run_json(capsys, "--policy", "fgd")
    pods = _placements(alone)
    # the pod without devices is ranked by fgd too: it still gets a node
    assert pods["default/web-frontend"]["skipped"] and pods["default/web-frontend"]["node"]
    assert all(d["usedmem"] <= d["totalmem"] for devs in alone["nodes"].values() for d in devs)
    assert main(["simulate", "--policy", "list"]) == 0
    assert "fgd" in capsys.readouterr().out


@pytest.mark.parametrize(("policy", "cpu_pods", "node"), [
    ("binpack", "policy", "big"),  # MostAllocated: big, with "warm" on it, is the more allocated
    ("binpack", "least-allocated", "small"),  # kube-scheduler's default in a cluster: the emptier node
    ("spread", "policy", "small"),
    ("fgd", "least-allocated", "small"),  # fgd would rank it; least-allocated ignores the policy
])
def test_cpu_pods_go_where_the_flag_says(tmp_path: Path, capsys: pytest.CaptureFixture[str], policy: str,
                                         cpu_pods: str, node: str) -> None:
    """``--cpu-pods``: pods without devices go as the node policy would (``policy``) or, as in a cluster where
    HAMi's extender never sees them, to the node with the most free CPU and memory (``least-allocated``). "warm"
    (2 CPUs) takes big, the first of two idle nodes, under every rule; then "web" shows the rule."""
    reg = json.dumps([{"id": "GPU-0", "index": 0, "count": 10, "devmem": 10000, "devcore": 100, "type": "NVIDIA T4",
                       "health": True}])
    (tmp_path / "cluster.yaml").write_text("".join(
        f"---\nkind: Node\nmetadata:\n  name: {name}\n  annotations:\n    hami.io/node-nvidia-register: '{reg}'\n"
        f"status:\n  allocatable: {{cpu: '{cpu}', memory: {mem}}}\n"
        for name, cpu, mem in (("big", 64, "256Gi"), ("small", 8, "32Gi"))))
    (tmp_path / "pods.yaml").write_text("".join(
        f"---\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  - name: c\n"
        f"    resources:\n      requests: {{cpu: '{cpu}', memory: 1Gi}}\n" for name, cpu in (("warm", 2), ("web", 4))))
    report = _run_json(capsys, "--cluster", str(tmp_path / "cluster.yaml"), "--workload", str(tmp_path / "pods.yaml"),
                       "--policy", policy, "--cpu-pods", cpu_pods)
    assert report["inputs"]["cpu_pods"] == cpu_pods
    assert _placements(report)["default/warm"]["node"] == "big"
    assert _placements(report)["default/web"]["node"] == node


def test_cpu_pods_refuses_an_unknown_placement(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cpu-pods", "random"]) == 2
    assert "invalid choice: 'random'" in capsys.readouterr().err
