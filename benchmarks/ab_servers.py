"""``/filter`` on each ``--http-server`` kind, side by side: which server is faster, by more than noise?

On a shared machine a figure taken a minute after another can differ by more than the two servers do, so this
alternates: round after round, the same number of ``/filter`` requests (a 1-GPU pod naming N nodes, over one
keep-alive connection) go to each server in turn, and each round's p50 of one server is divided by the other's.
The median of those paired ratios, with its spread (quartiles), says which is faster and whether the gap is
larger than the round-to-round noise. Both the real extender (over a MemoryCluster) and the null extender (which
schedules nothing: the server alone) are measured. ``make bench`` runs it as part of section 9's notes; run it
alone with ``.venv/bin/python benchmarks/ab_servers.py --rounds 30``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import time
from typing import Any

from benchkit import Service, request_pod
from null_extender import start_null


def _p50_filter(conn: http.client.HTTPConnection, bodies: list[bytes], before: Any = None) -> float:
    samples = []
    for i, body in enumerate(bodies):
        if before is not None:
            before(i)
        t0 = time.perf_counter()
        conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        samples.append((time.perf_counter() - t0) * 1000)
        if resp.status != 200 or not json.loads(data).get("NodeNames"):
            raise RuntimeError(f"/filter answered {resp.status}: {data[:200]!r}")
    return statistics.median(samples)


def compare(kinds: list[str], nodes: int, rounds: int, per_round: int) -> dict[str, Any]:
    names = [f"node-{n:05d}" for n in range(nodes)]
    out: dict[str, Any] = {"nodes": nodes, "rounds": rounds, "per_round": per_round, "kinds": kinds}
    for extender in ("null", "hami"):
        servers: dict[str, Any] = {}
        conns: dict[str, http.client.HTTPConnection] = {}
        try:
            for kind in kinds:
                if extender == "null":
                    servers[kind] = start_null(kind)
                    host, port = servers[kind].address[:2]
                else:
                    servers[kind] = Service(nodes, 0.0, kind)
                    host, port = servers[kind].host, servers[kind].port
                conns[kind] = http.client.HTTPConnection(host, port, timeout=60)
            p50s: dict[str, list[float]] = {kind: [] for kind in kinds}
            for r in range(rounds + 1):  # round 0 warms up
                order = kinds if r % 2 else list(reversed(kinds))
                for kind in order:
                    batch = [request_pod("1gpu", f"ab-{kind}-{r}-{i}") for i in range(per_round)]
                    bodies = [json.dumps({"Pod": p, "Nodes": None, "NodeNames": names}).encode() for p in batch]
                    before = None
                    if extender == "hami":
                        svc = servers[kind]

                        def before(i: int, svc: Any = svc, batch: list[dict[str, Any]] = batch) -> None:
                            if i:
                                svc.cluster.delete_pod("bench", batch[i - 1]["metadata"]["name"])
                            svc.cluster.add_pod(batch[i])

                    p50 = _p50_filter(conns[kind], bodies, before)
                    if extender == "hami":
                        servers[kind].cluster.delete_pod("bench", batch[-1]["metadata"]["name"])
                    if r:
                        p50s[kind].append(p50)
            base = kinds[0]
            row: dict[str, Any] = {kind: {"p50_ms": statistics.median(v), "rounds": v} for kind, v in p50s.items()}
            for kind in kinds[1:]:
                ratios = sorted(a / b for a, b in zip(p50s[kind], p50s[base], strict=True))
                q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
                row[f"{kind}/{base}"] = {"median": statistics.median(ratios), "q1": q[0], "q3": q[2]}
            out[extender] = row
        finally:
            for conn in conns.values():
                conn.close()
            for server in servers.values():
                (server.stop if extender == "hami" else server.shutdown)()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", default="asyncio,uvicorn")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per-round", type=int, default=100)
    args = parser.parse_args(argv)
    result = compare(args.servers.split(","), args.nodes, args.rounds, args.per_round)
    for extender in ("null", "hami"):
        row = result[extender]
        kinds = result["kinds"]
        parts = [f"{kind} p50 {row[kind]['p50_ms']:.3f} ms" for kind in kinds]
        for kind in kinds[1:]:
            ratio = row[f"{kind}/{kinds[0]}"]
            parts.append(f"{kind}/{kinds[0]} paired ratio {ratio['median']:.2f} (quartiles {ratio['q1']:.2f}-"
                         f"{ratio['q3']:.2f})")
        print(f"{extender:4} extender, {result['nodes']} nodes, {result['rounds']} rounds x {result['per_round']}: "
              + "; ".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
