"""``hami monitor``: the per-container GPU usage exporter and priority feedback loop of this node; its
``add_arguments`` and ``run``, dispatched by :mod:`hami_core.cli`.

Importing this module is cheap and needs none of the ``monitor`` extra's packages (:func:`run` imports the
service).
"""

from __future__ import annotations

import argparse
import logging
import os

from hami_core.cmdline import (
    add_cluster_source,
    cluster_from_args,
    port,
    positive_seconds,
    seconds,
    stop_on_signals,
    unavailable,
)
from hami_core.plugins.errors import HamiError

__all__ = ["add_arguments", "run"]

#: HAMi-core's cache directories on the node (``<podUID>_<container>/``)
DEFAULT_CONTAINERS_DIR = "/usr/local/vgpu/containers"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami monitor``."""
    parser.description = (
        "Serve Prometheus metrics (/metrics) of the HAMi-core shared regions under --containers-dir and run the "
        "priority feedback loop. Pods come from Kubernetes or a cluster file when one is given, from the directory "
        "names otherwise.")
    parser.add_argument("--containers-dir", default=DEFAULT_CONTAINERS_DIR, metavar="DIR",
                        help=f"HAMi-core cache directories <podUID>_<container>/ (default: {DEFAULT_CONTAINERS_DIR})")
    parser.add_argument("--host", default="0.0.0.0", help="metrics address (default: 0.0.0.0)")
    parser.add_argument("--port", type=port, default=9394, help="metrics port, 0 for any free one (default: 9394)")
    add_cluster_source(parser, kubeconfig_help="kubeconfig file",
                       cluster_file_help="Pods from this YAML file (no Kubernetes)")
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""), metavar="NAME",
                        help="this node; pods are filtered by it (default: $NODE_NAME)")
    parser.add_argument("--legacy-metrics", action="store_true", help="also emit HAMi's pre-2.5 metric names")
    parser.add_argument("--feedback", action=argparse.BooleanOptionalAction, default=True,
                        help="run the priority feedback loop, writing recent_kernel/utilization_switch (default: on)")
    parser.add_argument("--interval", type=positive_seconds, default=5.0, metavar="SECONDS",
                        help="feedback and rescan period (default: 5)")
    parser.add_argument("--gc-after", type=seconds, default=300.0, metavar="SECONDS",
                        help="remove a deleted pod's directory once unmodified this long (default: 300)")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT, then stop the loop and the server."""
    try:
        from hami_core.monitor.service import Monitor, MonitorOptions
    except ImportError as exc:
        raise unavailable("monitor", "monitor", exc) from None

    # Without a cluster the pods are known only by their directory names (<podUID>_<container>).
    cluster = cluster_from_args(args) if args.cluster_file or args.kubeconfig or args.in_cluster else None
    options = MonitorOptions(containers_dir=args.containers_dir, host=args.host, port=args.port,
                             node_name=args.node_name, legacy_metrics=args.legacy_metrics, feedback=args.feedback,
                             interval_s=args.interval, gc_after_s=args.gc_after)
    monitor = Monitor(options, cluster)
    stop = stop_on_signals()
    try:
        monitor.start()
    except OSError as exc:
        raise HamiError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    # INFO: the server commands log at INFO unless told otherwise (hami_core.cli.SERVER_LOG_LEVEL)
    logging.getLogger("hami.monitor").info(
        "hami monitor serving %s for %s; feedback %s; pods from %s", monitor.url, args.containers_dir,
        "on" if args.feedback else "off", "the cluster" if cluster is not None else "directory names")
    stop.wait()
    monitor.stop()
    return 0
