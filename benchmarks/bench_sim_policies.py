"""``hami simulate`` of the openb default trace under ``fgd`` against ``binpack``: one run each, seed 42.

Issue 32's target: an ``fgd`` run within 2x of a ``binpack`` run. Each run is a subprocess (``hami simulate
--trace-nodes ... --trace-pods openb_pod_list_default.csv --policy P --seed 42 --jobs 1 --json``), timed in wall
seconds and in the child's CPU seconds (user + system, ``RUSAGE_CHILDREN``): on a shared machine the wall time
includes time the OS gave to other processes, the CPU time does not. The ratios are fgd's over binpack's. The
allocation figure shows the run did its work. Skipped, with a message, where the traces (``../shared/traces/openb``)
are absent.

Run: ``python benchmarks/bench_sim_policies.py [--policies binpack,fgd] [--seed 42] [--json]``, or ``make bench
BENCH_ARGS='--sections 10'``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
TRACE = "openb_pod_list_default.csv"
NODES = "openb_node_list_gpu_node.csv"


def traces_dir() -> Path | None:
    """The openb traces beside the repository (``../shared``) or inside it (``shared``), if there."""
    for base in (ROOT.parent / "shared", ROOT / "shared"):
        d = base / "traces" / "openb"
        if (d / NODES).exists() and (d / TRACE).exists():
            return d
    return None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_policy(traces: Path, policy: str, seed: int) -> dict[str, Any]:
    """One ``hami simulate`` run in a subprocess: its wall and CPU seconds and its allocation at 100 % arrived."""
    hami = Path(sys.executable).with_name("hami")
    cmd = [str(hami) if hami.exists() else "hami", "simulate", "--trace-nodes", str(traces / NODES),
           "--trace-pods", str(traces / TRACE), "--policy", policy, "--seed", str(seed), "--jobs", "1", "--json",
           "--no-progress"]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    row: dict[str, Any] = {"policy": policy, "seed": seed, "wall_s": wall, "cpu_s": cpu, "rc": out.returncode}
    if out.returncode != 0:
        row["stderr"] = out.stderr[-500:]
        return row
    report = json.loads(out.stdout)
    run = report["runs"][0]
    row.update(alloc_at_100=run["gpu_allocation_ratio_at_100"], placed=run["placed"], failed=run["failed"])
    return row


def section(policies: list[str], seed: int = 42, *, progress: bool = True) -> dict[str, Any]:
    """Every policy of ``policies`` once, in order; ratios against the first."""
    traces = traces_dir()
    if traces is None:
        return {"skipped": f"no openb traces under {ROOT.parent / 'shared' / 'traces' / 'openb'}"}
    console = Console(stderr=True)
    rows = []
    for policy in policies:
        if progress:
            with console.status(f"hami simulate {TRACE} --policy {policy} --seed {seed}"):
                rows.append(run_policy(traces, policy, seed))
        else:
            rows.append(run_policy(traces, policy, seed))
    base = rows[0]
    for r in rows:
        r["wall_ratio"] = r["wall_s"] / base["wall_s"] if base["wall_s"] else None
        r["cpu_ratio"] = r["cpu_s"] / base["cpu_s"] if base["cpu_s"] else None
    return {"trace": TRACE, "rows": rows}


def table(result: dict[str, Any]) -> Table:
    t = Table(title="hami simulate, openb default trace, one run per policy (ratios: over the first policy)")
    if "skipped" in result:
        t.add_column("skipped")
        t.add_row(result["skipped"])
        return t
    for col in ("policy", "seed", "exit", "wall s", "cpu s", "ratio (wall)", "ratio (cpu)", "alloc @100%"):
        t.add_column(col, justify="right")
    for r in result["rows"]:
        alloc = f"{r['alloc_at_100']:.2f}%" if "alloc_at_100" in r else "-"
        t.add_row(r["policy"], str(r["seed"]), str(r["rc"]), f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
                  f"{r['wall_ratio']:.2f}", f"{r['cpu_ratio']:.2f}", alloc)
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policies", default="binpack,fgd", help="comma list, the first is the ratios' base")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = parser.parse_args(argv)
    result = section([p.strip() for p in args.policies.split(",") if p.strip()], args.seed, progress=not args.json)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        Console().print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
