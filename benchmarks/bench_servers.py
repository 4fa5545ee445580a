"""The scheduler's HTTP servers under hostile load (issue 26; ``make bench`` section 9, or run this file).

Each scenario starts the real scheduler service (``Scheduler`` over a ``MemoryCluster``, metrics on) behind one
``--http-server`` kind and measures what kube-scheduler and kube-apiserver see: the latency of ``/filter`` (a
1-GPU pod naming every node) and of a small ``/webhook`` AdmissionReview, sampled one at a time from this process
over a keep-alive connection, while load clients in their own processes (as on a cluster: other pods) hammer the
server:

* ``alone``: no load, the reference;
* ``bulk``: 16 clients each posting 1 MiB AdmissionReviews to ``/webhook`` in a loop (a tenant pod reaching the
  port, or a misbehaving caller);
* ``scrapers``: 16 clients each scraping ``/metrics`` in a loop, at 500 nodes x 8 GPUs with a running pod on every
  GPU (the scheduler's metrics server shares its process and its GIL with ``/filter``).

The load clients count the answers they get by status (a shed request is a 503, answered from the headers
alone). No figure is asserted anywhere; docs/performance.md (round 8) records a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import json
import statistics
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from typing import Any

#: kube-apiserver's default webhook timeout (HAMi registers 10 s): a review slower than this is lost.
WEBHOOK_TIMEOUT_S = 10.0
BULK_BYTES = 1 << 20


def _service(server: str, nodes: int, usage: float, **options: Any) -> Any:
    from benchkit import logging_quiet, node_obj, usage_pods

    from hami_core.cluster.memory import MemoryCluster
    from hami_core.engine.facade import Engine
    from hami_core.scheduler.app import Options, Scheduler

    cluster = MemoryCluster(nodes=[node_obj(n) for n in range(nodes)], pods=usage_pods(nodes, usage))
    known = {f.name for f in dataclasses.fields(Options)}
    wanted = {"host": "127.0.0.1", "port": 0, "metrics_host": "127.0.0.1", "metrics_port": 0, "resync_s": 3600.0,
              "http_server": server, **options}
    svc = Scheduler(Engine({"nvidia": {}}), cluster, Options(**{k: v for k, v in wanted.items() if k in known}))
    logging_quiet()
    svc.start()
    return svc, cluster


def _review(name: str, pad: int = 0) -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "bench",
                                                           "annotations": {"pad": "x" * pad}},
           "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": name, "operation": "CREATE", "object": pod}}).encode()


def _bulk_review() -> bytes:
    body = _review("bulk", BULK_BYTES)
    return _review("bulk", BULK_BYTES - (len(body) - BULK_BYTES) - 1)  # just under the 1 MiB body limit


def load_client(kind: str, url: str, seconds: float) -> dict[str, Any]:
    """One load process: ``bulk`` posts 1 MiB reviews to ``url``, ``scrape`` GETs it, until ``seconds`` pass."""
    parts = urllib.parse.urlsplit(url)
    body = _bulk_review() if kind == "bulk" else b""
    statuses: Counter[str] = Counter()
    received = 0
    end = time.monotonic() + seconds
    conn: http.client.HTTPConnection | None = None
    while time.monotonic() < end:
        try:
            if conn is None:
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            if kind == "bulk":
                conn.request("POST", parts.path, body=body, headers={"Content-Type": "application/json"})
            else:
                conn.request("GET", parts.path)
            resp = conn.getresponse()
            received += len(resp.read())
            statuses[str(resp.status)] += 1
            if resp.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as exc:
            statuses[type(exc).__name__] += 1
            if conn is not None:
                conn.close()
            conn = None
            time.sleep(0.01)
    return {"statuses": dict(statuses), "bytes": received}


def _pct(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    s = sorted(samples)
    return {"n": len(s), "p50_ms": statistics.median(s), "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))],
            "max_ms": s[-1]}


def _probe(svc: Any, cluster: Any, names: list[str], seconds: float) -> dict[str, Any]:
    """Alternate a /filter and a small /webhook review for ``seconds`` (at least 5 of each, at most 120 s)."""
    from benchkit import request_pod

    host, port = svc.server.address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=120)
    filt: list[float] = []
    review: list[float] = []
    errors: Counter[str] = Counter()
    start = time.monotonic()
    i = 0
    while (time.monotonic() - start < seconds or len(filt) < 5) and time.monotonic() - start < 120:
        pod = request_pod("1gpu", f"probe-{i}")
        cluster.add_pod(pod)
        for path, body, out in (
                ("/filter", json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode(), filt),
                ("/webhook", _review(f"probe-{i}"), review)):
            t0 = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                if resp.status == 200:
                    out.append((time.perf_counter() - t0) * 1000)
                else:
                    errors[f"{path} {resp.status}"] += 1
                if resp.will_close:
                    conn.close()
            except (OSError, http.client.HTTPException) as exc:
                errors[f"{path} {type(exc).__name__}"] += 1
                conn.close()
        cluster.delete_pod("bench", pod["metadata"]["name"])
        i += 1
    conn.close()
    late = sum(1 for ms in review if ms > WEBHOOK_TIMEOUT_S * 1000)
    return {"filter": _pct(filt), "webhook": _pct(review), "webhook_over_10s": late, "errors": dict(errors)}


def scenario(server: str, load: str, seconds: float = 10.0, clients: int = 16, nodes: int | None = None,
             **options: Any) -> dict[str, Any]:
    """One row: ``load`` is ``alone``, ``bulk`` or ``scrapers``."""
    nodes = nodes or (500 if load == "scrapers" else 1000)
    usage = 0.5 if load == "scrapers" else 0.0
    svc, cluster = _service(server, nodes, usage, **options)
    names = [f"node-{n:05d}" for n in range(nodes)]
    procs: list[subprocess.Popen[str]] = []
    try:
        if load != "alone":
            url = (svc.metrics_url if load == "scrapers" else svc.server.url + "/webhook")
            kind = "scrape" if load == "scrapers" else "bulk"
            procs = [subprocess.Popen([sys.executable, __file__, "--load", kind, url, str(seconds)],
                                      stdout=subprocess.PIPE, text=True) for _ in range(clients)]
            time.sleep(min(2.0, seconds / 4))  # let the load build up
        row: dict[str, Any] = {"server": server, "load": load, "nodes": nodes, "clients": clients if procs else 0,
                               **_probe(svc, cluster, names, seconds)}
        totals: Counter[str] = Counter()
        received = 0
        for proc in procs:
            out, _ = proc.communicate(timeout=seconds + 180)
            result = json.loads(out)
            totals.update(result["statuses"])
            received += result["bytes"]
        procs = []
        row["load_statuses"] = dict(totals)
        row["load_mib"] = received / (1 << 20)
        return row
    finally:
        for proc in procs:
            proc.kill()
        svc.stop()


def section(servers: list[str], seconds: float, loads: tuple[str, ...] = ("alone", "bulk", "scrapers"),
            **options: Any) -> list[dict[str, Any]]:
    return [scenario(server, load, seconds, **options) for load in loads for server in servers]


def table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title="9. The HTTP servers under load (ms, p50 / p99 / max of one request at a time; load clients "
                    "in their own processes)")
    for col in ("server", "load", "nodes", "/filter", "/webhook (small)", "reviews > 10 s", "probe errors",
                "load answers"):
        t.add_column(col, justify="right")

    def ms(p: dict[str, Any]) -> str:
        return f"{p['p50_ms']:.1f} / {p['p99_ms']:.1f} / {p['max_ms']:.0f} (n={p['n']})" if p.get("n") else "none"

    for r in rows:
        answers = ", ".join(f"{k}: {v}" for k, v in sorted(r.get("load_statuses", {}).items())) or "-"
        t.add_row(r["server"], r["load"] + (f" x{r['clients']}" if r["clients"] else ""), str(r["nodes"]),
                  ms(r["filter"]), ms(r["webhook"]), str(r["webhook_over_10s"]),
                  ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0", answers)
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="asyncio,uvicorn", help="comma list of --http-server kinds")
    parser.add_argument("--loads", default="alone,bulk,scrapers", help="comma list of alone, bulk, scrapers")
    parser.add_argument("--seconds", type=float, default=10.0, help="probe time per scenario (default: 10)")
    parser.add_argument("--clients", type=int, default=16, help="load clients per scenario (default: 16)")
    parser.add_argument("--nodes", type=int, help="nodes (default: 1,000; 500 with scrapers)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--load", nargs=3, metavar=("KIND", "URL", "SECONDS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load:
        json.dump(load_client(args.load[0], args.load[1], float(args.load[2])), sys.stdout)
        return 0
    rows = section(args.servers.split(","), args.seconds, tuple(args.loads.split(",")), clients=args.clients,
                   nodes=args.nodes)
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
    else:
        from rich.console import Console

        Console(width=200).print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
