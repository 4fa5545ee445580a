"""``python tests/e2e/realkube/kubelet_main.py``: the kubelet parts of :class:`~realkube.objects.KubeletSim` as a
process of their own (``make bench-e2e``: so that their work does not share the benchmark's interpreter)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from realkube.objects import KubeletSim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--watch-kubeconfig", required=True, help="kubeconfig of the pod watch (the node's kubelet)")
    parser.add_argument("--device-kubeconfig", required=True, help="kubeconfig Allocate runs with (device plugin)")
    parser.add_argument("--prefix", required=True, help="play the kubelet of every node whose name starts with it")
    parser.add_argument("--run-pods", action="store_true", help="also mark allocated pods Running")
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from hami_core.cluster.kube import KubeCluster

    sim = KubeletSim(KubeCluster(kubeconfig=args.watch_kubeconfig, qps=0),
                     KubeCluster(kubeconfig=args.device_kubeconfig, qps=0), [], run_pods=args.run_pods,
                     workers=args.workers, prefix=args.prefix).start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print("kubelet sim watching", flush=True)
    stop.wait()
    sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
