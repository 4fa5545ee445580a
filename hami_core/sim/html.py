"""The ``--html`` report: one self-contained page (inline CSS and SVG; no script, nothing fetched).

It says what the terminal report says (the summary table with its failures, and for a single run the placements,
device usage and quotas) and shows what a table cannot: the allocation and fragmentation curves as the mean of
each policy with its spread across seeds as a band, the published figures of the FGD paper on an openb trace,
failure reasons, use per GPU model, and a heat map of each policy's median run. Every value is formatted here, so
no Python ``None``, list or dict reaches the page; SVGs carry a ``viewBox`` and no size, so they scale with the
page, which holds at any width (wide tables scroll inside their own box).
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
#: Chart geometry in viewBox units; the browser scales the whole drawing to the figure's width.
W, H = 560, 340
LEFT, RIGHT, TOP, BOTTOM = 52, 112, 14, 44
#: The paper's methods drawn as reference lines (the table lists them all): the two packing baselines the
#: docs compare HAMi's binpack with, and FGD.
REFERENCE_LINES = ("GPU packing", "Best-fit", "FGD")
#: The ceiling's line on the allocation chart (``--bound``)
CEILING_COLOUR = "#1a7f37"
#: Heat-map colour scale (sequential blues), from idle to fully allocated.
SCALE = ((0.0, (247, 251, 255)), (0.25, (198, 219, 239)), (0.5, (107, 174, 214)), (0.75, (33, 113, 181)),
         (1.0, (8, 48, 107)))
INPUT_LABELS = {"cluster": "cluster", "workload": "workload", "nodes": "nodes", "resource_quotas": "ResourceQuotas",
                "tasks": "pods", "skipped_rows": "skipped rows", "device_sections": "device-config sections",
                "mode": "mode", "seeds": "seeds", "inflate": "inflate", "policies": "policies",
                "fgd_mix": "fgd mix", "cpu_pods": "CPU-only pods", "protocol": "protocol"}
#: ``hami simulate --allocator``: who placed the pods, as the report's facts say it.
ALLOCATOR_TEXT = {"hami": "hami (HAMi's extender with its node and GPU policies)",
                  "dra": "dra (kube-scheduler's DRA allocator: first device that satisfies, no device score)"}


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float | None, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}{unit}"


def _seed_list(seeds: Sequence[int]) -> str:
    """``[42, 43, 44, 50]`` → ``42-44, 50``."""
    parts: list[str] = []
    start = prev = None
    for s in [*sorted(seeds), None]:
        if prev is not None and s == prev + 1:
            prev = s
            continue
        if start is not None and prev is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = s
    return ", ".join(parts)


def _plain(key: str, value: Any) -> str:
    """An input's value as text: lists joined, numbers plain, never a repr."""
    if key == "seeds" and isinstance(value, list):
        return _seed_list(value)
    if key == "allocator" and isinstance(value, str):
        return ALLOCATOR_TEXT.get(value, value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ", ".join(_plain(key, v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_plain(key, v)}" for k, v in value.items())
    return str(value)


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = max(span, 1e-9) / ticks
    base = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if m * base >= raw:
            return m * base
    return 10 * base


@dataclass(frozen=True, slots=True)
class Band:
    """One policy's curve: the mean across seeds and, with more than one seed, its lowest and highest."""

    label: str
    colour: str
    xs: list[float]
    mean: list[float]
    lo: list[float] | None = None
    hi: list[float] | None = None


def bands(runs: Sequence[Mapping[str, Any]], key: str, colour: Mapping[str, str]) -> list[Band]:
    """Per policy, ``key`` of the curve (``allocated`` or ``fragmentation``) across its seeds, on a common grid of
    arrived demand (every seed's checkpoints fall a little differently past each 5 %)."""
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for r in runs:
        if r["curve"]:
            by_policy.setdefault(r["policy"], []).append(r)
    out = []
    for label, rs in by_policy.items():
        if len(rs) == 1:
            pts = rs[0]["curve"]
            out.append(Band(label, colour[label], [c["arrived"] for c in pts], [c[key] for c in pts]))
            continue
        end = min(r["curve"][-1]["arrived"] for r in rs)
        grid = sorted({*(5.0 * k for k in range(int(end // 5) + 1)), end})
        ys = np.array([np.interp(grid, [c["arrived"] for c in r["curve"]], [c[key] for c in r["curve"]])
                       for r in rs])
        out.append(Band(label, colour[label], list(grid), list(ys.mean(axis=0)), list(ys.min(axis=0)),
                        list(ys.max(axis=0))))
    return out


#: Arrived demand (% of capacity) the allocation chart shows before the knee of the best policy.
ZOOM_LEAD = 30.0


def zoom(series: Sequence[Band]) -> float:
    """Where the allocation chart starts: :data:`ZOOM_LEAD` points of demand before the best policy stops placing
    all that arrives (its knee, where the policies part for good). Before that the curves run up the diagonal
    together and would squeeze the part that matters into a corner; a demo that fails pods early starts at 0."""
    if not series:
        return 0.0
    grid = sorted({x for b in series for x in b.xs})
    for x in grid:
        best = max(float(np.interp(x, b.xs, b.mean)) for b in series)
        if best < x - 1.0:
            return max(0.0, 10.0 * math.floor((x - ZOOM_LEAD) / 10.0))
    return 0.0


def band_chart(title: str, series: Sequence[Band], *, y_label: str, x_from: float = 0.0,
               references: Sequence[tuple[str, float]] = (), marker_x: float | None = 100.0,
               x_label: str = "arrived GPU demand (% of capacity)", ceiling: float | None = None) -> str:
    """An SVG chart of mean lines with their min-max bands; ``x_from`` zooms the x axis, the y axis fits what is
    visible from there on (and the ``references``, horizontal dashed lines labelled at the right, and the
    ``ceiling``, a green mark at 100 % demand: ``hami simulate --bound``)."""
    xs = [x for b in series for x in b.xs] or [0.0, 100.0]
    x0, x1 = x_from, max(max(xs), x_from + 1.0)
    visible = [y for b in series for i, x in enumerate(b.xs) if x >= x0
               for y in (b.mean[i], *(b.lo[i] if b.lo else b.mean[i], b.hi[i] if b.hi else b.mean[i]))]
    visible += [v for _, v in references] + ([ceiling] if ceiling is not None else [])
    lo, hi = (min(visible), max(visible)) if visible else (0.0, 1.0)
    pad = max((hi - lo) * 0.08, 0.5)
    ystep = _nice_step(hi - lo + 2 * pad)
    y0 = max(0.0, math.floor((lo - pad) / ystep) * ystep)
    y1 = math.ceil((hi + pad) / ystep) * ystep
    if y1 <= y0:
        y1 = y0 + ystep
    xstep = _nice_step(x1 - x0)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return TOP + ph - (y - y0) / (y1 - y0) * ph

    clip = "clip-" + "".join(c if c.isalnum() else "-" for c in title.lower())
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" aria-label="{_esc(title)}" '
             f'font-size="12" font-family="system-ui, sans-serif">',
             f'<defs><clipPath id="{clip}"><rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/></clipPath></defs>']
    y = y0
    while y <= y1 + 1e-9:
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#e6e8eb"/>'
                     f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end" fill="#444">{y:g}</text>')
        y += ystep
    x = math.ceil(x0 / xstep) * xstep
    while x <= x1 + 1e-9:
        parts.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{TOP + ph}" y2="{TOP + ph + 4}" stroke="#555"/>'
                     f'<text x="{px(x):.1f}" y="{TOP + ph + 17}" text-anchor="middle" fill="#444">{x:g}</text>')
        x += xstep
    parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>'
                 f'<text x="{LEFT + pw / 2}" y="{H - 6}" text-anchor="middle">{_esc(x_label)}</text>'
                 f'<text x="14" y="{TOP + ph / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 14 {TOP + ph / 2})">{_esc(y_label)}</text>')
    if marker_x is not None and x0 <= marker_x <= x1:
        parts.append(f'<line x1="{px(marker_x):.1f}" x2="{px(marker_x):.1f}" y1="{TOP}" y2="{TOP + ph}" '
                     'stroke="#999" stroke-dasharray="4 3"><title>arrived demand = 100 % of capacity</title></line>')
    body = []
    for b in series:
        if b.lo and b.hi:
            ring = [*zip(b.xs, b.hi, strict=True), *reversed(list(zip(b.xs, b.lo, strict=True)))]
            body.append(f'<polygon fill="{b.colour}" fill-opacity="0.18" stroke="none" points="'
                        + " ".join(f"{px(u):.1f},{py(v):.1f}" for u, v in ring)
                        + f'"><title>{_esc(b.label)}: lowest to highest seed</title></polygon>')
        body.append(f'<polyline fill="none" stroke="{b.colour}" stroke-width="2" points="'
                    + " ".join(f"{px(u):.1f},{py(v):.1f}" for u, v in zip(b.xs, b.mean, strict=True))
                    + f'"><title>{_esc(b.label)}</title></polyline>')
    parts.append(f'<g clip-path="url(#{clip})">{"".join(body)}</g>')
    if ceiling is not None:
        # the bound holds at 100 % arrived demand only: a mark there, not a line across the chart
        at = px(max(min(marker_x if marker_x is not None else x1, x1), x0))
        parts.append(f'<g stroke="{CEILING_COLOUR}" fill="{CEILING_COLOUR}"><title>ceiling at 100 % demand: '
                     f'{ceiling:.2f} %</title><line x1="{at - 14:.1f}" x2="{at + 14:.1f}" y1="{py(ceiling):.1f}" '
                     f'y2="{py(ceiling):.1f}" stroke-width="2"/><circle cx="{at:.1f}" cy="{py(ceiling):.1f}" r="3"/>'
                     f'<line x1="{at + 14:.1f}" x2="{LEFT + pw}" y1="{py(ceiling):.1f}" y2="{py(ceiling):.1f}" '
                     'stroke-width="1" stroke-dasharray="1 3"/></g>')
        references = [*references, ("ceiling", ceiling)]
    label_y = _spread_labels([py(v) for _, v in references], TOP + 6, TOP + ph)
    published = len(references) - (ceiling is not None)
    for i, ((name, value), ly) in enumerate(zip(references, label_y, strict=True)):
        if i >= published:  # the ceiling: its line is drawn above, only its label here
            parts.append(f'<text x="{LEFT + pw + 4}" y="{ly + 4:.1f}" font-size="11" fill="{CEILING_COLOUR}">'
                         f'{_esc(name)} {value:.2f}</text>')
            continue
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{py(value):.1f}" y2="{py(value):.1f}" stroke="#333" '
                     f'stroke-dasharray="6 3" stroke-width="1"><title>published {_esc(name)}: {value:.2f} %'
                     f'</title></line><text x="{LEFT + pw + 4}" y="{ly + 4:.1f}" font-size="11" fill="#333">'
                     f'{_esc(name)} {value:.2f}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _spread_labels(ys: Sequence[float], top: float, bottom: float, gap: float = 12.0) -> list[float]:
    """Label positions near ``ys`` at least ``gap`` apart (close published figures would overprint)."""
    order = sorted(range(len(ys)), key=lambda i: ys[i])
    out = list(ys)
    last = top - gap
    for i in order:
        out[i] = max(ys[i], last + gap)
        last = out[i]
    overflow = (last - bottom) if ys else 0.0
    if overflow > 0:
        out = [y - overflow for y in out]
    return out


def _colour(v: float) -> str:
    v = max(0.0, min(1.0, v))
    for (a, ca), (b, cb) in itertools.pairwise(SCALE):
        if v <= b:
            t = (v - a) / (b - a)
            return "rgb({},{},{})".format(*(round(p + (q - p) * t) for p, q in zip(ca, cb, strict=True)))
    return "rgb({},{},{})".format(*SCALE[-1][1])


def heat_map(title: str, values: Mapping[str, float]) -> str:
    """Nodes (by name) as cells coloured by their GPU allocation; hover shows node and value."""
    names = sorted(values)
    columns = max(1, min(len(names), 60, max(10, math.ceil(math.sqrt(2 * len(names))))))
    rows = max(1, math.ceil(len(names) / columns))
    cell = 10
    width, height = columns * cell, rows * cell
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="-1 -1 {width + 2} {height + 2}" role="img" '
             f'aria-label="{_esc(title)}">']
    for i, name in enumerate(names):
        v = max(0.0, min(1.0, values[name]))
        x, y = (i % columns) * cell, (i // columns) * cell
        parts.append(f'<rect x="{x}" y="{y}" width="{cell - 1}" height="{cell - 1}" fill="{_colour(v)}" '
                     f'stroke="#d8dde3" stroke-width="0.5"><title>{_esc(name)}: {v:.0%}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def colour_scale() -> str:
    """The heat maps' legend: the colour scale from 0 % to 100 % allocated."""
    stops = "".join(f'<stop offset="{o:.0%}" stop-color="rgb({c[0]},{c[1]},{c[2]})"/>' for o, c in SCALE)
    return ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="-12 0 264 30" class="scale" role="img" '
            'aria-label="colour scale: GPU allocation of a node, 0 to 100 %" font-size="10">'
            f'<defs><linearGradient id="heat-scale">{stops}</linearGradient></defs>'
            '<rect x="10" y="2" width="220" height="12" fill="url(#heat-scale)" stroke="#999" stroke-width="0.5"/>'
            + "".join(f'<text x="{10 + 220 * t}" y="26" text-anchor="middle">{t:.0%}</text>'
                      for t in (0, 0.25, 0.5, 0.75, 1)) + "</svg>")


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], *, text_cols: Sequence[int] = (0,),
           cls: str = "") -> str:
    """A table of already escaped cells, in a box that scrolls sideways when the page is narrow."""
    th = "".join(f'<th class="text">{h}</th>' if i in text_cols else f"<th>{h}</th>" for i, h in enumerate(head))
    body = "".join("<tr>" + "".join(f'<td class="text">{c}</td>' if i in text_cols else f"<td>{c}</td>"
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<div class="scroll"><table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def _bar(value: float, top: float) -> str:
    width = 0.0 if top <= 0 else 6.0 * max(0.0, value) / top
    return f'<span class="bar" style="width:{width:.2f}em"></span>'


def _median_run(rs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The run in the middle by GPU allocation at 100 % demand (at the end when demand never got there); the lower
    of the two middle ones for an even count."""
    def key(r: Mapping[str, Any]) -> float:
        v = r.get("gpu_allocation_ratio_at_100")
        return float(v if v is not None else r["final_gpu_allocation_ratio"])
    ordered = sorted(rs, key=lambda r: (key(r), r["seed"] if r["seed"] is not None else -1))
    return ordered[(len(ordered) - 1) // 2]


def _summary_rows(report: Mapping[str, Any], by_policy: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[list[str]]:
    rows = []
    for label, s in report["summary"].items():
        stats = s.get("gpu_allocation_ratio_at_100_stats")
        at100 = "-" if not stats else _num(stats["mean"], unit="%") + (
            f" ± {stats['std']:.2f}" if s["runs"] > 1 else "")
        reasons: dict[str, int] = {}
        rs = by_policy.get(label, [])
        for r in rs:
            for k, v in r["failed_by_reason"].items():
                reasons[k] = reasons.get(k, 0) + v
        top = "\n".join(f"{k} {v / max(len(rs), 1):.0f}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
        row = [_esc(label), str(s["runs"]), _esc(at100), _num(s["final_gpu_allocation_ratio"], unit="%"),
               _num(s["fragmentation_ratio_at_100"], unit="%"), f"{s['placed']:.0f}", f"{s['failed']:.0f}",
               _esc(top), _num(s["wall_s"], 1), f"{s['decisions_per_s']:.0f}"]
        if "bound" in report:
            row[3:3] = [_num(s.get("bound"), unit="%"), _num(s.get("gap_to_bound"))]
            if "moves_bound" in s:
                row[5:5] = [_num(s.get("moves_bound"), unit="%")]
        rows.append(row)
    return rows


def _ceiling(report: Mapping[str, Any], labels: Sequence[str]) -> str:
    """``--bound``: how far each policy is from the ceiling, and each seed's bound."""
    bound = report.get("bound")
    if not bound:
        return ""
    gaps = []
    for label in labels:
        s = report["summary"].get(label, {})
        if s.get("gap_to_bound") is not None:
            gaps.append(f"<li><b>{_esc(label)}</b>: {s['gap_to_bound']:.2f} points from the ceiling "
                        f"({_num(s.get('gpu_allocation_ratio_at_100'), unit='%')} of {_num(s['bound'], unit='%')})"
                        "</li>")
    rows = [[_esc("arrival order" if b["seed"] is None else b["seed"]),
             _num(b["gpu_allocation_ratio_at_100"], unit="%"),
             _esc(b["method"]) + ("" if b["optimal"] else " (not proven optimal)"), _num(b["arrived"], unit="%"),
             str(b["pods"]), str(b["gpu_pods"]), str(b["classes"]), str(b["node_types"]), _num(b["wall_s"], 2)]
            for b in bound["seeds"]]
    return ("<h2>The ceiling</h2><p>The most GPU any placement of the same arrived pods could allocate when arrived "
            "demand reaches 100 % of capacity, at most (an upper bound: pods that fit nowhere are skipped, so a "
            "policy's allocation is that of some subset of the arrived pods that fits at once).</p>"
            + (f'<ul class="gaps">{"".join(gaps)}</ul>' if gaps else "")
            + _table(["seed", "ceiling @100%", "method", "arrived", "pods", "GPU pods", "pod classes", "node types",
                      "s"], rows, text_cols=(2,)))


def _failures(labels: Sequence[str], by_policy: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    means: dict[str, dict[str, float]] = {}
    for label in labels:
        rs = by_policy[label]
        for r in rs:
            for reason, n in r["failed_by_reason"].items():
                means.setdefault(reason, {}).setdefault(label, 0.0)
                means[reason][label] += n / len(rs)
    if not means:
        return "<p>No pod failed.</p>"
    top = max(v for per in means.values() for v in per.values())
    order = sorted(means, key=lambda reason: -sum(means[reason].values()))
    rows = [[_esc(reason)] + [f"{means[reason].get(label, 0.0):.1f}{_bar(means[reason].get(label, 0.0), top)}"
                              for label in labels] for reason in order]
    return ("<p>Pods that found no node, by the reason that rejected the most nodes; mean per run.</p>"
            + _table(["reason", *(_esc(label) for label in labels)], rows))


def _per_model(labels: Sequence[str], by_policy: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    gpus: dict[str, int] = {}
    ratio: dict[str, dict[str, float]] = {}
    for label in labels:
        rs = [r for r in by_policy[label] if r["per_model"]]
        for r in rs:
            for model, m in r["per_model"].items():
                gpus[model] = int(m["gpus"])
                ratio.setdefault(model, {}).setdefault(label, 0.0)
                ratio[model][label] += m["allocation_ratio"] / len(rs)
    if not gpus:
        return "<p>No GPU registered.</p>"
    rows = [[_esc(model), str(gpus[model])] + [f"{_num(ratio[model].get(label), 1, '%')}"
                                               f"{_bar(ratio[model].get(label, 0.0), 100.0)}" for label in labels]
            for model in sorted(gpus, key=lambda m: (-gpus[m], m))]
    return ("<p>Allocated share of each GPU model when arrived demand reaches 100 % of capacity (at the end when it "
            "never does); mean over seeds.</p>" + _table(["GPU model", "GPUs", *(_esc(label) for label in labels)],
                                                        rows))


def _single_run(report: Mapping[str, Any], run: Mapping[str, Any]) -> str:
    """What the terminal prints for one detailed run: placements, device usage, quotas and the count line."""
    rows = []
    for i, p in enumerate(run["placements"], 1):
        devices = "\n".join(f"{d['container']}: {d['backend']} #{d['index']} {d['memory_mib']}MiB {d['cores']}%"
                            for d in p.get("devices", []))
        node = p["node"] or "unschedulable"
        note = p.get("note") or p["reason"] or ""
        cls = "bad" if p["node"] is None else ""
        rows.append([str(i), _esc(p["pod"]), f'<span class="{cls}">{_esc(node)}</span>', _esc(devices), _esc(note)])
    parts = ["<h2>Placements (arrival order, policy " + _esc(run["policy"]) + ")</h2>",
             _table(["#", "pod", "node", "devices", "note"], rows, text_cols=(1, 2, 3, 4), cls="placements")]
    requested = sum(1 for p in run["placements"] if not p["skipped"])
    placed = sum(1 for p in run["placements"] if p["node"] and not p["skipped"])
    frag = run["curve"][-1]["fragmentation"] if run["curve"] else 0.0
    evicted = f" ({run['evicted']} of them evicted later by preemption)" if run.get("evicted") else ""
    parts.insert(0, f'<p class="verdict"><b>{placed}/{requested}</b> pods requesting devices were placed{evicted}; '
                    f'GPU allocation {run["final_gpu_allocation_ratio"]:.2f}%, fragmentation {frag:.2f}%.</p>')
    nodes = report.get("nodes") or {}
    if nodes:
        usage = []
        for name, devs in nodes.items():
            if not devs:
                usage.append([_esc(name), "(no registered devices)", "", "", "", ""])
            for d in devs:
                usage.append([_esc(name), f"#{d['index']}", _esc(d["type"]), f"{d['used']}/{d['count']}",
                              f"{d['usedmem']}/{d['totalmem']}", f"{d['usedcores']}/{d['totalcore']}"])
        parts += ["<h2>Device usage per node</h2>",
                  _table(["node", "device", "type", "tasks", "memory MiB", "cores %"], usage, text_cols=(0, 1, 2))]
    if run.get("resource_quotas"):
        parts += ["<h2>ResourceQuota use at the end</h2>",
                  _table(["namespace", "resource", "used", "limit"],
                         [[_esc(q["namespace"]), _esc(q["resource"]), _esc(q["used"]), _esc(q["limit"])]
                          for q in run["resource_quotas"]], text_cols=(0, 1))]
    return "".join(parts)


def render(report: Mapping[str, Any], *, paper: Mapping[str, float] | None = None, trace: str = "") -> str:
    """The whole page for a ``--report`` document; ``paper``: the FGD paper's published GPU allocation at 100 %
    demand per method, for the openb ``trace`` the report ran."""
    runs = report["runs"]
    labels = list(dict.fromkeys(r["policy"] for r in runs))
    colour = {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}
    by_policy: dict[str, list[Mapping[str, Any]]] = {label: [r for r in runs if r["policy"] == label]
                                                     for label in labels}
    seeds = sorted({r["seed"] for r in runs if r["seed"] is not None})
    inputs = report.get("inputs", {})
    facts = "".join(f"<div><dt>{_esc(INPUT_LABELS.get(k, k.replace('_', ' ')))}</dt><dd>{_esc(_plain(k, v))}</dd></div>"
                    for k, v in inputs.items() if v is not None and v != [] and v != "")
    seeded = bool(seeds)
    caption = ("alloc: allocated GPU share, % of capacity, when arrived demand reaches 100 % and at the end; frag: FGD "
               "fragmentation, % of capacity" + ("; mean over seeds (± standard deviation)" if seeded else ""))
    head = ["policy", "runs", "alloc @100%", "alloc final", "frag @100%", "placed", "failed", "top failures", "s/run",
            "dec/s"]
    if "bound" in report:
        head[3:3] = ["ceiling", "gap"]
        caption += ("; ceiling: upper bound on alloc @100% for any placement of the same arrived pods; gap: points "
                    "below it")
        if any("moves_bound" in s for s in report["summary"].values()):
            head[5:5] = ["moves ceiling"]
            caption += "; moves ceiling: the same keeping every pod the run placed (what no defragmenter can pass)"
    summary = _table(head, _summary_rows(report, by_policy), text_cols=(0, head.index("top failures")),
                     cls="summary")
    ceiling = (report.get("bound") or {}).get("gpu_allocation_ratio_at_100")
    published = ""
    references: list[tuple[str, float]] = []
    if paper:
        references = [(name, paper[name]) for name in REFERENCE_LINES if name in paper]
        published = ("<p>Published (Weng et al., ATC'23, mean of 10 seeds): " + ", ".join(
            f"{_esc(k)} {v:.2f}%" for k, v in paper.items()) + "</p>")
    alloc = bands(runs, "allocated", colour)
    frag = bands(runs, "fragmentation", colour)
    start = zoom(alloc)
    spread_note = (f"line: mean over {len(seeds)} seeds ({_esc(_seed_list(seeds))}); band: lowest to highest seed"
                   if len(seeds) > 1 else ("seed " + _esc(_seed_list(seeds)) if seeds else "arrival order"))
    legend = '<ul class="legend">' + "".join(
        f'<li><span class="swatch" style="background:{colour[label]}"></span>{_esc(label)}</li>' for label in labels
    ) + ("" if not references else '<li><span class="swatch dash"></span>published (FGD paper'
         + (f", {_esc(trace)} trace" if trace else "") + ")</li>") + "</ul>"
    alloc_note = (f"x axis from {start:g} %, {ZOOM_LEAD:g} points before the best policy stops placing all the "
                  "demand that arrives" if start > 0 else "x axis from 0 %")
    charts = (
        f'<div class="charts"><figure><h3>GPU allocation vs arrived demand</h3>{legend}'
        + band_chart("GPU allocation ratio vs arrived demand", alloc, y_label="allocated GPU (% of capacity)",
                     x_from=start, references=references, ceiling=ceiling)
        + f"<figcaption>{spread_note}; {alloc_note}; dashed vertical: demand = 100 % of capacity"
        + ("; green: the ceiling at 100 % demand (mean over seeds)" if ceiling is not None else "") + ".</figcaption>"
        f'</figure><figure><h3>Fragmentation vs arrived demand (FGD measure)</h3>{legend}'
        + band_chart("Fragmentation vs arrived demand (FGD measure)", frag, y_label="fragmented GPU (% of capacity)")
        + f"<figcaption>{spread_note}.</figcaption></figure></div>")
    heat_parts = []
    for label in labels:
        rs = [r for r in by_policy[label] if r["node_allocation"]]
        if not rs:
            continue
        run = _median_run(rs)
        which = ("median run of " + str(len(rs)) + f" seeds by GPU allocation @100%: seed {run['seed']}"
                 if len(rs) > 1 else ("seed " + str(run["seed"]) if run["seed"] is not None else "the run"))
        cells = heat_map(f"{label}: GPU allocation per node", run["node_allocation"])
        heat_parts.append(f"<figure><h3>{_esc(label)}</h3>{cells}"
                          f"<figcaption>{_esc(which)}; {len(run['node_allocation'])} nodes with GPUs, by name"
                          "</figcaption></figure>")
    heat = ("<h2>GPU allocation per node, at the end</h2>" + colour_scale() + '<div class="heat">' + "".join(heat_parts)
            + "</div>") if heat_parts else ""
    single = ""
    if len(runs) == 1 and runs[0].get("placements"):
        single = _single_run(report, runs[0])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>hami simulate report</title>
<style>{CSS}</style></head><body><main>
<h1>hami simulate</h1>
<dl class="inputs">{facts}</dl>
<h2>Policies compared{" (mean over seeds)" if seeded else ""}</h2>
{summary}
<p class="caption">{_esc(caption)}</p>
{published}
{_ceiling(report, labels)}
{single}
<h2>Allocation and fragmentation as demand arrives</h2>
{charts}
<h2>Failure reasons</h2>
{_failures(labels, by_policy)}
<h2>GPU models</h2>
{_per_model(labels, by_policy)}
{heat}
</main></body></html>
"""


CSS = """
*{box-sizing:border-box}
body{margin:0;color:#1b1f24;background:#fff;font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:80rem;margin:0 auto;padding:1rem clamp(.6rem,3vw,2rem) 3rem}
h1{font-size:1.6rem;margin:.3em 0 .6em}
h2{font-size:1.15rem;margin:1.8em 0 .6em;padding-bottom:.2em;border-bottom:1px solid #d0d7de}
h3{font-size:1rem;margin:.2em 0}
dl.inputs{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,10rem),1fr));gap:.35rem 1.5rem;margin:0}
dl.inputs div{min-width:0}
dt{color:#5b636e;font-size:.8rem}
dd{margin:0;overflow-wrap:anywhere}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
th,td{padding:.3rem .6rem;border-bottom:1px solid #d0d7de;text-align:right;vertical-align:top}
th{background:#f6f8fa;white-space:nowrap}
th.text{text-align:left}
td.text{text-align:left;white-space:pre-line}
table.summary td:first-child{font-weight:600;white-space:nowrap}
.bad{color:#b42318;font-weight:600}
.caption,figcaption{font-size:.85rem;color:#5b636e}
.verdict{font-size:1.05rem}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,30rem),1fr));gap:1.5rem}
.heat{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,22rem),1fr));gap:1.5rem}
figure{margin:0;min-width:0}
svg{display:block;width:100%;height:auto;max-width:100%}
svg.scale{max-width:20rem}
.legend{display:flex;flex-wrap:wrap;gap:.2rem 1rem;list-style:none;padding:0;margin:.2rem 0 .4rem;font-size:.9rem}
.swatch{display:inline-block;width:.9em;height:.9em;border-radius:2px;margin-right:.35em;vertical-align:-.1em}
.swatch.dash{height:0;border-top:2px dashed #333;vertical-align:.25em}
.bar{display:inline-block;height:.65em;background:#6b8fc7;margin-left:.4em;vertical-align:baseline;border-radius:1px}
"""
