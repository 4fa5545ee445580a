"""``--write-allocation filter`` against ``bind``: how fast kube-scheduler's scheduling loop can go through the
extender when every API call costs a round trip.

kube-scheduler filters one pod at a time; the binding of each pod runs on its own (a goroutine). With
``filter`` (HAMi), ``/filter`` answers after patching the pod with its allocation, so each cycle pays an API
round trip; with ``bind`` it answers once the devices are booked, and ``/bind`` writes the allocation together
with the bind phase. The in-memory cluster here sleeps ``rtt_ms`` before every call (as a real client waits on the
network; the GIL is free meanwhile); watch events are not delayed. Pods are 1-GPU on an empty cluster, binpack
(``--policies binpack,spread`` adds spread); a device plugin stand-in releases each node lock as soon as the pod
is bound.

Reported: ``/filter`` latency as the client sees it, the scheduling loop's rate (pods filtered a second), and
the time until every pod is bound (binds for one node take its lock in turn, so under binpack they, not the
filters, set the pace once round trips are long).

Run: ``python benchmarks/bench_write_allocation.py [--nodes 1000] [--pods 1000] [--rtt-ms 0,2] [--policies binpack]
[--json]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.console import Console
from rich.table import Table


def slow_cluster(rtt_ms: float) -> type:
    """A MemoryCluster whose API calls each wait ``rtt_ms`` first."""
    from hami_core.cluster.memory import MemoryCluster

    delay = rtt_ms / 1000

    class Slow(MemoryCluster):
        pass

    for name in ("get_node", "get_pod", "pods_on_node", "patch_node", "patch_pod", "bind"):
        inner = getattr(MemoryCluster, name)

        def call(self: Any, *args: Any, _inner: Any = inner, **kwargs: Any) -> Any:
            if delay:
                time.sleep(delay)
            return _inner(self, *args, **kwargs)

        setattr(Slow, name, call)
    return Slow


def run_one(nodes: int, pods: int, rtt_ms: float, mode: str, policy: str = "binpack") -> dict[str, Any]:
    from benchkit import Service, logging_quiet, post, request_pod

    svc = Service(nodes, 0.0, "asyncio", write_allocation=mode, cluster_class=slow_cluster(rtt_ms),
                  node_policy=policy)
    logging_quiet()
    objs = [svc.cluster.add_pod(request_pod("1gpu", f"fw-{i}")) for i in range(pods)]
    svc.release_locks_when_bound()
    local = threading.local()
    bound, errors = [], []

    def bind(pod: dict[str, Any], node: str) -> None:
        if not hasattr(local, "conn"):
            local.conn = svc.conn()
        res = post(local.conn, "/bind", json.dumps({"PodName": pod["metadata"]["name"], "PodNamespace": "bench",
                                                    "PodUID": pod["metadata"]["uid"], "Node": node}).encode())
        (errors if res.get("Error") else bound).append(time.perf_counter())

    conn: http.client.HTTPConnection = svc.conn()
    latencies = []
    pool = ThreadPoolExecutor(max_workers=64)
    try:
        t0 = time.perf_counter()
        for pod in objs:
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": svc.names}).encode()
            f0 = time.perf_counter()
            names = post(conn, "/filter", body).get("NodeNames") or []
            latencies.append((time.perf_counter() - f0) * 1000)
            if names:
                pool.submit(bind, pod, names[0])
        loop_s = time.perf_counter() - t0
        pool.shutdown(wait=True)
        all_bound_s = (max(bound) - t0) if bound else float("nan")
    finally:
        svc.stop()
    lat = sorted(latencies)
    return {"nodes": nodes, "pods": pods, "rtt_ms": rtt_ms, "write_allocation": mode, "node_policy": policy,
            "filter_p50_ms": statistics.median(lat), "filter_p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "loop_pods_per_s": pods / loop_s, "bound": len(bound), "bind_errors": len(errors),
            "all_bound_s": all_bound_s}


def section(nodes: int, pods: int, rtts: list[float], policies: tuple[str, ...] = ("binpack",)) -> list[dict[str, Any]]:
    return [run_one(nodes, pods, rtt, mode, policy) for policy in policies for rtt in rtts
            for mode in ("filter", "bind")]


def table(rows: list[dict[str, Any]]) -> Table:
    out = Table(title="8. --write-allocation filter vs bind: kube-scheduler's filter loop with API round trips "
                      "(1-GPU pods, empty cluster)")
    for col in ("nodes", "pods", "node policy", "API round trip", "--write-allocation", "/filter p50 / p99 ms",
                "filter loop pods/s", "bound", "bind errors", "all bound (s)"):
        out.add_column(col, justify="right")
    for r in rows:
        out.add_row(str(r["nodes"]), str(r["pods"]), r["node_policy"], f"{r['rtt_ms']:g} ms", r["write_allocation"],
                    f"{r['filter_p50_ms']:.2f} / {r['filter_p99_ms']:.2f}", f"{r['loop_pods_per_s']:.0f}",
                    str(r["bound"]), str(r["bind_errors"]), f"{r['all_bound_s']:.1f}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rtt-ms", default="0,2", help="API round trips to model, comma list (default 0,2)")
    parser.add_argument("--policies", default="binpack", help="node policies, comma list (default binpack)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = section(args.nodes, args.pods, [float(x) for x in args.rtt_ms.split(",")],
                   tuple(args.policies.split(",")))
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        Console(width=140).print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
