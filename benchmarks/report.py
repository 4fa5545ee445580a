"""Render ``benchmarks/run.py --json`` output as the Markdown tables of docs/performance.md, with the targets.

    python benchmarks/run.py --json > bench.json && python benchmarks/report.py bench.json
"""

from __future__ import annotations

import json
import sys
from typing import Any


def ms(d: dict[str, float]) -> str:
    return f"{d['p50_ms']:.2f} / {d['p99_ms']:.2f}"


def msc(d: dict[str, float]) -> str:
    cpu = d.get("cpu_p99_ms")
    return ms(d) + (f" [{cpu:.2f}]" if cpu is not None else "")


def verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def render(doc: dict[str, Any]) -> str:
    s, out = doc["sections"], []
    if "schedule" in s:
        out += ["### 1. `Engine.schedule()` (ms, wall p50 / p99; thread CPU p99 in brackets)", "",
                "| nodes | usage | 1 GPU limit=1 | 2 GPUs limit=1 | 2 containers limit=1 | 1 GPU full eval | target |",
                "|---:|---:|---:|---:|---:|---:|---|"]
        for r in s["schedule"]:
            target = ""
            if r["nodes"] == 5000 and abs(r["usage"] - 0.5) < 1e-9:
                cpu = r["1gpu"].get("cpu_p99_ms")
                target = f"p99 < 2 ms: {verdict(r['1gpu']['p99_ms'] < 2)} (wall)"
                if cpu is not None:
                    target += f", {verdict(cpu < 2)} (CPU)"
            out.append(f"| {r['nodes']} | {r['usage']:.0%} | {msc(r['1gpu'])} | {msc(r['2gpu'])} | {msc(r['2ctr'])} "
                       f"| {msc(r['1gpu_full'])} | {target} |")
        out.append("")
    if "http" in s:
        out += ["### 2. HTTP extender, 1-GPU pod (ms, p50 / p99)", "",
                "*null*: the same server with an extender that schedules nothing; *bare*: the barest Python server "
                "with a raw-socket client (`benchmarks/null_extender.py`).", "",
                "| nodes | usage | server | /filter | /bind | JSON floor | GET /healthz round trip | null /filter "
                "| bare /filter | p99 / floor p99: filter, null, bare | target (≤ 2x) |",
                "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in s["http"]:
            trip = ms(r["roundtrip"]) if "roundtrip" in r else "-"
            refs = [ms(r[k]) if k in r else "-" for k in ("null_filter", "bare_filter")]
            ratios = ", ".join(f"{r[k]:.1f}x" for k in ("filter_p99_over_floor_p99", "null_filter_p99_over_floor_p99",
                                                      "bare_filter_p99_over_floor_p99") if r.get(k) is not None)
            out.append(f"| {r['nodes']} | {r['usage']:.0%} | {r.get('server', 'threaded')} | {ms(r['filter'])} "
                       f"| {ms(r['bind'])} | {ms(r['floor'])} | {trip} | {refs[0]} | {refs[1]} | {ratios} "
                       f"| {verdict(r['filter_p99_over_floor_p99'] <= 2)} |")
        out.append("")
    if "throughput" in s:
        out += ["### 3. Sustained filter + bind over HTTP", "",
                "| nodes | extender | server | client threads | pods | bound | lock retries | wall s | pods/s "
                "| server CPU ms/pod | target (> 1,000/s) |",
                "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in s["throughput"]:
            cpu = f"{r['server_cpu_ms_per_pod']:.2f}" if "server_cpu_ms_per_pod" in r else "-"
            extender = r.get("extender", "hami")
            target = verdict(r["pods_per_s"] > 1000) if extender == "hami" else "(reference)"
            out.append(f"| {r['nodes']} | {extender} | {r.get('server', 'threaded')} | {r['threads']} | {r['pods']} "
                       f"| {r['bound']} | {r['retries']} | {r['wall_s']:.1f} | {r['pods_per_s']:.0f} | {cpu} "
                       f"| {target} |")
        out.append("")
    if "memory" in s:
        r = s["memory"]
        out += ["### 4. Memory", "",
                "| nodes | GPUs | pods | RSS MiB | of which imports | peak MiB | target (< 300 MB) |",
                "|---:|---:|---:|---:|---:|---:|---|",
                f"| {r['nodes']} | {r['gpus']} | {r['pods']} | {r['rss_mb']:.0f} | {r['baseline_rss_mb']:.0f} "
                f"| {r['peak_rss_mb']:.0f} | {verdict(r['rss_mb'] * 1.048576 < 300)} |", ""]
    if "simulate" in s:
        r = s["simulate"]
        out += ["### 5. `hami simulate`, openb default trace", ""]
        if "skipped" in r:
            out.append(f"skipped: {r['skipped']}")
        else:
            out += ["| trace | policy | seed | exit | wall s | target (< 10 s) |", "|---|---|---:|---:|---:|---|",
                    f"| {r['trace']} | {r['policy']} | {r['seed']} | {r['rc']} | {r['wall_s']:.1f} "
                    f"| {verdict(r['rc'] == 0 and r['wall_s'] < 10)} |"]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        print(render(json.load(fh)))
