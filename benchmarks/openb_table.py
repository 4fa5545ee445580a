"""Markdown table of `hami simulate --report` files next to the FGD paper's figures (docs/simulation.md).

    hami simulate --trace-nodes T/openb_node_list_gpu_node.csv --trace-pods T/openb_pod_list_default.csv \\
        --policy binpack,spread,binpack/spread --seeds 42-51 --report default.json
    python benchmarks/openb_table.py default.json gpushare100.json ...
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hami_core.sim.cli import PAPER


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__)
        return 2
    reports = {Path(p).stem: json.loads(Path(p).read_text()) for p in paths}
    policies = list(dict.fromkeys(k for r in reports.values() for k in r["summary"]))
    paper_cols = ["GPU packing", "Best-fit", "FGD"]
    head = ["trace", *[f"hami {p}" for p in policies], *[f"paper {c}" for c in paper_cols]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for trace, report in reports.items():
        cells = [trace]
        for p in policies:
            s = report["summary"].get(p)
            st = s and s.get("gpu_allocation_ratio_at_100_stats")
            cells.append("-" if not st else f"{st['mean']:.2f} ± {st['std']:.2f}")
        cells += [f"{PAPER.get(trace, {}).get(c, float('nan')):.2f}" for c in paper_cols]
        print("| " + " | ".join(cells) + " |")
    print()
    head = ["trace", *[f"{p}: frag @100 / s per run" for p in policies]]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for trace, report in reports.items():
        cells = [trace]
        for p in policies:
            s = report["summary"].get(p)
            cells.append("-" if not s else f"{s['fragmentation_ratio_at_100']:.2f} % / {s['wall_s']:.1f} s")
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
