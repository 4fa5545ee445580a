"""The Grafana dashboards of charts/hami-py/dashboards/: their queries, the metric names they read, and the queries
with Grafana's variables substituted so that Prometheus itself can evaluate them (tests/e2e/test_prometheus.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DASHBOARDS = Path(__file__).resolve().parents[2] / "charts" / "hami-py" / "dashboards"
#: metric name prefixes the dashboards read (PromQL functions and label names never start with these)
PREFIXES = ("hami_", "process_", "python_")
_NAME = re.compile(r"\b((?:hami|process|python)_[a-zA-Z0-9_]*)\b")
#: the GPU of :class:`FakeNvml` (and of the shared regions the tests write for it)
UUID = "GPU-00000000-1111-2222-3333-444444444444"
_LABEL_VALUES = re.compile(r"^label_values\(\s*(?P<selector>.+?)\s*,\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\s*\)$")


def load(name: str) -> dict[str, Any]:
    return json.loads((DASHBOARDS / name).read_text())


def panel_queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every query target, rows' nested panels included."""
    out = []
    for panel in dash["panels"]:
        for p in [panel, *panel.get("panels", [])]:
            out.extend((p["title"], t["expr"]) for t in p.get("targets", []))
    return out


def variable_queries(dash: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(variable name, selector, label) of every ``label_values(selector, label)`` query variable."""
    out = []
    for v in dash["templating"]["list"]:
        if v.get("type") != "query":
            continue
        m = _LABEL_VALUES.match(v["definition"])
        assert m, f"variable {v['name']}: not a label_values() query: {v['definition']}"
        assert v["query"]["query"] == v["definition"], v["name"]
        out.append((v["name"], m["selector"], m["label"]))
    return out


def metric_names(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def substitute(expr: str, variables: dict[str, str] | None = None, rate_interval: str = "1m") -> str:
    """``expr`` as Grafana sends it: ``$__rate_interval`` and the like replaced, each ``$var`` by its value (default
    ``.*``, the dashboards' "All")."""
    variables = variables or {}
    expr = expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)
    expr = expr.replace("$__range", rate_interval)

    def one(m: re.Match[str]) -> str:
        return variables.get(m["name"], ".*")

    return re.sub(r"\$\{?(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)\}?", one, expr)


class FakeNvml:
    """One GPU, as pynvml spells the calls NvmlSource makes (the host series need a driver the tests do not have)."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return UUID

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA A10"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=24 << 30, used=3 << 30)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=40, memory=10)
