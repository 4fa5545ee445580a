"""cProfile of ``Engine.schedule(limit=1)`` and ``Extender.filter`` (in-process, no HTTP) at N nodes, 50% usage.

    python benchmarks/profile_filter.py [--nodes 5000] [--pods 200] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import pstats

from benchkit import Service, logging_quiet, request_pod


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    logging_quiet()
    svc = Service(args.nodes, 0.5)
    gc.freeze()
    engine, ext = svc.svc.engine, svc.svc.extender
    pod = request_pod("1gpu")
    for title, fn in (("Engine.schedule(limit=1)", lambda: engine.schedule(pod, limit=1)),
                      ("Extender.filter (ExtenderArgs decoded + reply encoded)", None)):
        prof = cProfile.Profile()
        if fn is not None:
            prof.enable()
            for _ in range(args.pods):
                fn()
            prof.disable()
        else:
            svc.cluster.add_pod(pod)
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": svc.names}).encode()
            prof.enable()
            for _ in range(args.pods):
                json.dumps(ext.filter(json.loads(body))).encode()
            prof.disable()
        print(f"===== {title}: {args.pods} calls on {args.nodes} nodes =====")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    svc.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
