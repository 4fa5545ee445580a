"""The Grafana dashboard parses and queries only metrics the monitor or the scheduler exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "charts" / "hami-py" / "dashboards" / "hami-monitor.json"
DOC = Path(__file__).resolve().parents[2] / "docs" / "monitor.md"
SCHEDULER = {"hami_gpu_memory_allocated_bytes", "hami_gpu_memory_limit_bytes"}


def test_dashboard_queries_documented_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {m for e in exprs for m in re.findall(r"\b(hami_[a-z_]+)\b", e)}
    documented = set(re.findall(r"`(hami_[a-z_]+)`", DOC.read_text()))
    assert used and used <= documented | SCHEDULER
