"""Time Engine.schedule() for one pod on large clusters (``make bench``).

Each node has 8 NVIDIA GPUs (80 GiB, split count 10); every GPU carries one running pod whose memory and
core share is drawn around the target usage (seeded), so node scores differ as in a real cluster.
Decisions are not reserved, so every iteration schedules against the same state.

Three figures per size: ``schedule(pod)`` with every node's verdict (what an embedding scheduler asks), the same
with a frozen heap (``gc.freeze()``: a long-running scheduler's heap after its initial sync, so the cyclic GC
stops rescanning the inventory), and ``limit=1`` (best-first, the extender's path). ``--vendor hygon`` runs the
same cluster as Hygon DCUs (a plain :class:`~hami_core.plugins.StandardBackend`).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from hami_core.engine.facade import Engine

GPUS_PER_NODE = 8
GPU_MEM = 81920


@dataclass(frozen=True)
class Vendor:
    """What differs between the vendors the benchmark cluster can be made of."""

    section: str
    register: str
    allocated: str
    word: str
    card: str
    count: str
    memory: str
    cores: str


VENDORS = {
    "nvidia": Vendor("nvidia", "hami.io/node-nvidia-register", "hami.io/vgpu-devices-allocated", "NVIDIA",
                     "NVIDIA H100 80GB HBM3", "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
    "hygon": Vendor("hygon", "hami.io/node-dcu-register", "hami.io/dcu-devices-allocated", "DCU", "DCU Z100",
                    "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
}


def build(nodes: int, usage: float, seed: int = 1, vendor: str = "nvidia") -> Engine:
    rng = random.Random(seed)
    v = VENDORS[vendor]
    engine = Engine({v.section: {}})
    for n in range(nodes):
        name = f"node-{n:05d}"
        devs = [{"id": f"GPU-{n:05d}-{g}", "index": g, "count": 10, "devmem": GPU_MEM, "devcore": 100,
                 "type": v.card, "numa": g // 4, "mode": "hami-core", "health": True}
                for g in range(GPUS_PER_NODE)]
        engine.upsert_node({"metadata": {"name": name, "annotations": {v.register: json.dumps(devs)}},
                            "status": {"allocatable": {v.count: str(10 * GPUS_PER_NODE)}}})
        if usage <= 0:
            continue
        for g in range(GPUS_PER_NODE):
            share = min(max(rng.gauss(usage, 0.15), 0.0), 0.95)
            mem, cores = int(GPU_MEM * share), int(100 * share)
            engine.upsert_pod({"metadata": {"name": f"run-{n}-{g}", "namespace": "bench", "uid": f"run-{n}-{g}",
                                            "annotations": {"hami.io/vgpu-node": name,
                                                            v.allocated: f"GPU-{n:05d}-{g},{v.word},{mem},{cores}:;"}},
                               "spec": {"containers": [{"name": "c"}]}})
    return engine


def pod(gpus: int = 1, mem: int = 8000, cores: int = 20, vendor: str = "nvidia") -> dict[str, Any]:
    v = VENDORS[vendor]
    limits = {v.count: str(gpus), v.memory: str(mem), v.cores: str(cores)}
    return {"metadata": {"name": "bench-pod", "namespace": "bench", "uid": "bench-pod"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def measure(engine: Engine, p: dict[str, Any], iterations: int, limit: int | None = None) -> dict[str, float]:
    engine.schedule(p, limit=limit)  # warm caches
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        decision = engine.schedule(p, limit=limit)
        samples.append((time.perf_counter() - t0) * 1000)
        assert decision.node is not None
    samples.sort()
    return {"p50_ms": statistics.median(samples), "p99_ms": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
            "mean_ms": statistics.fmean(samples)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000", help="comma list of cluster sizes (default 1000,5000)")
    parser.add_argument("--usage", type=float, default=0.5, help="mean GPU usage of the cluster (default 0.5)")
    parser.add_argument("--iterations", type=int, default=50, help="schedule() calls per size (default 50)")
    parser.add_argument("--vendor", choices=sorted(VENDORS), default="nvidia",
                        help="the cluster's devices (default nvidia; hygon: a plain StandardBackend)")
    parser.add_argument("--json", action="store_true", help="print JSON rows instead of a table")
    args = parser.parse_args(argv)
    rows = []
    console = Console(stderr=True)
    for n in (int(x) for x in args.nodes.split(",")):
        t0 = time.perf_counter()
        with console.status(f"building {n} nodes x {GPUS_PER_NODE} GPUs at {args.usage:.0%} usage"):
            engine = build(n, args.usage, vendor=args.vendor)
        build_s = time.perf_counter() - t0
        p = pod(vendor=args.vendor)
        stats = measure(engine, p, args.iterations)
        # A long-running scheduler freezes its heap after the initial sync, so the cyclic GC stops rescanning
        # the inventory on every collection; the second figure is the engine's own cost.
        gc.freeze()
        frozen = {f"frozen_{k}": v for k, v in measure(engine, p, args.iterations).items()}
        best = {f"best_first_{k}": v for k, v in measure(engine, p, args.iterations, limit=1).items()}
        gc.unfreeze()
        rows.append({"nodes": n, "gpus": n * GPUS_PER_NODE, "usage": args.usage, "vendor": args.vendor,
                     "build_s": build_s, **stats,
                     **frozen, **best})
        del engine
        gc.collect()
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    table = Table(title=f"Engine.schedule(): one 1-GPU {args.vendor} pod, {args.iterations} iterations "
                        "(limit=1: best-first with capacity prefilter, frozen heap)")
    for col in ("nodes", "GPUs", "usage", "p50 ms", "p99 ms", "p50 ms frozen", "p99 ms frozen",
                "p50 ms limit=1", "p99 ms limit=1", "build s"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["nodes"]), str(r["gpus"]), f"{r['usage']:.0%}", f"{r['p50_ms']:.2f}",
                      f"{r['p99_ms']:.2f}", f"{r['frozen_p50_ms']:.2f}", f"{r['frozen_p99_ms']:.2f}",
                      f"{r['best_first_p50_ms']:.2f}", f"{r['best_first_p99_ms']:.2f}", f"{r['build_s']:.1f}")
    Console(width=max(Console().width, 130)).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
