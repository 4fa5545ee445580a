"""A self-contained HTML report (inline SVG, no scripts, no network): curves per policy and node heat maps."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
W, H, PAD = 640, 320, 48


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _nice(top: float) -> float:
    """The smallest round axis end (5 ticks of 1, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k) at or above ``top``."""
    step = 10 ** math.floor(math.log10(max(top, 1e-9) / 5))
    for m in (1, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if 5 * m * step >= top:
            return 5 * m * step
    return top


def line_chart(title: str, series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]], *, y_label: str,
               x_label: str = "arrived GPU demand (% of capacity)", marker_x: float | None = 100.0) -> str:
    """An SVG line chart; ``series`` items are (label, colour, [(x, y), ...]). The legend shows each label
    once, so runs of one policy with several seeds share an entry."""
    xs = [x for _, _, pts in series for x, _ in pts] or [0.0, 1.0]
    ys = [y for _, _, pts in series for _, y in pts] or [0.0, 1.0]
    x0, x1 = 0.0, _nice(max(xs))
    y0, y1 = 0.0, 100.0 if max(ys) > 50 else _nice(max(ys) * 1.1)

    def px(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD)

    def py(y: float) -> float:
        return H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img" '
             f'aria-label="{_esc(title)}">',
             f'<text x="{W / 2}" y="18" text-anchor="middle" font-weight="bold">{_esc(title)}</text>',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#333"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#333"/>']
    for i in range(6):
        yv = y0 + (y1 - y0) * i / 5
        xv = x0 + (x1 - x0) * i / 5
        parts.append(f'<text x="{PAD - 6}" y="{py(yv) + 4:.1f}" text-anchor="end" font-size="11">{yv:.0f}</text>')
        parts.append(f'<line x1="{PAD}" y1="{py(yv):.1f}" x2="{W - PAD}" y2="{py(yv):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{px(xv):.1f}" y="{H - PAD + 16}" text-anchor="middle" font-size="11">{xv:.0f}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" font-size="12">{_esc(x_label)}</text>')
    parts.append(f'<text x="14" y="{H / 2}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 14 {H / 2})">{_esc(y_label)}</text>')
    if marker_x is not None and x0 <= marker_x <= x1:
        parts.append(f'<line x1="{px(marker_x):.1f}" y1="{PAD}" x2="{px(marker_x):.1f}" y2="{H - PAD}" '
                     'stroke="#999" stroke-dasharray="4 3"/>')
    legend: dict[str, str] = {}
    for label, colour, pts in series:
        if pts:
            path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}">'
                         f'<title>{_esc(label)}</title></polyline>')
        legend.setdefault(label.split(" (seed ")[0], colour)
    for k, (label, colour) in enumerate(legend.items()):
        parts.append(f'<rect x="{PAD + 10}" y="{PAD + 6 + 16 * k}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{PAD + 26}" y="{PAD + 15 + 16 * k}" font-size="11">{_esc(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def heat_map(title: str, values: Mapping[str, float], *, cell: int = 10, columns: int = 50) -> str:
    """Nodes as cells coloured from white (idle) to dark blue (fully allocated); hover shows the value."""
    names = sorted(values)
    rows = (len(names) + columns - 1) // columns or 1
    width, height = columns * cell + 2, rows * cell + 28
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{_esc(title)}"><text x="0" y="14" font-weight="bold">{_esc(title)}</text>']
    for i, name in enumerate(names):
        v = max(0.0, min(1.0, values[name]))
        r, g, b = int(255 - 224 * v), int(255 - 180 * v), int(255 - 75 * v)
        x, y = 1 + (i % columns) * cell, 22 + (i // columns) * cell
        parts.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="rgb({r},{g},{b})">'
                     f'<title>{_esc(name)}: {v:.0%}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def render(report: Mapping[str, Any]) -> str:
    """The whole page for a ``--report`` document."""
    runs = report["runs"]
    labels = list(dict.fromkeys(r["policy"] for r in runs))
    colour = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    alloc, frag = [], []
    for r in runs:
        name = r["policy"] + ("" if r["seed"] is None else f" (seed {r['seed']})")
        alloc.append((name, colour[r["policy"]], [(c["arrived"], c["allocated"]) for c in r["curve"]]))
        frag.append((name, colour[r["policy"]], [(c["arrived"], c["fragmentation"]) for c in r["curve"]]))
    rows = []
    for label, s in report["summary"].items():
        def cell(v: Any) -> str:
            return "-" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))
        rows.append("<tr>" + "".join(f"<td>{_esc(cell(v))}</td>" for v in (
            label, s["runs"], s["gpu_allocation_ratio_at_100"], s["final_gpu_allocation_ratio"],
            s["fragmentation_ratio_at_100"], s["placed"], s["failed"], s["wall_s"], s["decisions_per_s"])) + "</tr>")
    first_run = {}
    for r in runs:
        first_run.setdefault(r["policy"], r)
    heat = "".join(f"<figure>{heat_map(f'{label}: GPU allocation per node', r['node_allocation'])}</figure>"
                   for label, r in first_run.items() if r["node_allocation"])
    inputs = "".join(f"<li><b>{_esc(k)}</b>: {_esc(v)}</li>" for k, v in report.get("inputs", {}).items())
    alloc_chart = line_chart("GPU allocation ratio vs arrived demand", alloc, y_label="allocated GPU (% of capacity)")
    frag_chart = line_chart("Fragmentation vs arrived demand (FGD measure)", frag,
                            y_label="fragmented GPU (% of capacity)")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hami simulate report</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}td:first-child{{text-align:left}}
figure{{display:inline-block;margin:1em}}</style></head><body>
<h1>hami simulate</h1><ul>{inputs}</ul>
<table><tr><th>policy</th><th>runs</th><th>GPU alloc @100% demand</th><th>final GPU alloc</th>
<th>fragmentation @100%</th><th>placed</th><th>failed</th><th>wall s</th><th>decisions/s</th></tr>
{"".join(rows)}</table>
<figure>{alloc_chart}</figure>
<figure>{frag_chart}</figure>
{heat}
</body></html>
"""
