"""Benchmark: one /metrics scrape of ``hami monitor`` over 200 containers x 2 devices (target < 50 ms).

Writes 200 v1 shared-region files (4 live processes each) into a temporary containers dir, then times
(a) the collector plus the text rendering in-process (rescan included) and (b) a full HTTP GET of /metrics
against the exporter on 127.0.0.1, each the median of many runs after a warm-up.

    .venv/bin/python benchmarks/bench_monitor.py [--containers 200] [--runs 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "monitor"))

from monitor_helpers import Proc, write_region

from hami_core.cluster.memory import MemoryCluster
from hami_core.monitor import Monitor, MonitorOptions
from hami_core.monitor.exposition import render_text
from hami_core.monitor.nvml import NvmlSource

TARGET_MS = 50.0


class _NoNvml(NvmlSource):
    def _init(self) -> bool:
        return False


def _populate(root: Path, n: int) -> list[dict]:
    pods = []
    for i in range(n):
        uid = f"{i:08x}-0000-4000-8000-000000000000"
        uuids = [f"GPU-{g % 8:08x}-1111-2222-3333-444444444444" for g in (2 * i, 2 * i + 1)]
        procs = [Proc(pid=p, used={0: (1, 2, 3, 0, 1 << 20), 1: (1, 2, 3, 0, 1 << 21)},
                      util={0: (0, 0, 5), 1: (0, 0, 7)}) for p in range(4)]
        write_region(root, uid, "main", uuids=uuids, limits=[8 << 30, 8 << 30], procs=procs,
                     last_kernel_time=int(time.time()) - 5)
        pods.append({"metadata": {"name": f"job-{i}", "namespace": "bench", "uid": uid},
                     "spec": {"nodeName": "node-a", "containers": [{"name": "main"}]}})
    return pods


def _median_ms(fn, runs: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--containers", type=int, default=200)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pods = _populate(root, args.containers)
        table = Table(title=f"hami monitor scrape: {args.containers} containers x 2 devices (median of {args.runs})")
        for col in ("Pods from", "Path", "Samples", "ms", f"< {TARGET_MS:.0f} ms"):
            table.add_column(col)
        worst = 0.0
        for label, cluster in (("directory names", None), ("MemoryCluster", MemoryCluster(pods=pods))):
            m = Monitor(MonitorOptions(containers_dir=str(root), host="127.0.0.1", port=0, node_name="node-a",
                                       feedback=False, interval_s=3600), cluster, _NoNvml())
            m.start()
            try:
                body = render_text(m.registry)
                samples = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
                in_proc = _median_ms(lambda m=m: render_text(m.registry), args.runs)
                http = _median_ms(lambda m=m: urllib.request.urlopen(m.url, timeout=10).read(), args.runs)
            finally:
                m.stop()
            for path, ms in (("collector (in-process)", in_proc), ("HTTP GET /metrics", http)):
                worst = max(worst, ms)
                ok = "[green]yes[/]" if ms < TARGET_MS else "[red]no[/]"
                table.add_row(label, path, str(samples), f"{ms:.1f}", ok)
        Console().print(table)
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
