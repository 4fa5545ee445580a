"""``hami simulate --fgd-mix trace``: the task list's classes given to the fgd policy up front, as the FGD paper's
simulator gives it its typical pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_core.cli import main
from hami_core.engine.config import load_config
from hami_core.engine.facade import Engine
from hami_core.engine.workload import DEVICELESS, Shape
from hami_core.plugins.manager import get_plugin_manager
from hami_core.policies.fgd.config import FgdConfig
from hami_core.sim.experiment import sim_pods
from hami_core.sim.loader import bundled, load_file
from hami_core.sim.mix import trace_mix
from hami_core.sim.openb import Task
from hami_core.sim.workload import from_task

HALF = Shape("NVIDIA", 1, 50, 0, 50)


def _tasks() -> list[Any]:
    rows = ([Task(f"h{i}", 2000, 4096, 1, 500) for i in range(5)]
            + [Task(f"c{i}", 8000, 1024, 0, 0) for i in range(3)]
            + [Task("w", 4000, 2048, 1, 1000), Task("t", 2000, 4096, 1, 500, "T4")])
    return [from_task(t) for t in rows]


def test_classes_are_popularity_weighted_with_cpu_only_pods() -> None:
    mix = trace_mix(Engine(), _tasks(), coverage=0.95)
    assert [(e["nums"], e.get("cores"), e.get("types", ()), e["cpu_milli"], e["weight"]) for e in mix] == [
        (1, 50, (), 2000, 0.5), (0, None, (), 8000, 0.3), (1, 100, (), 4000, 0.1), (1, 50, ("T4",), 2000, 0.1)]
    assert mix[0]["host_memory"] == 4096 and mix[0]["mem_percentage"] == 50
    # the most popular classes up to the coverage, weights not renormalised
    assert [e["weight"] for e in trace_mix(Engine(), _tasks(), coverage=0.8)] == [0.5, 0.3]
    # --fgd-mix paper: the kept classes renormalised to sum to 1, as the paper simulator's GetTypicalPods
    paper = trace_mix(Engine(), _tasks(), coverage=0.8, normalise=True)
    assert [e["weight"] for e in paper] == pytest.approx([0.625, 0.375])
    assert sum(e["weight"] for e in trace_mix(Engine(), _tasks(), coverage=0.95, normalise=True)) == pytest.approx(1)
    # the entries are scheduler.fgd.workload classes
    fixed = FgdConfig.model_validate({"workload": mix}).fixed_mix()
    assert fixed is not None and [c[0] for c in fixed[:2]] == [HALF, DEVICELESS]


def test_fgd_mix_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled demo with the mix given up front: every pod still goes through the engine, and the report says
    where the mix came from; an unknown source is a usage error."""
    assert main(["simulate", "--policy", "fgd", "--fgd-mix", "trace", "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"]["fgd_mix"] == "trace"
    (run,) = report["runs"]
    assert run["placed"] + run["failed"] == run["tasks"] == 55
    assert main(["simulate", "--fgd-mix", "oracle"]) == 2
    assert "invalid choice: 'oracle'" in capsys.readouterr().err


def test_mix_out_writes_a_config_the_scheduler_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--mix-out`` writes what ``--fgd-mix trace`` gives fgd as a ``scheduler.fgd.workload`` config: loaded as a
    scheduler config it is the same mix (from a cluster's past pods, a fixed mix for its scheduler)."""
    out = tmp_path / "mix.yaml"
    assert main(["simulate", "--mix-out", str(out), "--no-progress"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    loaded = load_config(out).scheduler.fgd.fixed_mix()
    engine = Engine(load_config(yaml.safe_load(bundled("device-config.yaml"))), plugins=get_plugin_manager())
    pods, _ = load_file(None, default="workload.yaml", kind="Pod")
    expected = FgdConfig.model_validate({"workload": trace_mix(engine, sim_pods(engine, pods), 0.95)}).fixed_mix()
    assert loaded is not None and loaded == expected
    assert any(c[0] == DEVICELESS for c in loaded) and 0.9 < sum(c[1] for c in loaded) <= 1.0


@pytest.mark.parametrize(("flag", "path", "message"), [
    ("--mix-out", "{tmp}", "is a directory"),
    ("--report", "{tmp}/missing/r.json", "no such directory"),
    ("--html", "{tmp}/missing/r.html", "no such directory"),
])
def test_unwritable_outputs_fail_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str,
                                                path: str, message: str) -> None:
    assert main(["simulate", flag, path.format(tmp=tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"hami: error: {flag} ") and message in err and "Traceback" not in err
