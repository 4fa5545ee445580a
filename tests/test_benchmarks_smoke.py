"""Smoke test of benchmarks/run.py: tiny sizes, JSON shape only (no timed assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


def test_run_quick_json_shape() -> None:
    out = subprocess.run([sys.executable, str(RUN), "--quick", "--sections", "1,2,4", "--nodes", "5",
                          "--usage", "0,0.5", "--pods", "3", "--mem", "5,20", "--json"],
                         check=True, capture_output=True, text=True, timeout=120)
    doc = json.loads(out.stdout)
    assert set(doc) == {"meta", "sections"} and doc["meta"]["quick"] is True
    assert set(doc["sections"]) == {"schedule", "http", "memory"}
    rows = doc["sections"]["schedule"]
    assert [(r["nodes"], r["usage"]) for r in rows] == [(5, 0.0), (5, 0.5)]
    for r in rows:
        for kind in ("1gpu", "2gpu", "2ctr", "1gpu_full"):
            assert set(r[kind]) == {"p50_ms", "p99_ms", "mean_ms", "cpu_p50_ms", "cpu_p99_ms", "cpu_mean_ms"}
    for r in doc["sections"]["http"]:
        assert {"filter", "bind", "floor", "roundtrip", "body_bytes"} <= set(r)
    mem = doc["sections"]["memory"]
    assert mem["nodes"] == 5 and mem["pods"] == 20 and mem["rss_mb"] > 0


def test_fgd_section_json_shape() -> None:
    out = subprocess.run([sys.executable, str(RUN), "--quick", "--sections", "6", "--json"],
                         check=True, capture_output=True, text=True, timeout=300)
    rows = json.loads(out.stdout)["sections"]["fgd"]
    assert [(r["nodes"], r["policy"]) for r in rows] == [(200, "binpack"), (200, "fgd")]
    for r in rows:
        assert set(r["steady_ms"]) == set(r["churn_ms"]) == {"p50", "p99"}
        assert 0 < r["placed"] <= r["pods"]
