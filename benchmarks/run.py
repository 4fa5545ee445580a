"""The hami-py benchmark suite (``make bench``): one rich table per section, or ``--json``.

Sections (``--sections 1,2,...``):

1. ``Engine.schedule()`` for one pod (1 GPU, 2 GPUs, a 2-container pod) on N nodes x 8 GPUs at several usage
   levels, p50/p99 with ``limit=1`` (best-first, as the extender calls it) plus the full evaluation of the
   1-GPU pod;
2. the same 1-GPU pod through the HTTP extender (``/filter`` + ``/bind`` over 127.0.0.1 against the
   in-memory cluster), next to the JSON floor (decode the ExtenderArgs body, encode the reply), the
   transport floor (a ``GET /healthz`` round trip on the same connection) and two reference servers that
   schedule nothing (``null_extender.py``): the same server with a null extender, and the barest Python server
   with a raw-socket client;
3. sustained throughput: pods filtered and bound through HTTP on 1,000 nodes, 1 and 4 client threads; the client
   runs in a separate process (as kube-scheduler does), the device plugin's lock release in the scheduler's; the
   same client against the null extender and the bare server gives the ceiling any handler work leaves;
4. memory: RSS of an engine holding N nodes x 8 GPUs and M booked pods (in a clean subprocess);
5. ``hami simulate`` on the openb default trace, one seed, binpack (wall time of a subprocess);
6. the ``fgd`` policy against binpack, ``schedule(limit=1)`` on 1,000 and 5,000 nodes with the same pod again
   and again and with a stream of pods of many shapes, each reserved (``bench_fgd.py``);
7. a burst of pods for one node, from submission to all bound, with kube-scheduler's backoff and a device plugin
   releasing the node lock after Allocate, with ``--node-lock-wait 0`` (HAMi) and 10 (``bench_burst.py``);
8. ``--write-allocation filter`` against ``bind``: kube-scheduler's serial filter loop through HTTP when each API
   call costs a modeled round trip (``bench_write_allocation.py``);
9. the HTTP servers under hostile load: ``/filter`` and ``/webhook`` latency alone, under 16 clients posting 1 MiB
   AdmissionReviews and under 16 ``/metrics`` scrapers at 500 nodes x 8 GPUs (``bench_servers.py``);
10. ``hami simulate`` of the openb default trace (seed 42) under binpack and fgd, wall and CPU seconds and their
    ratio (issue 32: fgd within 2x; ``bench_sim_policies.py``; ``--sections 10`` runs it alone).

Section 1 reports wall time and the thread's CPU time (``time.thread_time``): on a shared machine the wall
p99 includes time the OS gave to other processes, the CPU p99 does not. ``meta`` records the load average
before and after every section. No figure here is asserted anywhere; ``docs/performance.md`` records a run
against the targets of issue 11.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The benchmark modules are found beside this script (sys.path[0] when it runs); they share benchkit, never run.
import bench_burst
import bench_fgd
import bench_servers
import bench_sim_policies
import bench_write_allocation
from bench_schedule import GPUS_PER_NODE
from benchkit import Service, build_engine, node_obj, post, request_pod, running_pod
from null_extender import BareClient, BareServer, start_null
from rich.console import Console
from rich.table import Table

from hami_core.engine.facade import Engine

ROOT = Path(__file__).resolve().parent.parent

console = Console(stderr=True)

FULL = {"nodes": [1000, 5000, 10000], "usage": [0.0, 0.5, 0.9], "pods": 1000, "full_eval": 50, "http_pods": 300,
        "tp_nodes": 1000, "tp_pods": 10000, "mem_nodes": 10000, "mem_pods": 50000, "fgd_nodes": [1000, 5000],
        "fgd_pods": 300, "servers": ["asyncio", "uvicorn"], "burst_pods": 40, "burst_allocate_ms": [20.0],
        "fw_nodes": 1000, "fw_pods": 1000, "fw_rtt_ms": [2.0], "srv_seconds": 10.0}
QUICK = {"nodes": [200, 1000], "usage": [0.0, 0.5], "pods": 100, "full_eval": 10, "http_pods": 50,
         "tp_nodes": 1000, "tp_pods": 1000, "mem_nodes": 1000, "mem_pods": 5000, "fgd_nodes": [200],
         "fgd_pods": 30, "servers": ["asyncio", "uvicorn"], "burst_pods": 8, "burst_allocate_ms": [20.0],
         "fw_nodes": 200, "fw_pods": 100, "fw_rtt_ms": [2.0], "srv_seconds": 2.0}


# --------------------------------------------------------------------------------------------- timing

def pct(samples: list[float], prefix: str = "") -> dict[str, float]:
    s = sorted(samples)
    return {f"{prefix}p50_ms": statistics.median(s), f"{prefix}p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))],
            f"{prefix}mean_ms": statistics.fmean(s)}


def timed(fn: Any, iterations: int) -> dict[str, float]:
    """Wall-clock percentiles and (``cpu_`` keys) the calling thread's CPU time percentiles."""
    fn()  # warm
    samples, cpu = [], []
    for _ in range(iterations):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        t1, c1 = time.perf_counter(), time.thread_time()
        samples.append((t1 - t0) * 1000)
        cpu.append((c1 - c0) * 1000)
    return {**pct(samples), **pct(cpu, "cpu_")}


def loadavg() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


# --------------------------------------------------------------------------------------------- section 1

def section_schedule(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for n in cfg["nodes"]:
        for usage in cfg["usage"]:
            t0 = time.perf_counter()
            with console.status(f"[1] building {n} nodes x {GPUS_PER_NODE} GPUs at {usage:.0%}"):
                engine = build_engine(n, usage)
            build_s = time.perf_counter() - t0
            gc.freeze()  # as a long-running scheduler after its initial sync
            row: dict[str, Any] = {"nodes": n, "usage": usage, "build_s": build_s}
            with console.status(f"[1] schedule() on {n} nodes at {usage:.0%}"):
                for kind in ("1gpu", "2gpu", "2ctr"):
                    p = request_pod(kind)

                    def one(p: dict[str, Any] = p, e: Engine = engine) -> None:
                        assert e.schedule(p, limit=1).node is not None

                    row[kind] = timed(one, cfg["pods"])
                p = request_pod("1gpu")

                def full(p: dict[str, Any] = p, e: Engine = engine) -> None:
                    assert e.schedule(p).node is not None

                row["1gpu_full"] = timed(full, cfg["full_eval"])
            gc.unfreeze()
            rows.append(row)
            del engine
            gc.collect()
    return rows


def table_schedule(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> Table:
    t = Table(title=f"1. Engine.schedule(limit=1), {cfg['pods']} pods per cell; full evaluation over "
                    f"{cfg['full_eval']} (ms, p50 / p99 wall; CPU p99)")
    for col in ("nodes", "usage", "1 GPU", "2 GPUs", "2 containers", "1 GPU full eval", "build s"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["nodes"]), f"{r['usage']:.0%}",
                  *(f"{r[k]['p50_ms']:.2f} / {r[k]['p99_ms']:.2f}; {r[k]['cpu_p99_ms']:.2f}"
                    for k in ("1gpu", "2gpu", "2ctr", "1gpu_full")),
                  f"{r['build_s']:.1f}")
    return t


# --------------------------------------------------------------------------------------------- section 2

def section_http(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    references: dict[tuple[int, str], dict[str, Any]] = {}  # the reference servers do not depend on usage
    for n, usage, server in itertools.product(cfg["nodes"], cfg["usage"], cfg["servers"]):
            with console.status(f"[2] starting the {server} extender on {n} nodes at {usage:.0%}"):
                svc = Service(n, usage, server)
            gc.freeze()
            try:
                with console.status(f"[2] /filter + /bind on {n} nodes at {usage:.0%} ({server})"):
                    row = {"nodes": n, "usage": usage, "server": server, **http_cell(svc, cfg["http_pods"])}
            finally:
                gc.unfreeze()
                svc.stop()
                del svc
                gc.collect()
            if (n, server) not in references:
                with console.status(f"[2] reference servers that schedule nothing, {n} node names ({server})"):
                    references[n, server] = reference_cell(n, server, cfg["http_pods"])
            row.update(references[n, server])
            floor_p99 = row["floor"]["p99_ms"]
            for key in ("null_filter", "bare_filter"):
                row[f"{key}_p99_over_floor_p99"] = row[key]["p99_ms"] / floor_p99 if floor_p99 else None
            rows.append(row)
    return rows


def reference_cell(nodes: int, server: str, iterations: int) -> dict[str, Any]:
    """``/filter`` of the same 1-GPU pod and ``nodes`` node names against the null extender behind ``server``
    (an ``http.client`` connection, as :func:`http_cell`) and against the bare server (raw-socket client)."""
    names = [f"node-{n:05d}" for n in range(nodes)]
    bodies = [json.dumps({"Pod": request_pod("1gpu", f"ref-{i}"), "Nodes": None, "NodeNames": names}).encode()
              for i in range(iterations + 1)]
    null = start_null(server)
    try:
        conn = http.client.HTTPConnection(*null.address[:2], timeout=60)
        null_ms = _timed_posts(lambda body: post(conn, "/filter", body), bodies)
        conn.close()
    finally:
        null.shutdown()
    bare = BareServer()
    try:
        client = BareClient(*bare.address)
        bare_ms = _timed_posts(lambda body: client.post("/filter", body), bodies)
        client.close()
    finally:
        bare.shutdown()
    return {"null_filter": pct(null_ms), "bare_filter": pct(bare_ms)}


def _timed_posts(send: Callable[[bytes], Any], bodies: list[bytes]) -> list[float]:
    """Wall ms of ``send(body)`` for each body but the first (a warm-up)."""
    out = []
    for i, body in enumerate(bodies):
        t0 = time.perf_counter()
        result = send(body)
        if i:
            out.append((time.perf_counter() - t0) * 1000)
        if not result.get("NodeNames"):
            raise RuntimeError(f"reference server answered {result!r}")
    return out


def http_cell(svc: Service, iterations: int) -> dict[str, Any]:
    conn = svc.conn()
    filt, bind, floor, trip, body_bytes = [], [], [], [], 0
    for i in range(iterations + 1):  # the first round warms up
        pod = request_pod("1gpu", f"bench-{i}")
        svc.cluster.add_pod(pod)
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": svc.names}).encode()
        t0 = time.perf_counter()
        result = post(conn, "/filter", body)
        t1 = time.perf_counter()
        [node] = result["NodeNames"]
        res = post(conn, "/bind", json.dumps({"PodName": pod["metadata"]["name"], "PodNamespace": "bench",
                                              "PodUID": pod["metadata"]["uid"], "Node": node}).encode())
        t2 = time.perf_counter()
        if res.get("Error"):
            raise RuntimeError(f"bind: {res['Error']}")
        # The floor: what any Python extender pays to read this body and write this reply.
        t3 = time.perf_counter()
        json.loads(body)
        json.dumps(result).encode()
        t4 = time.perf_counter()
        # The transport floor: one request/response on the same keep-alive connection, no body, no work.
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        t5 = time.perf_counter()
        svc.release_lock(node)
        svc.cluster.delete_pod("bench", pod["metadata"]["name"])  # keep the usage level constant
        if i:
            filt.append((t1 - t0) * 1000)
            bind.append((t2 - t1) * 1000)
            floor.append((t4 - t3) * 1000)
            trip.append((t5 - t4) * 1000)
            body_bytes = len(body)
    conn.close()
    f, fl = pct(filt), pct(floor)
    return {"filter": f, "bind": pct(bind), "floor": fl, "roundtrip": pct(trip), "body_bytes": body_bytes,
            "filter_p99_over_floor_p99": f["p99_ms"] / fl["p99_ms"] if fl["p99_ms"] else None}


def table_http(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> Table:
    t = Table(title=f"2. HTTP extender, 1-GPU pod, {cfg['http_pods']} pods per cell (ms, p50 / p99); null and bare: "
                    "reference servers that schedule nothing")
    for col in ("nodes", "usage", "server", "/filter", "/bind", "JSON floor", "GET /healthz", "null /filter",
                "bare /filter", "body KiB", "p99 / floor p99: filter · null · bare"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["nodes"]), f"{r['usage']:.0%}", r.get("server", "threaded"),
                  *(f"{r[k]['p50_ms']:.2f} / {r[k]['p99_ms']:.2f}"
                    for k in ("filter", "bind", "floor", "roundtrip", "null_filter", "bare_filter")),
                  f"{r['body_bytes'] / 1024:.0f}",
                  " · ".join(f"{r[k]:.1f}x" for k in ("filter_p99_over_floor_p99", "null_filter_p99_over_floor_p99",
                                                     "bare_filter_p99_over_floor_p99")))
    return t


# --------------------------------------------------------------------------------------------- section 3

def section_throughput(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Filter+bind N pods; the client (kube-scheduler's part) runs in its own process, as in a cluster. Then the
    same client against the null extender behind each server and against the bare server: the pods a second
    that HTTP alone allows here."""
    rows = []
    count, nodes = cfg["tp_pods"], cfg["tp_nodes"]
    for server, threads in itertools.product(cfg["servers"], (1, 4)):
        with console.status(f"[3] {count} pods through HTTP on {nodes} nodes, {threads} thread(s), {server}"):
            svc = Service(nodes, 0.0, server)
            for i in range(count):
                svc.cluster.add_pod(request_pod("1gpu", f"tp-{i}"))
            svc.release_locks_when_bound()
            gc.freeze()
            try:
                rows.append({"extender": "hami", "server": server, "threads": threads, "nodes": nodes,
                             **_tp_run(svc.host, svc.port, nodes, count, threads)})
            finally:
                gc.unfreeze()
                svc.stop()
                del svc
                gc.collect()
    for server, threads in itertools.product([*cfg["servers"], "bare"], (1, 4)):
        with console.status(f"[3] {count} pods, a server that schedules nothing ({server}), {threads} thread(s)"):
            ref = BareServer() if server == "bare" else start_null(server)
            try:
                rows.append({"extender": "bare" if server == "bare" else "null", "server": server,
                             "threads": threads, "nodes": nodes, **_tp_run(*ref.address[:2], nodes, count, threads)})
            finally:
                ref.shutdown()
    return rows


def _tp_run(host: str, port: int, nodes: int, count: int, threads: int) -> dict[str, Any]:
    """The throughput client in a subprocess against ``host:port``: its figures plus this process's CPU."""
    cpu0 = time.process_time()
    out = subprocess.run([sys.executable, __file__, "--tp-client", f"{host},{port},{nodes},{count},{threads}"],
                         check=True, capture_output=True, text=True)
    server_cpu = time.process_time() - cpu0
    return {**json.loads(out.stdout), "server_cpu_s": server_cpu,
            "server_cpu_ms_per_pod": 1000 * server_cpu / max(1, count)}


def tp_client(host: str, port: int, nodes: int, count: int, threads: int) -> dict[str, Any]:
    """The client side of section 3 (run in a subprocess): ``threads`` keep-alive connections."""
    names = [f"node-{n:05d}" for n in range(nodes)]
    pods = [request_pod("1gpu", f"tp-{i}") for i in range(count)]
    queue = iter(pods)
    qlock = threading.Lock()
    stats = {"bound": 0, "retries": 0, "failed": 0}

    def worker() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        while True:
            with qlock:
                pod = next(queue, None)
            if pod is None:
                break
            name = pod["metadata"]["name"]
            for _ in range(50):  # a lost node-lock race is retried like kube-scheduler's requeue
                body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
                result = post(conn, "/filter", body)
                if not result.get("NodeNames"):
                    with qlock:
                        stats["failed"] += 1
                    break
                node = result["NodeNames"][0]
                res = post(conn, "/bind", json.dumps({"PodName": name, "PodNamespace": "bench",
                                                      "PodUID": pod["metadata"]["uid"], "Node": node}).encode())
                if not res.get("Error"):
                    with qlock:
                        stats["bound"] += 1
                    break
                with qlock:
                    stats["retries"] += 1
            else:
                with qlock:
                    stats["failed"] += 1
        conn.close()

    t0 = time.perf_counter()
    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    return {"pods": count, **stats, "wall_s": wall, "pods_per_s": stats["bound"] / wall}


def table_throughput(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="3. Sustained /filter + /bind through HTTP (1-GPU pods, empty cluster); null and bare: "
                    "reference servers that schedule nothing")
    for col in ("nodes", "extender", "server", "client threads", "pods", "bound", "lock retries", "failed",
                "wall s", "pods/s", "server CPU ms/pod"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["nodes"]), r.get("extender", "hami"), r.get("server", "threaded"), str(r["threads"]),
                  str(r["pods"]), str(r["bound"]), str(r["retries"]), str(r["failed"]), f"{r['wall_s']:.1f}",
                  f"{r['pods_per_s']:.0f}", f"{r['server_cpu_ms_per_pod']:.2f}")
    return t


# --------------------------------------------------------------------------------------------- section 4

def rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB from /proc/self/status, falling back to getrusage's peak."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
        return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return peak, peak


def memory_child(nodes: int, pods: int) -> dict[str, Any]:
    gc.collect()
    base, _ = rss_mb()
    engine = Engine({"nvidia": {}})
    for n in range(nodes):
        engine.upsert_node(node_obj(n))
    for i in range(pods):  # spread round-robin: pod i on node i % nodes, GPU (i // nodes) % 8
        n, g = i % nodes, (i // nodes) % GPUS_PER_NODE
        engine.upsert_pod(running_pod(f"run-{i}", n, g, 1000, 1))
    gc.collect()
    rss, hwm = rss_mb()
    assert engine is not None
    return {"nodes": nodes, "gpus": nodes * GPUS_PER_NODE, "pods": pods, "baseline_rss_mb": base, "rss_mb": rss,
            "engine_mb": rss - base, "peak_rss_mb": hwm}


def section_memory(cfg: dict[str, Any]) -> dict[str, Any]:
    with console.status(f"[4] RSS of {cfg['mem_nodes']} nodes and {cfg['mem_pods']} pods (subprocess)"):
        out = subprocess.run([sys.executable, __file__, "--memory-child", f"{cfg['mem_nodes']},{cfg['mem_pods']}"],
                             check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def table_memory(r: dict[str, Any]) -> Table:
    t = Table(title="4. Memory of one engine (clean subprocess, after gc)")
    for col in ("nodes", "GPUs", "pods", "RSS MiB", "baseline MiB (imports)", "engine MiB", "peak RSS MiB"):
        t.add_column(col, justify="right")
    t.add_row(str(r["nodes"]), str(r["gpus"]), str(r["pods"]), f"{r['rss_mb']:.0f}", f"{r['baseline_rss_mb']:.0f}",
              f"{r['engine_mb']:.0f}", f"{r['peak_rss_mb']:.0f}")
    return t


# --------------------------------------------------------------------------------------------- section 5

def traces_dir() -> Path | None:
    for base in (ROOT.parent / "shared", ROOT / "shared"):
        d = base / "traces" / "openb"
        if (d / "openb_node_list_gpu_node.csv").exists() and (d / "openb_pod_list_default.csv").exists():
            return d
    return None


def section_simulate(cfg: dict[str, Any]) -> dict[str, Any]:
    d = traces_dir()
    if d is None:
        return {"skipped": "no openb traces under ../shared/traces/openb"}
    hami = Path(sys.executable).with_name("hami")
    cmd = [str(hami) if hami.exists() else "hami", "simulate", "--trace-nodes", str(d / "openb_node_list_gpu_node.csv"),
           "--trace-pods", str(d / "openb_pod_list_default.csv"), "--policy", "binpack", "--seed", "42", "--json",
           "--no-progress"]
    with console.status("[5] hami simulate on the openb default trace"):
        t0 = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    row: dict[str, Any] = {"trace": "openb_pod_list_default", "policy": "binpack", "seed": 42, "wall_s": wall,
                           "rc": out.returncode}
    if out.returncode != 0:
        row["stderr"] = out.stderr[-500:]
    return row


def table_simulate(r: dict[str, Any]) -> Table:
    t = Table(title="5. hami simulate (subprocess wall time, includes interpreter start)")
    if "skipped" in r:
        t.add_column("skipped")
        t.add_row(r["skipped"])
        return t
    for col in ("trace", "policy", "seed", "exit", "wall s"):
        t.add_column(col, justify="right")
    t.add_row(r["trace"], r["policy"], str(r["seed"]), str(r["rc"]), f"{r['wall_s']:.1f}")
    return t


# --------------------------------------------------------------------------------------------- main

def section_fgd(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The fgd policy against binpack (issue 13: within 3x at 5,000 nodes); see bench_fgd.py."""
    return bench_fgd.section(cfg["fgd_nodes"], 0.5, cfg["fgd_pods"], progress=False)


def section_burst(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """A burst for one node with and without waiting for the node lock; see bench_burst.py."""
    with console.status(f"[7] a burst of {cfg['burst_pods']} pods for one node (the wait 0 row takes minutes)"):
        return bench_burst.section(cfg["burst_pods"], cfg["burst_allocate_ms"], [0.0, 10.0])


def section_write_allocation(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """--write-allocation filter against bind with modeled API round trips; see bench_write_allocation.py."""
    with console.status(f"[8] {cfg['fw_pods']} pods through the filter loop, allocation written at filter and bind"):
        return bench_write_allocation.section(cfg["fw_nodes"], cfg["fw_pods"], cfg["fw_rtt_ms"], ("binpack", "spread"))


def section_sim_policies(cfg: dict[str, Any]) -> dict[str, Any]:
    """One fgd and one binpack run of the openb default trace (issue 32: fgd within 2x); see bench_sim_policies.py."""
    return bench_sim_policies.section(["binpack", "fgd"], 42)


def section_servers(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The servers under bulk admission reviews and metrics scrapers; see bench_servers.py."""
    with console.status(f"[9] /filter and /webhook under load, {', '.join(cfg['servers'])}"):
        return bench_servers.section(cfg["servers"], cfg["srv_seconds"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes for a fast smoke run")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument("--sections", default="1,2,3,4,5,6,7,8,9,10",
                        help="comma list of sections to run (default all)")
    parser.add_argument("--nodes", help="override the cluster sizes of sections 1-2 (comma list)")
    parser.add_argument("--usage", help="override the usage levels of sections 1-2 (comma list of fractions)")
    parser.add_argument("--pods", type=int, help="override the pods per cell of sections 1-2 and the full-evaluation "
                                                 "count, and (x10) the throughput pods")
    parser.add_argument("--tp-nodes", type=int, help="override the nodes of section 3")
    parser.add_argument("--tp-pods", type=int, help="override the pods of section 3")
    parser.add_argument("--http-server", help="the servers of sections 2-3, comma list of asyncio, uvicorn "
                                              "(default both)")
    parser.add_argument("--mem", help="override section 4 as NODES,PODS")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    parser.add_argument("--tp-client", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tp_client:
        host, port, nodes, count, threads = args.tp_client.split(",")
        json.dump(tp_client(host, int(port), int(nodes), int(count), int(threads)), sys.stdout)
        return 0
    if args.memory_child:
        nodes, pods = (int(x) for x in args.memory_child.split(","))
        json.dump(memory_child(nodes, pods), sys.stdout)
        return 0

    cfg = dict(QUICK if args.quick else FULL)
    if args.nodes:
        cfg["nodes"] = [int(x) for x in args.nodes.split(",")]
    if args.usage:
        cfg["usage"] = [float(x) for x in args.usage.split(",")]
    if args.pods:
        cfg.update(pods=args.pods, full_eval=min(args.pods, cfg["full_eval"]), http_pods=args.pods,
                   tp_pods=10 * args.pods)
    if args.tp_nodes:
        cfg["tp_nodes"] = args.tp_nodes
    if args.tp_pods:
        cfg["tp_pods"] = args.tp_pods
    if args.http_server:
        cfg["servers"] = [x.strip() for x in args.http_server.split(",")]
    if args.mem:
        cfg["mem_nodes"], cfg["mem_pods"] = (int(x) for x in args.mem.split(","))
    wanted = {int(s) for s in args.sections.split(",") if s.strip()}

    doc: dict[str, Any] = {"meta": {"quick": args.quick, "python": sys.version.split()[0], "cpus": os.cpu_count(),
                                    "config": cfg}, "sections": {}}
    out = Console(width=max(Console().width, 160))
    started = time.perf_counter()
    runs = ((1, "schedule", section_schedule, lambda r: table_schedule(r, cfg)),
            (2, "http", section_http, lambda r: table_http(r, cfg)),
            (3, "throughput", section_throughput, table_throughput),
            (4, "memory", section_memory, table_memory),
            (5, "simulate", section_simulate, table_simulate),
            (6, "fgd", section_fgd, bench_fgd.table),
            (7, "burst", section_burst, bench_burst.table),
            (8, "write_allocation", section_write_allocation, bench_write_allocation.table),
            (9, "servers", section_servers, bench_servers.table),
            (10, "sim_policies", section_sim_policies, bench_sim_policies.table))
    for number, key, run, render in runs:
        if number not in wanted:
            continue
        t0, load0 = time.perf_counter(), loadavg()
        result = run(cfg)
        doc["sections"][key] = result
        doc["meta"][f"{key}_s"] = time.perf_counter() - t0
        doc["meta"][f"{key}_loadavg"] = {"before": load0, "after": loadavg()}
        if not args.json:
            out.print(render(result))
    doc["meta"]["total_s"] = time.perf_counter() - started
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        print()
    else:
        console.print(f"total {doc['meta']['total_s']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
