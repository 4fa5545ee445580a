"""Per trace and seed: each policy's GPU allocation at 100 % arrived demand next to the ceiling (docs/simulation.md,
The ceiling), from `hami simulate --report` files.

    hami simulate --trace-nodes T/openb_node_list_gpu_node.csv --trace-pods T/openb_pod_list_default.csv \\
        --policy binpack,fgd --seeds 42-43 --bound --report default.json
    python benchmarks/bound_table.py default.json gpuspec33.json ...

A report written without --bound gets its ceiling computed here, from the inputs it names (the bound depends only on
the cluster, the task list, the seeds, --inflate and --protocol; the trace's default --split-count of 10).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hami_core.engine.config import load_config
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim import openb
from hami_core.sim.bound import experiment_bounds
from hami_core.sim.experiment import Experiment
from hami_core.sim.workload import from_task


def ceilings(report: dict[str, Any]) -> dict[int | None, dict[str, Any]]:
    """Seed -> the bound's JSON, from the report or computed from its inputs."""
    if "bound" in report:
        return {b["seed"]: b for b in report["bound"]["seeds"]}
    inputs = report["inputs"]
    nodes = [openb.node_object(n) for n in openb.load_nodes(inputs["cluster"])]
    tasks = [from_task(t) for t in openb.load_tasks(inputs["workload"])]
    experiment = Experiment(load_config(None), get_plugin_manager(), nodes, tasks, [], seeds=inputs["seeds"],
                            inflate=inputs["inflate"] or 1.3, protocol=inputs["protocol"] or "shuffled")
    return {b.seed: b.as_json() for b in experiment_bounds(experiment)}


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    reports = {Path(p).stem: json.loads(Path(p).read_text()) for p in paths}
    policies = list(dict.fromkeys(k for r in reports.values() for k in r["summary"]))
    head = ["trace", "seed", *policies, "ceiling", *[f"{p} gap" for p in policies], "bound method", "bound s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for trace, report in reports.items():
        bounds = ceilings(report)
        for seed, b in bounds.items():
            at100 = {r["policy"]: r["gpu_allocation_ratio_at_100"] for r in report["runs"] if r["seed"] == seed}
            ceiling = b["gpu_allocation_ratio_at_100"]
            cells = [trace, str(seed), *[_pct(at100.get(p)) for p in policies], _pct(ceiling),
                     *[_gap(ceiling, at100.get(p)) for p in policies],
                     b["method"] + ("" if b["optimal"] else " (stopped early)"), f"{b['wall_s']:.1f}"]
            print("| " + " | ".join(cells) + " |")
    return 0


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _gap(ceiling: float | None, value: float | None) -> str:
    return "-" if ceiling is None or value is None else f"{ceiling - value:.2f}"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
