"""``hami defrag plan`` and ``apply`` against a --cluster-file, and the evictions' order and waiting."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core import cli
from hami_core.cluster.base import ConflictError
from hami_core.cluster.memory import MemoryCluster
from hami_core.defrag.cli import apply
from hami_core.defrag.planner import Move, Plan
from hami_core.wire import keys

OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True}]


def node(name: str) -> dict[str, Any]:
    devs = [{"id": f"{name}-gpu{i}", "index": i, "count": 10, "devmem": 24000, "devcore": 100, "type": "NVIDIA A10",
             "mode": "hami-core", "health": True} for i in range(2)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {keys.NODE_NVIDIA_REGISTER: json.dumps(devs)}},
            "status": {"allocatable": {"nvidia.com/gpu": "20"}}}


def pod(name: str, node_name: str, gpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": {"app": "web"},
                         "ownerReferences": OWNER,
                         "annotations": {keys.VGPU_NODE: node_name,
                                         keys.VGPU_DEVICES_ALLOCATED: f"{gpu},NVIDIA,12000,50:;"}},
            "spec": {"schedulerName": "hami-scheduler", "nodeName": node_name,
                     "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {
                         "nvidia.com/gpu": "1", "nvidia.com/gpumem": "12000", "nvidia.com/gpucores": "50"}}}]},
            "status": {"phase": "Running"}}


def pdb(allowed: int) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "ml", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": 1}}


def objects(allowed: int = 1) -> list[dict[str, Any]]:
    return [node("n1"), node("n2"), pod("a", "n1", "n1-gpu0"), pod("b", "n2", "n2-gpu0"), pod("c", "n2", "n2-gpu1"),
            pdb(allowed)]


def write(tmp_path: Path, objs: list[dict[str, Any]]) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objs), encoding="utf-8")
    return path


def test_plan_json_and_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, objects())
    assert cli.main(["defrag", "plan", "--cluster-file", str(path), "--max-percent", "100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["moves"]) == 1 and doc["gpus_freed"] == 1  # the PDB allows one disruption
    assert cli.main(["defrag", "plan", "--cluster-file", str(path), "--max-percent", "100"]) == 0
    out = capsys.readouterr().out
    assert "whole devices freed: 1" in out and "ReplicaSet/rs" in out
    # the default budget (5 % of 3 pods) moves nothing
    assert cli.main(["defrag", "plan", "--cluster-file", str(path)]) == 0
    assert "no move helps within the budget" in capsys.readouterr().out


def test_apply_is_a_dry_run_without_yes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, objects())
    assert cli.main(["defrag", "apply", "--cluster-file", str(path), "--max-percent", "100"]) == 0
    assert "dry run: nothing evicted" in capsys.readouterr().out


def test_apply_evicts_node_by_node_through_the_pdb() -> None:
    objs = objects(allowed=2)
    cluster = MemoryCluster([o for o in objs if o["kind"] == "Node"], [o for o in objs if o["kind"] == "Pod"])
    cluster.pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    moves = (Move("ml/a", "uid-a", "ReplicaSet/rs", "n1", "n2"), Move("ml/b", "uid-b", "ReplicaSet/rs", "n2", None))
    plan = Plan(moves, 2, 3, 1, 2, 0.0, 0.0)
    assert apply(cluster, plan, timeout_s=1, sleep=lambda _: None) == ["ml/a", "ml/b"]
    assert sorted(n for _, n in cluster.pods) == ["c"]
    assert cluster.pdbs[0]["status"]["disruptionsAllowed"] == 0
    # the budget spent, the Eviction API refuses the next one
    with pytest.raises(ConflictError, match="disruption budget"):
        cluster.evict_pod("ml", "c", "uid-c")


def test_eviction_refused_under_two_pdbs() -> None:
    objs = objects(allowed=5)
    cluster = MemoryCluster([], [o for o in objs if o["kind"] == "Pod"])
    everything = pdb(5)
    everything["metadata"]["name"] = "all"
    everything["spec"]["selector"] = {}
    cluster.pdbs = [pdb(5), everything]
    with pytest.raises(ConflictError, match="more than one PodDisruptionBudget"):
        cluster.evict_pod("ml", "a", "uid-a")
    assert ("ml", "a") in cluster.pods


def test_apply_yes_evicts_the_planned_pod(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write(tmp_path, objects())
    assert cli.main(["defrag", "apply", "--cluster-file", str(path), "--max-percent", "100", "--yes"]) == 0
    assert "evicted 1 pod(s)" in capsys.readouterr().out
