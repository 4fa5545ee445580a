"""Through the official client against the in-test API server: the scheduler keeps a refused pod's reasons on it
(hami.io/filter-reasons), once, and ``hami explain --kubeconfig`` reads the live cluster and shows them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sched_helpers import gpu_pod, make_engine, nvidia_node, post

from hami_core import cli
from hami_core.cluster.kube import KubeCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.wire.filterreasons import FILTER_REASONS


def kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}), encoding="utf-8")
    return path


def test_refused_pod_keeps_its_reasons_and_explain_reads_them(server: Any, api_client: Any, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    server.create("nodes", "", nvidia_node("gpu-1", mem=8000))
    server.create("nodes", "", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"}})
    server.create("pods", "default", gpu_pod("big", mem=16000))
    svc = Scheduler(make_engine(), KubeCluster(api_client=api_client, qps=0),
                    Options(port=0, metrics_host=None, sync_wait_s=5.0))
    svc.start()
    try:
        for _ in range(3):  # kube-scheduler retrying a parked pod
            pod = server.get("pods", "default", "big")
            result = post(f"{svc.server.url}/filter", {"Pod": pod, "NodeNames": ["gpu-1", "cpu-1"]})[2]
            assert result["FailedNodes"] == {"gpu-1": "2/2 CardInsufficientMemory", "cpu-1": "node unregistered"}
            assert svc.extender.reasons is not None and svc.extender.reasons.wait_idle(5.0)
        assert svc.extender.reasons.writes == 1  # the same reasons: written once
    finally:
        svc.stop()
    stored = json.loads(server.get("pods", "default", "big")["metadata"]["annotations"][FILTER_REASONS])
    assert stored["failed"] == 2 and {g["reason"] for g in stored["reasons"]} == {"2/2 CardInsufficientMemory",
                                                                                 "node unregistered"}

    code = cli.main(["explain", "default/big", "--kubeconfig", str(kubeconfig(tmp_path, server.url)), "-o", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["persisted"] == stored
    by_node = {n["name"]: n for n in doc["nodes"]}
    assert by_node["gpu-1"]["reason"] == "2/2 CardInsufficientMemory"
    assert {d["failed_check"] for d in by_node["gpu-1"]["requests"][0]["devices"]} == {"memory"}
    assert by_node["cpu-1"]["reason"] == "node unregistered"

    code = cli.main(["explain", "default/absent", "--kubeconfig", str(kubeconfig(tmp_path, server.url))])
    assert code == 1 and "hami: error: pod default/absent not found in the cluster" in capsys.readouterr().err
