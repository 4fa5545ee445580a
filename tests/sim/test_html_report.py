"""The HTML report's pieces without a browser: bands across seeds, the zoom, the median run, the published lines."""

from __future__ import annotations

import re
from typing import Any

from hami_core.sim.html import Band, bands, render, zoom


def _run(policy: str, seed: int | None, curve: list[tuple[float, float]], at100: float) -> dict[str, Any]:
    return {"policy": policy, "seed": seed, "curve": [{"arrived": a, "allocated": y, "fragmentation": 5.0}
                                                      for a, y in curve],
            "gpu_allocation_ratio_at_100": at100, "final_gpu_allocation_ratio": at100, "failed_by_reason": {},
            "per_model": {"V100M32": {"gpus": 8, "allocated_gpus": 6.0, "allocation_ratio": 75.0}},
            "node_allocation": {f"n{seed}": 0.5}, "placed": 1, "failed": 0}


def _report(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary = {p: {"runs": 2, "gpu_allocation_ratio_at_100": 90.0,
                   "gpu_allocation_ratio_at_100_stats": {"mean": 90.0, "std": 1.0, "min": 89.0, "max": 91.0},
                   "final_gpu_allocation_ratio": 90.0, "fragmentation_ratio_at_100": None, "placed": 1.0,
                   "failed": 0.0, "wall_s": 1.0, "decisions_per_s": 10.0}
               for p in dict.fromkeys(r["policy"] for r in runs)}
    return {"version": 1, "inputs": {"cluster": "c.csv", "seeds": [1, 2, 3, 7], "inflate": 1.3, "protocol": None,
                                     "policies": list(summary)}, "runs": runs, "summary": summary}


def test_band_is_the_mean_and_the_extremes_on_a_common_grid() -> None:
    runs = [_run("binpack", 1, [(0, 0), (5.2, 5.2), (10.4, 9.0)], 90), _run("binpack", 2, [(0, 0), (5.1, 5.1),
                                                                                           (10.1, 7.0)], 89)]
    (band,) = bands(runs, "allocated", {"binpack": "#000"})
    assert band.xs == [0.0, 5.0, 10.0, 10.1]  # every 5 % up to where the shortest seed ends
    assert band.mean[1] == 5.0 and band.lo is not None and band.hi is not None
    assert band.lo[-1] < band.mean[-1] < band.hi[-1]


def test_zoom_starts_before_the_knee_of_the_best_policy() -> None:
    diagonal = [float(x) for x in range(0, 135, 5)]
    best = Band("a", "#000", diagonal, [min(x, 92.0) for x in diagonal])
    worse = Band("b", "#111", diagonal, [min(x * 0.97, 85.0) for x in diagonal])
    assert zoom([best, worse]) == 60.0  # the knee is past 90 % demand, the chart starts 30 points earlier
    early = Band("c", "#222", diagonal, [x * 0.5 for x in diagonal])
    assert zoom([early]) == 0.0


def test_page_shows_published_lines_median_seed_and_no_reprs() -> None:
    runs = [_run("binpack", s, [(0, 0), (100, v), (130, v)], v) for s, v in ((1, 91.0), (2, 93.0), (3, 92.0))]
    page = render(_report(runs), paper={"GPU packing": 91.78, "Best-fit": 92.86, "FGD": 95.23, "Random-fit": 86.3},
                  trace="default")
    text = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    assert "FGD 95.23" in text and "Random-fit 86.30%" in text and 'stroke-dasharray="6 3"' in text
    assert "median run of 3 seeds by GPU allocation @100%: seed 3" in text
    assert "1-3, 7" in text  # the seeds, as ranges
    assert not re.search(r"\bNone\b|\bnan\b|\{'|\['", text)
    assert "protocol" not in text  # an input that does not apply is left out, not shown as None
    without = render(_report(runs))
    assert "FGD 95.23" not in without and "published" not in without
