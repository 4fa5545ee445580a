"""Reports of a simulation: terminal tables (rich) and the JSON report (``--report``/``--json``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice
from hami_core.sim.experiment import Policy, summarize
from hami_core.sim.replay import Placed, RunResult

if TYPE_CHECKING:
    from hami_core.sim.bound import Bound

REPORT_VERSION = 1


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def summarize_failures(failed: Mapping[str, str], limit: int = 3) -> str:
    """Group nodes by reason: ``gpu-a, gpu-b: 8/8 CardInsufficientMemory`` (at most ``limit`` names each)."""
    groups: dict[str, list[str]] = {}
    for node, reason in sorted(failed.items()):
        groups.setdefault(reason, []).append(node)
    lines = []
    for reason, nodes in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(nodes[:limit]) + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")
        lines.append(f"{shown}: {reason}")
    return "\n".join(lines)


def _devices(devices: Mapping[str, Sequence[Sequence[ContainerDevice]]], names: Sequence[str]) -> str:
    parts = []
    for backend, per_container in sorted(devices.items()):
        for pos, devs in enumerate(per_container):
            if devs:
                label = names[pos] if pos < len(names) else f"c{pos}"
                cards = ", ".join(f"#{d.idx} {d.usedmem}MiB {d.usedcores}%" for d in devs)
                parts.append(f"{label}: {backend} {cards}")
    return "\n".join(parts)


def placements_table(run: RunResult) -> Table:
    table = Table(title=f"Placements (arrival order, policy {run.policy})")
    for col in ("#", "pod", "node", "devices", "note"):
        table.add_column(col, overflow="fold")
    for i, p in enumerate(run.placements, 1):
        d = p.decision
        if d is not None and d.skipped:
            table.add_row(str(i), p.pod, p.node or "[red]unschedulable[/]", "", placement_note(p))
        elif p.node is None:
            table.add_row(str(i), p.pod, "[red]unschedulable[/]", "", placement_note(p))
        else:
            assert d is not None
            names = d.requests.names if d.requests else ()
            table.add_row(str(i), p.pod, f"[green]{p.node}[/]", _devices(d.devices, names), placement_note(p))
    return table


def placement_note(p: Placed) -> str:
    """The placements table's note (also the JSON's ``note``, which the HTML report shows)."""
    d = p.decision
    if d is not None and d.skipped:
        return "no managed device requested"
    if p.evicted_by:
        return f"evicted by {p.evicted_by}"
    if p.node is None:
        return summarize_failures(d.failed) if d is not None and d.failed and not d.error else p.reason
    score = f"score {d.scores[p.node]:.2f}" if d is not None and p.node in d.scores else ""
    if p.preempted:
        return "; ".join(filter(None, [f"preempted {', '.join(p.preempted)}", score]))
    return score


def usage_table(engine: Engine) -> Table:
    table = Table(title="Device usage per node")
    for col in ("node", "device", "type", "tasks", "memory MiB", "cores %"):
        table.add_column(col, justify="right" if col in ("tasks", "memory MiB", "cores %") else "left")
    for name in sorted(engine.nodes):
        state = engine.nodes[name]
        for backend in sorted(state.devices):
            for d in state.devices[backend]:
                table.add_row(name, f"#{d.index}", d.type, f"{d.used}/{d.count}", f"{d.usedmem}/{d.totalmem}",
                              f"{d.usedcores}/{d.totalcore}")
        if not state.devices:
            table.add_row(name, "[dim](no registered devices)[/]", "", "", "", "")
    return table


def _by_seed(bounds: Sequence[Bound] | None) -> dict[int | None, float]:
    return {b.seed: b.ratio_at_100 for b in bounds or () if b.ratio_at_100 is not None}


def ceiling(runs: Sequence[RunResult], bounds: Sequence[Bound] | None) -> tuple[float | None, float | None]:
    """(the mean ceiling over the seeds of ``runs``, the mean of bound - alloc @100 % over them), or None each."""
    ceil = _by_seed(bounds)
    pairs = [(ceil[r.seed], r.ratio_at_100) for r in runs if r.seed in ceil and r.ratio_at_100 is not None]
    if not pairs:
        return None, None
    return (round(sum(b for b, _ in pairs) / len(pairs), 3),
            round(sum(b - a for b, a in pairs) / len(pairs), 3))


def summary_table(runs: Sequence[RunResult], *, paper: Mapping[str, float] | None = None,
                  bounds: Sequence[Bound] | None = None, moves: Sequence[float | None] | None = None) -> Table:
    summary = summarize(runs)
    seeded = any(r.seed is not None for r in runs)
    table = Table(title="Policies compared" + (" (mean over seeds)" if seeded else ""),
                  caption="alloc: allocated GPU share, % of capacity, when arrived demand reaches 100 % and at the "
                          "end; frag: FGD fragmentation, % of capacity")
    cols = ["policy", "runs", "alloc @100%", "alloc final", "frag @100%", "placed", "failed", "top failures",
            "s/run", "dec/s"]
    defrag = any("defrag_moves_at_100" in s for s in summary.values())
    if defrag:  # --defrag: the moves made by 100 % arrived demand
        cols[3:3] = ["moved @100%"]
        table.caption = (table.caption or "") + "; moved: pods the defragmenter moved by 100 % arrived demand, " \
            "% of the pods holding devices then"
    if bounds is not None:  # the ceiling next to each policy: the same seeds' bound, and how far below it
        cols[3:3] = ["ceiling", "gap"]
        methods = sorted({b.method for b in bounds})
        table.caption = (table.caption or "") + (
            f"; ceiling: upper bound on alloc @100% for any placement of the same arrived pods ({', '.join(methods)} "
            "bound, hami simulate --bound), gap: points below it")
    if bounds is not None and moves is not None:  # the ceiling for moves after the ceiling
        cols[5:5] = ["moves ceiling"]
        table.caption = (table.caption or "") + "; moves ceiling: the same keeping every pod the run placed (what " \
            "no defragmenter can pass)"
    for col in cols:
        # a narrow terminal folds a long reason word rather than cutting it to "Card…" (the HTML shows it whole)
        table.add_column(col, justify="left" if col in ("policy", "top failures") else "right",
                         no_wrap=col != "top failures", overflow="fold" if col == "top failures" else "ellipsis")
    by_policy: dict[str, list[RunResult]] = {}
    for r in runs:
        by_policy.setdefault(r.policy, []).append(r)
    for label, s in summary.items():
        stats = s["gpu_allocation_ratio_at_100_stats"]
        at100 = "-" if stats is None else f"{stats['mean']:.2f}%" + (f" ± {stats['std']:.2f}" if s["runs"] > 1 else "")
        reasons: dict[str, int] = {}
        for r in by_policy[label]:
            for k, v in r.failed_by_reason.items():
                reasons[k] = reasons.get(k, 0) + v
        top = "\n".join(f"{k} {v / len(by_policy[label]):.0f}" for k, v in sorted(reasons.items(),
                                                                                 key=lambda kv: -kv[1])[:3])
        evicted = sum(r.evicted for r in by_policy[label]) / len(by_policy[label])
        placed = f"{s['placed']:.0f}" + (f"\n{evicted:.0f} evicted" if evicted else "")
        cells = [label, str(s["runs"]), at100, _pct(s["final_gpu_allocation_ratio"]),
                 _pct(s["fragmentation_ratio_at_100"]), placed, f"{s['failed']:.0f}", top,
                 f"{s['wall_s']:.1f}", f"{s['decisions_per_s']:.0f}"]
        if defrag:
            cells[3:3] = [f"{s.get('defrag_moves_at_100', 0):.0f} ({s.get('defrag_moved_percent_at_100', 0):.2f}%)"]
        if bounds is not None:
            bound, gap = ceiling(by_policy[label], bounds)
            cells[3:3] = [_pct(bound), "-" if gap is None else f"{gap:.2f}"]
            if moves is not None:
                kept = [m for r, m in zip(runs, moves, strict=True) if r.policy == label and m is not None]
                cells[5:5] = [_pct(sum(kept) / len(kept) if kept else None)]
        table.add_row(*cells)
    if paper:
        table.caption = (table.caption or "") + "\nPublished (Weng et al., ATC'23, mean of 10 seeds): " + ", ".join(
            f"{k} {v:.2f}%" for k, v in paper.items())
    return table


def run_json(run: RunResult, policy: Policy | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "policy": run.policy,
        "node_policy": policy.node if policy and policy.allocator == "hami" else None,  # dra runs no HAMi policy
        "gpu_policy": policy.gpu if policy and policy.allocator == "hami" else None,
        "allocator": policy.allocator if policy else "hami",
        "seed": run.seed,
        "tasks": run.tasks,
        "placed": run.placed,
        "failed": run.failed,
        "failed_by_reason": dict(sorted(run.failed_by_reason.items())),
        "preemptions": run.preemptions,
        "evicted": run.evicted,
        "evicted_gpus": run.evicted_milli / 1000,
        "capacity_gpus": run.capacity_milli / 1000,
        "gpu_allocation_ratio_at_100": None if run.ratio_at_100 is None else round(run.ratio_at_100, 3),
        "final_gpu_allocation_ratio": round(run.final_ratio, 3),
        "fragmentation_ratio_at_100": (None if run.fragmentation_at_100 is None
                                       else round(run.fragmentation_at_100, 3)),
        "curve": [{"arrived": a, "allocated": b, "fragmentation": f} for a, b, f in run.curve],
        "per_model": run.per_model,
        "node_allocation": run.node_allocation,
        "wall_s": round(run.wall_s, 3),
        "decisions_per_s": round(run.decisions_per_s, 1),
    }
    if run.quotas:
        out["resource_quotas"] = run.quotas
    if run.defrag is not None:
        out["defrag"] = run.defrag
    if run.placements:
        out["placements"] = [{"pod": p.pod, "node": p.node, "reason": p.reason or None,
                              "skipped": bool(p.decision and p.decision.skipped),
                              "failed": dict(p.decision.failed) if p.decision and p.node is None else {},
                              "annotations": dict(p.decision.annotations) if p.decision else {},
                              "score": _score(p), "devices": _devices_json(p), "note": placement_note(p),
                              "preempted": list(p.preempted), "evicted_by": p.evicted_by or None}
                             for p in run.placements]
    return out


def _score(p: Placed) -> float | None:
    d = p.decision
    if d is None or p.node is None or d.skipped or p.node not in d.scores:
        return None
    return round(d.scores[p.node], 3)


def _devices_json(p: Placed) -> list[dict[str, Any]]:
    """The devices a placed pod got, per container, as the placements table lists them."""
    d = p.decision
    if d is None or p.node is None:
        return []
    names = d.requests.names if d.requests else ()
    return [{"container": names[pos] if pos < len(names) else f"c{pos}", "backend": backend, "index": dev.idx,
             "memory_mib": dev.usedmem, "cores": dev.usedcores}
            for backend, per_container in sorted(d.devices.items())
            for pos, devs in enumerate(per_container) for dev in devs]


def report_json(runs: Sequence[RunResult], policies: Sequence[Policy], inputs: Mapping[str, Any], *,
                bounds: Sequence[Bound] | None = None, moves: Sequence[float | None] | None = None) -> dict[str, Any]:
    """The ``--report`` document: ``{"version", "inputs", "runs": [...], "summary": {policy: {...}}}``; with
    ``bounds`` (``--bound``) also ``"bound"`` (each seed's ceiling), and ``bound``/``gap_to_bound`` in each run and
    each policy's summary; with ``moves`` (each run's ceiling for moves, :func:`~hami_core.sim.bound.moves_bounds`)
    ``moves_bound``/``gap_to_moves_bound`` in each run and each policy's summary."""
    by_label = {p.label: p for p in policies}
    out: dict[str, Any] = {"version": REPORT_VERSION, "inputs": dict(inputs),
                           "runs": [run_json(r, by_label.get(r.policy)) for r in runs], "summary": summarize(runs)}
    if bounds is None:
        return out
    ceil = _by_seed(bounds)
    mean = [b.ratio_at_100 for b in bounds if b.ratio_at_100 is not None]
    out["bound"] = {"methods": sorted({b.method for b in bounds}),
                    "gpu_allocation_ratio_at_100": round(sum(mean) / len(mean), 3) if mean else None,
                    "seeds": [b.as_json() for b in bounds]}
    for r, doc in zip(runs, out["runs"], strict=True):
        doc["bound"] = ceil.get(r.seed)
        doc["gap_to_bound"] = (None if r.seed not in ceil or r.ratio_at_100 is None
                               else round(ceil[r.seed] - r.ratio_at_100, 3))
    for label, s in out["summary"].items():
        s["bound"], s["gap_to_bound"] = ceiling([r for r in runs if r.policy == label], bounds)
    if moves is None:
        return out
    for r, doc, m in zip(runs, out["runs"], moves, strict=True):
        doc["moves_bound"] = m
        doc["gap_to_moves_bound"] = None if m is None or r.ratio_at_100 is None else round(m - r.ratio_at_100, 3)
    for label, s in out["summary"].items():
        pairs = [(m, r.ratio_at_100) for r, m in zip(runs, moves, strict=True)
                 if r.policy == label and m is not None and r.ratio_at_100 is not None]
        s["moves_bound"] = round(sum(m for m, _ in pairs) / len(pairs), 3) if pairs else None
        s["gap_to_moves_bound"] = round(sum(m - a for m, a in pairs) / len(pairs), 3) if pairs else None
    return out


def usage_json(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    return {name: [{"id": d.id, "index": d.index, "type": d.type, "used": d.used, "count": d.count,
                    "usedmem": d.usedmem, "totalmem": d.totalmem, "usedcores": d.usedcores,
                    "totalcore": d.totalcore} for devs in state.devices.values() for d in devs]
            for name, state in sorted(engine.nodes.items())}


def quota_table(run: RunResult) -> Table:
    table = Table(title="ResourceQuota use at the end")
    for col in ("namespace", "resource", "used", "limit"):
        table.add_column(col, justify="right" if col in ("used", "limit") else "left")
    for q in run.quotas:
        table.add_row(q["namespace"], q["resource"], str(q["used"]), str(q["limit"]))
    return table


def print_single(console: Console, engine: Engine, run: RunResult, header: str) -> None:
    console.print(header)
    console.print(placements_table(run))
    console.print(usage_table(engine))
    if run.quotas:
        console.print(quota_table(run))
    requested = sum(1 for p in run.placements if not (p.decision and p.decision.skipped))
    placed = sum(1 for p in run.placements if p.node and not (p.decision and p.decision.skipped))
    evicted = f" ({run.evicted} of them evicted later by preemption)" if run.evicted else ""
    console.print(f"[bold]{placed}/{requested}[/] pods requesting devices were placed{evicted}; GPU allocation "
                  f"{run.final_ratio:.2f}%, fragmentation {run.curve[-1][2] if run.curve else 0:.2f}%.")
