"""A burst of pods for one node through the real extender, with kube-scheduler's retry and a device plugin's
lock release played faithfully: how long until all are bound (HAMi #1367: 40-pod jobs taking minutes).

HAMi holds a node's lock from ``/bind`` until the device plugin's Allocate releases it. Under binpack the pods
of a burst all go to the same node, so their binds contend for that lock one after another:

* ``--node-lock-wait 0`` (HAMi): a bind that finds the node locked fails at once; kube-scheduler puts the pod
  back with its backoff (1 s, doubling, at most 10 s: ``podInitialBackoffSeconds``/``podMaxBackoffSeconds``)
  and filters it again;
* ``--node-lock-wait 10`` (hami-py's default): the bind waits in line for the lock, woken by the Node watch.

The client plays kube-scheduler: one scheduling loop filters the next pod whose backoff has passed (serially,
as its scheduling cycle does) and hands the bind to a pool of threads (its asynchronous binding cycle). The
device plugin stand-in releases a node's lock ``allocate_ms`` after it sees the pod bound (PR #2066 measured
~22 ms from bind to Allocate on real hardware). Everything runs in this process, over HTTP on 127.0.0.1; the
figures are wall times, and the backoff is kube-scheduler's real one, so the ``wait 0`` rows take a while.

Run: ``python benchmarks/bench_burst.py [--pods 40] [--allocate-ms 20,200] [--json]``.
"""

from __future__ import annotations

import argparse
import heapq
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

#: kube-scheduler's defaults (KubeSchedulerConfiguration podInitialBackoffSeconds / podMaxBackoffSeconds)
BACKOFF_S = (1.0, 10.0)
NODES = 100


def burst(pods: int, allocate_ms: float, lock_wait_s: float, *, nodes: int = NODES,
          backoff_s: tuple[float, float] = BACKOFF_S, deadline_s: float = 600.0) -> dict[str, Any]:
    """Bind ``pods`` 1-GPU pods submitted at once; returns wall times and the binds refused on the way."""
    from benchkit import Service, logging_quiet, post, request_pod

    from hami_core.wire import keys

    svc = Service(nodes, 0.0, "asyncio", lock_wait_s=lock_wait_s)
    logging_quiet()
    names = [f"burst-{i:03d}" for i in range(pods)]
    objs = {n: svc.cluster.add_pod(request_pod("1gpu", n)) for n in names}
    timers: list[threading.Timer] = []

    def device_plugin(event: str, pod: dict[str, Any]) -> None:  # Allocate ``allocate_ms`` after the bind
        node = (pod.get("spec") or {}).get("nodeName")
        annos = (pod.get("metadata") or {}).get("annotations") or {}
        if event == "MODIFIED" and node and annos.get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING:
            timer = threading.Timer(allocate_ms / 1000, svc.release_lock, args=(node,))
            timers.append(timer)
            timer.start()

    svc.cluster.watch(lambda event, node: None, device_plugin)
    local = threading.local()
    lock = threading.Lock()
    ready: list[tuple[float, int, str]] = []  # kube-scheduler's queue: (eligible at, seq, pod)
    wake = threading.Condition(lock)
    attempts = dict.fromkeys(names, 0)
    bound_at: dict[str, float] = {}
    refused = 0
    seq = 0

    def conn() -> http.client.HTTPConnection:
        if not hasattr(local, "conn"):
            local.conn = svc.conn()
        return local.conn

    def requeue(name: str, now: float) -> None:
        nonlocal seq
        delay = min(backoff_s[0] * 2 ** (attempts[name] - 1), backoff_s[1])
        with lock:
            seq += 1
            heapq.heappush(ready, (now + delay, seq, name))
            wake.notify()

    def bind(name: str, node: str) -> None:
        nonlocal refused
        pod = objs[name]
        res = post(conn(), "/bind", json.dumps({"PodName": name, "PodNamespace": "bench",
                                                "PodUID": pod["metadata"]["uid"], "Node": node}).encode())
        now = time.perf_counter()
        if res.get("Error"):
            with lock:
                refused += 1
            requeue(name, now)
        else:
            with lock:
                bound_at[name] = now - t0
                wake.notify()

    t0 = time.perf_counter()
    for name in names:
        heapq.heappush(ready, (t0, 0, name))
    binder = ThreadPoolExecutor(max_workers=64)
    filter_conn = svc.conn()
    try:
        while True:
            with lock:
                while len(bound_at) < pods and (not ready or ready[0][0] > time.perf_counter()):
                    if time.perf_counter() - t0 > deadline_s:
                        raise TimeoutError(f"burst of {pods} not bound within {deadline_s:.0f} s")
                    timeout = ready[0][0] - time.perf_counter() if ready else 0.05
                    wake.wait(max(0.0, min(timeout, 0.05)))
                if len(bound_at) == pods:
                    break
                _, _, name = heapq.heappop(ready)
                attempts[name] += 1
            body = json.dumps({"Pod": objs[name], "Nodes": None, "NodeNames": svc.names}).encode()
            nodes_ok = post(filter_conn, "/filter", body).get("NodeNames") or []
            if not nodes_ok:
                requeue(name, time.perf_counter())
                continue
            binder.submit(bind, name, nodes_ok[0])
        wall = time.perf_counter() - t0
    finally:
        binder.shutdown(wait=True)
        for timer in timers:
            timer.cancel()
        svc.stop()
    times = sorted(bound_at.values())
    return {"pods": pods, "allocate_ms": allocate_ms, "lock_wait_s": lock_wait_s, "backoff_s": list(backoff_s),
            "bound": len(bound_at),
            "refused_binds": refused, "filters": sum(attempts.values()), "wall_s": wall,
            "p50_s": statistics.median(times), "last_s": times[-1],
            "nodes_used": len({(svc.cluster.get_pod("bench", n)["spec"] or {}).get("nodeName") for n in names})}


def section(pods: int, allocate_ms: list[float], waits: list[float],
            backoff_s: tuple[float, float] = BACKOFF_S) -> list[dict[str, Any]]:
    return [burst(pods, ms, wait, backoff_s=backoff_s) for ms in allocate_ms for wait in waits]


def table(rows: list[dict[str, Any]]) -> Table:
    first, most = rows[0]["backoff_s"] if rows else BACKOFF_S
    out = Table(title=f"7. A burst for one node: submit to all bound (binpack, kube-scheduler backoff "
                      f"{first:g}-{most:g} s, device plugin releasing the lock after Allocate)")
    for col in ("pods", "Allocate after bind", "--node-lock-wait", "bound", "binds refused", "filters",
                "half bound (s)", "all bound (s)", "nodes used"):
        out.add_column(col, justify="right")
    for r in rows:
        out.add_row(str(r["pods"]), f"{r['allocate_ms']:.0f} ms", f"{r['lock_wait_s']:g} s", str(r["bound"]),
                    str(r["refused_binds"]), str(r["filters"]), f"{r['p50_s']:.2f}", f"{r['last_s']:.2f}",
                    str(r["nodes_used"]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=40)
    parser.add_argument("--allocate-ms", default="20,200", help="device plugin delays, comma list (default 20,200)")
    parser.add_argument("--waits", default="0,10", help="--node-lock-wait values, comma list (default 0,10)")
    parser.add_argument("--backoff", default="1,10", help="kube-scheduler's initial,max backoff in s (default 1,10)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    first, most = (float(x) for x in args.backoff.split(","))
    rows = section(args.pods, [float(x) for x in args.allocate_ms.split(",")],
                   [float(x) for x in args.waits.split(",")], (first, most))
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        Console().print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
