"""Where the in-process filter+bind time goes: ``Extender.filter``, ``Extender.bind`` and, inside bind, the
re-check under the node lock (``_verify_fits``) and its fresh read of the node's pods. No HTTP; wall ms per pod.

    python benchmarks/profile_bind.py [--nodes 1000] [--pods 1500]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Callable
from typing import Any

from benchkit import Service, logging_quiet, request_pod

from hami_core.scheduler.extender import Extender


def _timed(owner: Any, name: str, acc: dict[str, float]) -> None:
    """Wrap ``owner.name`` so that its wall time adds up in ``acc[name]``."""
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            acc[name] += time.perf_counter() - t0

    setattr(owner, name, wrapper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1500)
    args = parser.parse_args()
    logging_quiet()
    svc = Service(args.nodes, 0.0)
    pods = [request_pod("1gpu", f"pb-{i}") for i in range(args.pods)]
    for pod in pods:
        svc.cluster.add_pod(pod)
    svc.release_locks_when_bound()
    acc = {"filter": 0.0, "bind": 0.0, "_verify_fits": 0.0, "pods_on_node": 0.0}
    _timed(Extender, "_verify_fits", acc)
    _timed(svc.cluster, "pods_on_node", acc)
    ext = svc.svc.extender
    gc.freeze()
    try:
        for pod in pods:
            body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": svc.names}).encode()
            t0 = time.perf_counter()
            node = ext.filter(json.loads(body))["NodeNames"][0]
            t1 = time.perf_counter()
            meta = pod["metadata"]
            result = ext.bind({"PodName": meta["name"], "PodNamespace": "bench", "PodUID": meta["uid"], "Node": node})
            acc["filter"] += t1 - t0
            acc["bind"] += time.perf_counter() - t1
            assert not result.get("Error"), result
    finally:
        svc.stop()
    labels = {"filter": "filter", "bind": "bind", "_verify_fits": "  re-check under the node lock",
              "pods_on_node": "    fresh read of the node's pods"}
    for key, label in labels.items():
        print(f"{label:34s} {1000 * acc[key] / args.pods:7.3f} ms/pod")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
