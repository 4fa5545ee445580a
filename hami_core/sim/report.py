"""Human (rich tables) and machine (JSON) reports of a simulation."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from hami_core.engine.facade import Engine
from hami_core.plugins.types import ContainerDevice
from hami_core.sim.run import SimResult


def _devices(devices: dict[str, tuple[tuple[ContainerDevice, ...], ...]], names: tuple[str, ...]) -> str:
    parts = []
    for backend, containers in sorted(devices.items()):
        for pos, devs in enumerate(containers):
            if not devs:
                continue
            label = names[pos] if pos < len(names) else f"c{pos}"
            cards = ", ".join(f"#{d.idx} {d.usedmem}MiB {d.usedcores}%" for d in devs)
            parts.append(f"{label}: {backend} {cards}")
    return "\n".join(parts)


def summarize_failures(failed: dict[str, str], limit: int = 3) -> str:
    """Group nodes by reason: ``gpu-a, gpu-b: 8/8 CardInsufficientMemory`` (at most ``limit`` names each)."""
    groups: dict[str, list[str]] = {}
    for node, reason in sorted(failed.items()):
        groups.setdefault(reason, []).append(node)
    lines = []
    for reason, nodes in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        shown = ", ".join(nodes[:limit]) + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")
        lines.append(f"{shown}: {reason}")
    return "\n".join(lines)


def placements_table(result: SimResult) -> Table:
    table = Table(title="Placements (arrival order)", show_lines=False)
    for col in ("#", "pod", "node", "devices", "note"):
        table.add_column(col, overflow="fold")
    for i, p in enumerate(result.placements, 1):
        d = p.decision
        if p.denied:
            table.add_row(str(i), p.pod, "[red]denied[/]", "", p.denied)
        elif d is None or d.skipped:
            table.add_row(str(i), p.pod, "[dim]-[/]", "", "no managed device requested")
        elif d.node is None:
            reason = d.error or summarize_failures(d.failed)
            table.add_row(str(i), p.pod, "[red]unschedulable[/]", "", reason)
        else:
            names = d.requests.names if d.requests else ()
            table.add_row(str(i), p.pod, f"[green]{d.node}[/]", _devices(dict(d.devices), names),
                          f"score {d.scores[d.node]:.2f}, {len(d.nodes)} feasible")
    return table


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


def print_report(console: Console, engine: Engine, result: SimResult, *, cluster: str, workload: str) -> None:
    console.print(f"cluster: {cluster} ({len(result.nodes)} nodes)   workload: {workload} "
                  f"({len(result.placements)} pods)   policy: node={engine.config.scheduler.node_scheduler_policy} "
                  f"gpu={engine.config.scheduler.gpu_scheduler_policy}")
    console.print(placements_table(result))
    console.print(usage_table(engine))
    console.print(f"[bold]{result.placed}/{result.requested}[/] pods requesting devices were placed.")


def to_json(engine: Engine, result: SimResult) -> dict[str, Any]:
    pods = []
    for p in result.placements:
        d = p.decision
        pods.append({
            "pod": p.pod,
            "node": p.node,
            "denied": p.denied,
            "skipped": bool(d and d.skipped),
            "failed": dict(d.failed) if d else {},
            "annotations": dict(d.annotations) if d else {},
        })
    usage = {
        name: [{"id": d.id, "index": d.index, "type": d.type, "used": d.used, "count": d.count, "usedmem": d.usedmem,
                "totalmem": d.totalmem, "usedcores": d.usedcores, "totalcore": d.totalcore}
               for devs in state.devices.values() for d in devs]
        for name, state in sorted(engine.nodes.items())
    }
    return {"placed": result.placed, "requested": result.requested, "pods": pods, "nodes": usage}
