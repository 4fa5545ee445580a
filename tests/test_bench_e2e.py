"""benchmarks/bench_e2e.py without a control plane: its kube-scheduler configurations per mode, its pods, its
refusal without binaries. The run itself is in the e2e tier (tests/e2e/test_bench_e2e.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import bench_e2e
import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_each_mode_derives_its_scheduler_config_from_the_shipped_one() -> None:
    alone = bench_e2e.scheduler_config_for("alone", None, b"", 5000)
    assert "extenders" not in alone and alone["profiles"][0]["schedulerName"] == "bench-alone"
    assert alone["clientConnection"] == {"qps": 5000, "burst": 5000}
    assert alone["leaderElection"]["resourceName"] == "hami-scheduler"  # as shipped
    null = bench_e2e.scheduler_config_for("null-extender", "http://127.0.0.1:1", b"", 5000)
    [ext] = null["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:1" and "bindVerb" not in ext and "managedResources" not in ext
    hami = bench_e2e.scheduler_config_for("hami", "https://127.0.0.1:2", b"CA", 5000)
    [ext] = hami["extenders"]
    assert ext["bindVerb"] == "bind" and ext["tlsConfig"] == {"caData": "Q0E="} and ext["managedResources"]
    assert hami["profiles"][0]["schedulerName"] == "hami-scheduler"


def test_pods_whole_gpus_alone_and_fractions_under_hami() -> None:
    alone = bench_e2e.pods_for("alone", "ns", 3, 42)
    assert [p["spec"]["containers"][0]["resources"]["limits"] for p in alone] == [{"nvidia.com/gpu": "1"}] * 3
    hami = bench_e2e.pods_for("hami", "ns", 20, 42)
    limits = [p["spec"]["containers"][0]["resources"]["limits"] for p in hami]
    assert all(set(lim) == {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"} for lim in limits)
    assert hami == bench_e2e.pods_for("hami", "ns", 20, 42)  # seeded
    assert {p["spec"]["schedulerName"] for p in hami} == {"hami-scheduler"}


def test_refuses_without_binaries(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {k: v for k, v in __import__("os").environ.items() if k != "HAMI_E2E_BIN"}
    out = subprocess.run([sys.executable, str(BENCH / "bench_e2e.py")], capture_output=True, text=True, env=env,
                         timeout=60)
    assert out.returncode == 2 and "make bench-e2e" in out.stderr
