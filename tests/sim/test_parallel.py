"""``hami simulate --jobs``: runs in worker processes give the serial results; out-of-range flags are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hami_core.cli import main
from hami_core.sim.experiment import MAX_RUNS, PolicyError, parse_seeds

#: What differs between two executions of the same run: how long it took.
TIMINGS = ("wall_s", "decisions_per_s")


def _strip(report: dict) -> dict:
    runs = [{k: v for k, v in r.items() if k not in TIMINGS} for r in report["runs"]]
    summary = {p: {k: v for k, v in s.items() if k not in TIMINGS} for p, s in report["summary"].items()}
    return {"runs": runs, "summary": summary}


def test_parallel_runs_equal_the_serial_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--no-progress", "--policy", "binpack,spread", "--seeds", "3-4", "--inflate", "0.6"]
    reports = {}
    for jobs in ("1", "3"):
        out = tmp_path / f"jobs{jobs}.json"
        assert main([*args, "--jobs", jobs, "--report", str(out)]) == 0
        reports[jobs] = json.loads(out.read_text())
    capsys.readouterr()
    serial, parallel = _strip(reports["1"]), _strip(reports["3"])
    assert [(r["policy"], r["seed"]) for r in parallel["runs"]] == [
        (p, s) for s in (3, 4) for p in ("binpack", "spread")]
    # the seeds draw different task lists and the policies place them differently: the comparison has teeth
    assert serial["runs"][0]["curve"] != serial["runs"][2]["curve"]
    assert serial["runs"][0]["node_allocation"] != serial["runs"][1]["node_allocation"]
    assert parallel == serial


@pytest.mark.parametrize(("args", "message"), [
    (["--jobs", "0"], "--jobs: must be at least 1, got 0"),
    (["--jobs", "-2"], "--jobs: must be at least 1, got -2"),
    (["--inflate", "0"], "--inflate: must be a positive number, got 0"),
    (["--inflate", "-1.5"], "--inflate: must be a positive number, got -1.5"),
    (["--inflate", "nan"], "--inflate: must be a positive number, got nan"),
    (["--inflate", "1e6"], "--inflate 1e+06: more than 100 times the capacity (--force allows it)"),
    (["--split-count", "0"], "--split-count: must be at least 1, got 0"),
    (["--seeds", "0-5000"], "--seeds 0-5000: 5001 seeds, more than 1000 (--force allows more)"),
    (["--seeds", "1-400", "--policy", "binpack,spread,fgd"],
     "--seeds 1-400 x --policy: 1200 runs, more than 1000 (--force allows more)"),
    (["--force", "--seeds", "0-999999999999"], "--seeds 0-999999999999: 1000000000000 seeds, more than 100000"),
])
def test_out_of_range_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str], args: list[str],
                                                message: str) -> None:
    assert main(["simulate", "--no-progress", *args]) == 1
    err = capsys.readouterr().err
    assert err == f"hami: error: {message}\n"


def test_force_lets_a_long_seed_list_through() -> None:
    assert len(parse_seeds("1-1500")) == 1500  # the library's own cap is the memory guard, not MAX_RUNS
    with pytest.raises(PolicyError, match="--force allows more"):
        parse_seeds("1-1500", limit=MAX_RUNS)


def test_parallel_progress_adds_up_to_the_runs() -> None:
    """The one bar of the experiment advances by shares of runs from the workers: they add up to the run count."""
    from hami_core.engine.config import load_config
    from hami_core.engine.facade import Engine
    from hami_core.plugins.manager import get_plugin_manager
    from hami_core.sim.experiment import Experiment, Policy, sim_pods
    from hami_core.sim.loader import bundled, load_objects

    config, plugins = load_config(None), get_plugin_manager()
    nodes = load_objects(bundled("cluster.yaml"), source="cluster", kind="Node")
    pods = load_objects(bundled("workload.yaml"), source="workload", kind="Pod")
    tasks = sim_pods(Engine(config, plugins=plugins), pods)
    policies = [Policy("binpack", "binpack", "binpack"), Policy("spread", "spread", "spread")]
    exp = Experiment(config, plugins, nodes, tasks, policies, seeds=[1, 2], inflate=0.5)
    shares: list[float] = []
    done: list[tuple[int, int]] = []
    runs = exp.run(progress=shares.append, jobs=2, on_done=lambda k, n: done.append((k, n)))
    assert [(r.policy, r.seed) for r in runs] == [("binpack", 1), ("spread", 1), ("binpack", 2), ("spread", 2)]
    assert sum(shares) == pytest.approx(4.0)
    assert done == [(1, 4), (2, 4), (3, 4), (4, 4)]
