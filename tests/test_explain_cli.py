"""``hami explain``: against a --cluster-file (the examples/cluster.yaml format), as a table and as JSON, and its
errors (a missing pod, a pod without managed devices, an unreachable cluster, a malformed name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core import cli
from hami_core.wire import keys
from hami_core.wire.filterreasons import FILTER_REASONS, summarize

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cluster.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["explain", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def node(name: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    devs = [{"id": f"{name}-gpu{i}", "index": i, "count": 10, "devmem": 24576, "devcore": 100, "type": "NVIDIA A10",
             "mode": "hami-core", "health": True, **d} for i, d in enumerate(devices)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {keys.NODE_NVIDIA_REGISTER: json.dumps(devs)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(10 * len(devs))}}}


def pod(name: str, limits: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": annotations or {}},
            "spec": {"schedulerName": "hami-scheduler",
                     "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}]},
            "status": {"phase": "Pending"}}


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    persisted = summarize({"gpu-1": "1/2 CardInsufficientMemory, 1/2 CardNotHealth", "gpu-2": "1/1 CardTypeMismatch"},
                          2)
    objects = [
        node("gpu-1", [{"health": False}, {"devmem": 8000}]),
        node("gpu-2", [{"type": "NVIDIA T4"}]),
        pod("big", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000"},
            {keys.NVIDIA_USE_GPUTYPE: "A10", FILTER_REASONS: persisted}),
        pod("cpu", {"cpu": "1"}),
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects), encoding="utf-8")
    return path


def test_table_names_each_devices_failing_check_and_the_persisted_reasons(capsys: pytest.CaptureFixture[str],
                                                                         cluster_file: Path) -> None:
    code, out, err = run(capsys, "ml/big", "--cluster-file", str(cluster_file))
    assert code == 0, err
    assert "pending: no node fits (2 candidate nodes)" in out
    assert "1/2 CardInsufficientMemory, 1/2 CardNotHealth" in out  # gpu-1's reason, as the filter gives it
    assert "health: unhealthy" in out and "memory: needs 16000 MiB, 8000 of 8000 MiB free" in out
    assert "type: NVIDIA T4" in out
    assert "the scheduler's last failed filter (hami.io/filter-reasons): 2 of 2 nodes failed" in out
    assert "1 nodes: 1/1 CardTypeMismatch (gpu-2)" in out


def test_json_output(capsys: pytest.CaptureFixture[str], cluster_file: Path) -> None:
    code, out, _ = run(capsys, "big", "-n", "ml", "--cluster-file", str(cluster_file), "--output", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["pod"] == "ml/big" and doc["node"] is None and doc["fitting_nodes"] == 0
    by_node = {n["name"]: n for n in doc["nodes"]}
    assert by_node["gpu-1"]["reason"] == by_node["gpu-1"]["filter"]["reason"]
    checks = {d["id"]: d["failed_check"] for r in by_node["gpu-1"]["requests"] for d in r["devices"]}
    assert checks == {"gpu-1-gpu0": "health", "gpu-1-gpu1": "memory"}
    [device] = by_node["gpu-2"]["requests"][0]["devices"]
    assert device["failed_check"] == "type" and device["reason"] == "1/1 CardTypeMismatch"
    statuses = [c["status"] for c in device["checks"]]
    assert statuses[:3] == ["pass", "pass", "fail"] and set(statuses[3:]) == {"not reached"}
    assert doc["persisted"]["failed"] == 2


def test_the_example_cluster_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "team-a/train-0", "--cluster-file", str(EXAMPLE), "-o", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["node"] in {"gpu-node-1", "gpu-node-2"}
    chosen = [n for n in doc["nodes"] if n["chosen"]]
    assert [n["name"] for n in chosen] == [doc["node"]] and chosen[0]["score"] is not None
    assert {n["name"]: n["reason"] for n in doc["nodes"]}["cpu-node-1"] == "node unregistered"


def test_only_the_named_nodes(capsys: pytest.CaptureFixture[str], cluster_file: Path) -> None:
    code, out, _ = run(capsys, "ml/big", "--cluster-file", str(cluster_file), "--node", "gpu-2", "-o", "json")
    assert code == 0 and [n["name"] for n in json.loads(out)["nodes"]] == ["gpu-2"]
    code, _, err = run(capsys, "ml/big", "--cluster-file", str(cluster_file), "--node", "nope")
    assert code == 1 and "--node nope: no such node" in err


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["ml/nope"], 1, "hami: error: pod ml/nope not found in cluster file"),
    (["ml/cpu"], 1, "hami: error: pod ml/cpu requests no device of the loaded plugins"),
    (["a/b/c"], 2, "hami: error: pod 'a/b/c': expected NAMESPACE/NAME or NAME"),
    (["ml/big", "--max-nodes", "0"], 2, "--max-nodes must be at least 1"),
])
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], cluster_file: Path, argv: list[str], code: int,
                             message: str) -> None:
    got, out, err = run(capsys, *argv, "--cluster-file", str(cluster_file))
    assert got == code and out == ""
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_an_unreachable_cluster(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}), encoding="utf-8")
    code, _, err = run(capsys, "ml/big", "--kubeconfig", str(kubeconfig))
    assert code == 1
    assert err.startswith(f"hami: error: cannot read the cluster (kubeconfig {kubeconfig})") and "Traceback" not in err


def test_help_describes_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["explain", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "Explain why a pod is pending" in out and "--cluster-file" in out and "--output" in out
    assert cli.main(["--help"]) == 0
    assert "why a pod is pending" in capsys.readouterr().out
