"""``hami simulate --bound``: the ceiling is above what every policy reaches, is the optimum where the optimum can be
enumerated, never exceeds 100 %, honours GPU-model constraints, and bad flags are one-line errors."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hami_core.cli import main
from hami_core.sim import bound
from hami_core.sim.bound import BoundError, NodeSpec, arrived_prefix, upper_bound
from hami_core.sim.html import render
from hami_core.sim.workload import SimPod

pytest.importorskip("scipy.optimize", reason="--bound needs scipy (the sim and test extras)")
MODELS = ("T4", "V100M16", "P100")


def _trace(folder: Path, rng: random.Random, *, nodes: int, pods: int) -> tuple[str, str]:
    """A random openb-shaped node list and task list: mixed models, tight CPU, shares, whole and multi-GPU tasks,
    model constraints and CPU-only tasks."""
    node_csv, pod_csv = folder / "nodes.csv", folder / "pods.csv"
    rows = ["sn,cpu_milli,memory_mib,gpu,model"]
    for i in range(nodes):
        rows.append(f"n{i},{rng.choice((8000, 16000, 32000))},{rng.choice((32768, 65536))},"
                    f"{rng.choice((1, 2, 4))},{rng.choice(MODELS)}")
    node_csv.write_text("\n".join(rows) + "\n")
    rows = ["name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec"]
    for i in range(pods):
        kind = rng.random()
        num, milli = (0, 0) if kind < 0.1 else (1, rng.choice((200, 300, 500, 600, 700))) if kind < 0.7 else (
            rng.choice((1, 1, 2, 4)), 1000)
        spec = rng.choice(("", "", "", "T4", "V100M16|P100"))
        rows.append(f"p{i},{rng.choice((1000, 2000, 4000, 8000))},{rng.choice((2048, 8192, 16384))},{num},{milli},"
                    f"{spec if num else ''}")
    pod_csv.write_text("\n".join(rows) + "\n")
    return str(node_csv), str(pod_csv)


def _simulate(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", "--no-progress", "--jobs", "1", "--json", *args]) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("method", ["exact", "classes"])
@pytest.mark.parametrize("case", range(3))
def test_the_ceiling_is_above_every_policy_run(tmp_path: Path, case: int, method: str) -> None:
    nodes, pods = _trace(tmp_path, random.Random(case), nodes=5, pods=30)
    report = _simulate("--trace-nodes", nodes, "--trace-pods", pods, "--policy", "binpack,spread,fgd",
                       "--seeds", "1-3", "--bound", method)
    by_seed = {b["seed"]: b for b in report["bound"]["seeds"]}
    assert report["bound"]["methods"] == [method] and sorted(by_seed) == [1, 2, 3]
    for run in report["runs"]:
        ceiling = by_seed[run["seed"]]
        assert ceiling["method"] == method
        assert run["bound"] == ceiling["gpu_allocation_ratio_at_100"]
        assert run["gpu_allocation_ratio_at_100"] <= run["bound"] <= 100.0
        assert run["gap_to_bound"] == pytest.approx(run["bound"] - run["gpu_allocation_ratio_at_100"], abs=1e-3)
        # the ceiling for moves keeps this run's pods: between the run and the ceiling
        assert run["gpu_allocation_ratio_at_100"] <= run["moves_bound"] <= run["bound"]
        # the bound's prefix is the replay's: the curve's first point at or past 100 % is where the bound stops
        first = next(p["arrived"] for p in run["curve"] if p["arrived"] >= 100.0)
        assert ceiling["arrived"] == pytest.approx(first, abs=1e-3)
    for label, summary in report["summary"].items():
        runs = [r for r in report["runs"] if r["policy"] == label]
        assert summary["gap_to_bound"] == pytest.approx(sum(r["gap_to_bound"] for r in runs) / len(runs), abs=2e-3)


def _brute_force(nodes: list[NodeSpec], pods: list[SimPod], must: frozenset[int] = frozenset()) -> int:
    """The most GPU milli any subset of ``pods`` can take on ``nodes``, by trying every pod on every node and every
    set of its GPUs (or nowhere, unless its index is in ``must``); -1 when the pods of ``must`` fit nowhere together."""
    state = [[n.cpu_milli, n.memory_mib, [0] * n.gpus, [0] * n.gpus] for n in nodes]
    best = -1

    def place(i: int, got: int) -> None:
        nonlocal best
        if i == len(pods):
            best = max(best, got)
            return
        if got + sum(p.gpu_demand for p in pods[i:]) <= best:
            return
        pod = pods[i]
        for n, (spec, s) in enumerate(zip(nodes, state, strict=True)):
            if (pod.cpu_milli > s[0] or pod.memory_mib > s[1]
                    or (pod.models and not any(m in spec.model.upper() for m in pod.models))):
                continue
            for gpus in itertools.combinations(range(spec.gpus), pod.num_gpu):
                if any(s[2][g] + pod.per_gpu > 1000 or s[3][g] + 1 > spec.split for g in gpus):
                    continue
                s[0] -= pod.cpu_milli
                s[1] -= pod.memory_mib
                for g in gpus:
                    s[2][g] += pod.per_gpu
                    s[3][g] += 1
                place(i + 1, got + pod.gpu_demand)
                s[0] += pod.cpu_milli
                s[1] += pod.memory_mib
                for g in gpus:
                    s[2][g] -= pod.per_gpu
                    s[3][g] -= 1
            del n
        if i not in must:
            place(i + 1, got)  # skipped: it fits nowhere, or the best placement leaves it out

    place(0, 0)
    return best


def _first_fit(nodes: list[NodeSpec], pods: list[SimPod]) -> frozenset[int]:
    """The pods a first-fit placement in arrival order places (a run's placed pods: what moves must keep)."""
    state = [[n.cpu_milli, n.memory_mib, [0] * n.gpus, [0] * n.gpus] for n in nodes]
    placed = set()
    for i, pod in enumerate(pods):
        for spec, s in zip(nodes, state, strict=True):
            if (pod.cpu_milli > s[0] or pod.memory_mib > s[1]
                    or (pod.models and not any(m in spec.model.upper() for m in pod.models))):
                continue
            gpus = [g for g in range(spec.gpus) if s[2][g] + pod.per_gpu <= 1000 and s[3][g] < spec.split]
            if len(gpus) < pod.num_gpu:
                continue
            s[0] -= pod.cpu_milli
            s[1] -= pod.memory_mib
            for g in gpus[:pod.num_gpu]:
                s[2][g] += pod.per_gpu
                s[3][g] += 1
            placed.add(i)
            break
    return frozenset(placed)


def _tiny(rng: random.Random) -> tuple[list[NodeSpec], list[SimPod]]:
    nodes = [NodeSpec(rng.choice((4000, 8000)), 65536, rng.choice((1, 2, 3)), "NVIDIA-" + rng.choice(MODELS[:2]),
                      rng.choice((2, 10))) for _ in range(rng.choice((1, 2, 3)))]
    pods = []
    for _ in range(rng.choice((3, 4, 5, 6))):
        whole = rng.random() < 0.35
        pods.append(SimPod({}, rng.choice((1000, 2000, 3000, 4000)), 1024, rng.choice((1, 2)) if whole else 1,
                           1000 if whole else rng.choice((300, 400, 500, 600, 700)),
                           rng.choice(((), (), ("T4",), ("V100M16",)))))
    return nodes, pods


@pytest.mark.parametrize("case", range(40))
def test_exact_is_the_brute_force_optimum_and_classes_is_above_it(case: int) -> None:
    nodes, pods = _tiny(random.Random(1000 + case))
    best = _brute_force(nodes, pods)
    exact, method, optimal = upper_bound(nodes, pods, method="exact")
    assert (method, optimal) == ("exact", True)
    assert exact == pytest.approx(best, abs=1e-6)
    classes, method, _ = upper_bound(nodes, pods, method="classes")
    assert method == "classes" and classes >= best - 1e-6
    # stopped before the pattern generation converges, the dual certificate still holds
    early, _, _ = upper_bound(nodes, pods, method="classes", time_limit=0.0)
    assert early >= classes - 1e-6
    auto = upper_bound(nodes, pods)
    assert auto[1] == "exact"  # tiny: auto solves the placement problem itself


@pytest.mark.parametrize("case", range(40))
def test_the_ceiling_for_moves_keeps_the_placed_pods(case: int) -> None:
    """``keep`` (the ceiling for moves, moves_bounds): the best placement that keeps a first-fit run's pods, by brute
    force, is what ``exact`` finds with those pods' classes kept; ``classes`` is above it; both are at most the
    plain ceiling and at least the run itself."""
    nodes, pods = _tiny(random.Random(1000 + case))
    must = _first_fit(nodes, pods)
    keep = Counter((pods[i].cpu_milli, pods[i].memory_mib, pods[i].num_gpu, pods[i].per_gpu, pods[i].models)
                   for i in must)
    # pods of one class are alike: keeping the first ``keep[c]`` of class c is keeping any ``keep[c]`` of them
    seen: Counter[Any] = Counter()
    first = set()
    for i, pod in enumerate(pods):
        key = (pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.per_gpu, pod.models)
        if seen[key] < keep[key]:
            first.add(i)
        seen[key] += 1
    best = _brute_force(nodes, pods, frozenset(first))
    run = sum(pods[i].gpu_demand for i in must)
    assert run <= best <= _brute_force(nodes, pods)
    exact, _, optimal = upper_bound(nodes, pods, method="exact", keep=keep)
    assert optimal and exact == pytest.approx(best, abs=1e-6)
    classes, _, _ = upper_bound(nodes, pods, method="classes", keep=keep)
    assert best - 1e-6 <= classes <= upper_bound(nodes, pods, method="classes")[0] + 1e-6


def test_the_ceiling_for_moves_is_below_the_ceiling_somewhere() -> None:
    """Moves keep every placed pod, the plain ceiling may drop some: on some tiny instances that costs."""
    below = 0
    for case in range(40):
        nodes, pods = _tiny(random.Random(1000 + case))
        must = _first_fit(nodes, pods)
        below += _brute_force(nodes, pods, must) < _brute_force(nodes, pods)
    assert below >= 2


def test_a_class_kept_beyond_its_arrivals_is_refused() -> None:
    nodes, pods = _tiny(random.Random(5))
    p = pods[0]
    with pytest.raises(BoundError, match="to keep, but only"):
        upper_bound(nodes, pods, keep={(p.cpu_milli, p.memory_mib, p.num_gpu, p.per_gpu, p.models): len(pods) + 1})


def test_some_tiny_instance_is_not_trivially_full() -> None:
    """The instances above must exercise the bound: in some of them the optimum is below the arrived demand."""
    gaps = 0
    for case in range(40):
        nodes, pods = _tiny(random.Random(1000 + case))
        gaps += _brute_force(nodes, pods) < min(sum(p.gpu_demand for p in pods), 1000 * sum(n.gpus for n in nodes))
    assert gaps >= 5


def _pod(num: int, milli: int, models: tuple[str, ...] = (), cpu: int = 1000) -> SimPod:
    return SimPod({}, cpu, 1024, num, milli, models)


def test_model_constrained_pods_fill_only_their_model() -> None:
    nodes = [NodeSpec(64000, 262144, 4, "NVIDIA-T4"), NodeSpec(64000, 262144, 4, "NVIDIA-T4"),
             NodeSpec(64000, 262144, 2, "NVIDIA-V100M16")]
    pods = [_pod(1, 1000, ("V100M16",)) for _ in range(20)]
    for method in ("exact", "classes"):
        milli, _, _ = upper_bound(nodes, pods, method=method)
        assert milli == pytest.approx(2000)  # two V100 GPUs, whatever else is free
    mixed = pods + [_pod(1, 500, ("T4",)) for _ in range(40)]
    assert upper_bound(nodes, mixed, method="classes")[0] == pytest.approx(2000 + 8000)


def test_ceiling_never_exceeds_100_and_stops_at_the_crossing_pod() -> None:
    nodes = [NodeSpec(None, None, 2, "NVIDIA-T4")]
    tasks = [_pod(1, 600), _pod(1, 600), _pod(1, 600), _pod(1, 600), _pod(1, 1000)]
    assert arrived_prefix(tasks, 2000) == tasks[:4]  # 2400 milli arrived with the fourth: the replay reads there
    for method in ("exact", "classes"):
        result = bound.seed_bound(nodes, tasks, 7, method=method)
        assert result.ratio_at_100 == 60.0 and result.trivial == 100.0  # two 0.6 shares never share a GPU
    flood = [_pod(1, 1000) for _ in range(50)]
    assert bound.seed_bound(nodes, flood, 7).ratio_at_100 == 100.0
    assert bound.seed_bound(nodes, [_pod(1, 500)], 7).ratio_at_100 is None  # demand never reaches capacity


def test_cpu_limits_what_a_node_can_take() -> None:
    nodes = [NodeSpec(8000, 65536, 4, "NVIDIA-T4")]
    pods = [_pod(1, 1000, cpu=4000) for _ in range(4)]
    for method in ("exact", "classes"):
        assert upper_bound(nodes, pods, method=method)[0] == pytest.approx(2000)


@pytest.mark.parametrize(("args", "message"), [
    (["--bound", "lp"], "--bound lp: expected one of auto, exact, classes"),
    (["--bound"], "--bound: needs --trace-nodes and --trace-pods (the bound models openb tasks, whose GPU shares "
                  "are known before placement, on openb nodes)"),
    (["--bound", "exact", "--trace-nodes", "n.csv", "--trace-pods", "p.csv", "--explain", "p0"],
     "--bound and --explain are exclusive (--explain prints no report to put the bound in)"),
])
def test_bad_bound_flags_are_one_line_errors(capsys: pytest.CaptureFixture[str], args: list[str],
                                             message: str) -> None:
    assert main(["simulate", "--no-progress", *args]) == 1
    assert capsys.readouterr().err == f"hami: error: {message}\n"


def test_without_scipy_the_bound_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "scipy.optimize", None)
    with pytest.raises(BoundError, match=r"^--bound needs scipy .*pip install 'hami-core\[sim\]'$"):
        bound.require_solver()


def test_tables_and_html_show_the_ceiling_and_the_gap(tmp_path: Path) -> None:
    nodes, pods = _trace(tmp_path, random.Random(5), nodes=4, pods=20)
    out = io.StringIO()
    report_path = tmp_path / "r.json"
    with contextlib.redirect_stdout(out):
        assert main(["simulate", "--no-progress", "--jobs", "1", "--trace-nodes", nodes, "--trace-pods", pods,
                     "--policy", "binpack", "--seeds", "1-2", "--bound", "--report", str(report_path)]) == 0
    terminal = out.getvalue()
    report = json.loads(report_path.read_text())
    summary = report["summary"]["binpack"]
    assert "ceiling" in terminal and "gap" in terminal and f"{summary['bound']:.2f}%" in terminal
    assert f"{summary['gap_to_bound']:.2f}" in terminal
    assert "moves ceiling" in terminal and f"{summary['moves_bound']:.2f}%" in terminal
    assert summary["gpu_allocation_ratio_at_100_stats"]["mean"] <= summary["moves_bound"] <= summary["bound"]
    page = render(report)
    assert f"binpack</b>: {summary['gap_to_bound']:.2f} points from the ceiling" in page
    assert "ceiling at 100 % demand" in page and "<h2>The ceiling</h2>" in page
    without = _simulate("--trace-nodes", nodes, "--trace-pods", pods, "--policy", "binpack", "--seeds", "1")
    assert "bound" not in without and "bound" not in without["runs"][0]
    assert "points from the ceiling" not in render(without)
