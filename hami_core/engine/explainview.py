"""How an explanation is shown: tables (rich) or JSON. Shared by ``hami explain`` and ``hami simulate --explain``,
so it sits with the engine's explanation rather than in either command."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_MAX_NODES", "MARK", "print_explanation"]

#: A check's status in the device table: passed, failed (the device's first failing check), not reached.
MARK = {"pass": "ok", "fail": "X", "not reached": "."}
DEFAULT_MAX_NODES = 30


# ------------------------------------------------------------------------------------------ rendering

def print_explanation(explanation: Any, *, output: str = "table", max_nodes: int = DEFAULT_MAX_NODES,
                      file: Any = None) -> None:
    """Print a :class:`~hami_core.engine.explain.PodExplanation` as tables or JSON on ``file`` (default stdout)."""
    out = file if file is not None else sys.stdout
    if output == "json":
        json.dump(explanation.to_json(), out, indent=2)
        out.write("\n")
        return
    from rich.console import Console

    console = Console(file=out, width=None if out.isatty() else 200)
    for line in _summary(explanation):
        console.print(line, highlight=False, markup=False)
    if explanation.error:
        return
    shown = _ordered(explanation.nodes)[:max_nodes]
    console.print(_node_table(shown, len(explanation.nodes)))
    for n in shown:
        for r in n.requests:
            if r.devices:
                console.print(_device_table(n, r))

def _summary(explanation: Any) -> list[str]:
    lines = [f"pod {explanation.pod}"]
    if explanation.policy:
        p = explanation.policy
        lines[0] += f"   policy: node {p['node']}, gpu {p['gpu']}" + (", numa-bind" if p.get("numa_bind") else "")
    fitting = sum(1 for n in explanation.nodes if n.fits)
    if explanation.error:
        lines.append(f"cannot be scheduled at all: {explanation.error}")
    elif explanation.node:
        lines.append(f"fits: the filter would choose node {explanation.node} ({fitting} of "
                     f"{len(explanation.nodes)} nodes fit)")
    else:
        lines.append(f"pending: no node fits ({len(explanation.nodes)} candidate nodes)")
    disagree = [n.name for n in explanation.nodes if n.fits != n.filter_fits or n.reason != n.filter_reason]
    if disagree:  # a bug: the explanation and the filter run the same fit
        lines.append(f"warning: the filter judged these nodes differently: {', '.join(disagree[:10])}")
    lines.extend(f"note: {note}" for note in explanation.notes)
    lines.extend(_persisted(explanation.persisted))
    return lines


def _persisted(doc: Mapping[str, Any] | None) -> list[str]:
    if not doc:
        return []
    if "unreadable" in doc:
        return [f"hami.io/filter-reasons (not hami's format): {doc['unreadable']}"]
    lines = [f"the scheduler's last failed filter (hami.io/filter-reasons): {doc.get('failed', '?')} of "
             f"{doc.get('nodes', '?')} nodes failed"]
    if doc.get("error"):
        lines.append(f"  error: {doc['error']}")
    for group in doc.get("reasons") or ():
        names = ", ".join(group.get("nodes") or ())
        more = group.get("more") or 0
        lines.append(f"  {group.get('count')} nodes: {group.get('reason')}"
                     + (f" ({names}{f', +{more} more nodes' if more else ''})" if names or more else ""))
    more = doc.get("more") or {}
    if more.get("reasons"):
        lines.append(f"  +{more['reasons']} more reasons on {more.get('nodes', 0)} nodes")
    return lines


def _ordered(nodes: Sequence[Any]) -> list[Any]:
    """Nodes that fit first (the chosen one, then by score as ranked), then the others by name."""
    fit = sorted((n for n in nodes if n.fits), key=lambda n: (not n.chosen, n.name))
    return fit + [n for n in nodes if not n.fits]


def _node_table(nodes: Sequence[Any], total: int) -> Any:
    from rich.table import Table

    caption = f"{total - len(nodes)} more nodes: --max-nodes, --node or --output json" if total > len(nodes) else None
    table = Table(title="nodes", caption=caption)
    for column in ("node", "verdict", "reason", "score", "chosen"):
        table.add_column(column, overflow="fold")
    for n in nodes:
        table.add_row(n.name, "fits" if n.fits else "fails", n.reason or "-",
                      "-" if n.score is None else f"{n.score:.2f}", "yes" if n.chosen else "")
    return table


def _device_table(node: Any, r: Any) -> Any:
    """One node's devices against one request: a column per check, the failing check's facts last."""
    from rich.table import Table

    from hami_core.engine.explain import CHECKS

    req = r.request
    asked = f"{req.nums} device(s)" + (f", {req.memreq} MiB" if req.memreq else "") + (
        f", {req.mem_percentage}% memory" if 0 <= req.mem_percentage <= 100 and not req.memreq else "") + (
        f", {req.coresreq}% cores" if req.coresreq else "")
    verdict = "fits" if r.fits else f"fails: {r.reason}"
    table = Table(title=f"{node.name} / {r.container} / {r.backend}: {asked} -> {verdict}", title_justify="left")
    table.add_column("device", overflow="fold", max_width=28)
    table.add_column("type", overflow="fold", max_width=18)
    table.add_column("verdict")
    for name, _ in CHECKS:
        table.add_column(name, justify="center")
    table.add_column("failed check: what it saw", overflow="fold", min_width=40)
    for d in r.devices:
        failing = next((c for c in d.checks if c.status == "fail"), None)
        table.add_row(f"{d.index} {d.id}", d.type, "picked" if d.chosen else ("fits" if d.fits else "fails"),
                      *[MARK[c.status] for c in d.checks],
                      f"{failing.name}: {failing.detail}" if failing is not None else "")
    return table
