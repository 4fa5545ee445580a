"""What the components' commands share: flag types, the usage error, the cluster-source flags and the cluster
they choose, and serving until a signal.

Each component defines its own ``hami`` subcommand as ``add_arguments(parser)`` and ``run(args) -> int`` in its
``cli`` module (:mod:`hami_core.scheduler.cli`, :mod:`hami_core.node.cli`, :mod:`hami_core.monitor.cli`,
:mod:`hami_core.sim.cli`); :mod:`hami_core.cli` only dispatches. This module sits with :mod:`hami_core.cluster`
in the layering (tests/test_layers.py): the components import it, it imports nothing of theirs, and the cluster
adapters only once a command runs, so that building the parser never needs Kubernetes.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import threading
from typing import Any

from hami_core.plugins.errors import HamiError

__all__ = ["UsageError", "add_cluster_source", "cluster_file", "cluster_from_args", "count", "one_line", "port",
           "positive_seconds", "seconds", "stop_on_signals", "unavailable"]


class UsageError(HamiError):
    """A flag's value that cannot be used, found only once it is acted on (a ``--cluster-file`` that is not a
    cluster): one line and exit status 2, as argparse's own usage errors."""


def one_line(exc: BaseException) -> str:
    """``exc`` as one line of text (its type's name when it says nothing)."""
    return " ".join(str(exc).split()) or type(exc).__name__


# ------------------------------------------------------------------------------------------ flag types

def seconds(text: str) -> float:
    """An argparse type: a non-negative number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number of seconds, 0 or more")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (a period; 0 would spin)."""
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range (0 to 65535)")
    return value


def count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more")
    return value


# ------------------------------------------------------------------------------------------ the cluster

def add_cluster_source(parser: argparse.ArgumentParser, *, cluster_file_help: str,
                       kubeconfig_help: str = "kubeconfig file (default: the usual lookup)") -> None:
    """``--kubeconfig`` / ``--in-cluster`` / ``--cluster-file``, one at most (see :func:`cluster_from_args`)."""
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--kubeconfig", metavar="PATH", help=kubeconfig_help)
    source.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    source.add_argument("--cluster-file", metavar="PATH", help=cluster_file_help)


def cluster_file(path: str) -> Any:
    """The in-memory cluster of ``--cluster-file``; a file that is not one is a usage error naming the flag."""
    from hami_core.cluster.memory import MemoryCluster

    try:
        return MemoryCluster.from_file(path)
    except HamiError as exc:
        raise UsageError(f"--cluster-file: {one_line(exc)}") from None


def cluster_from_args(args: argparse.Namespace, **client: Any) -> Any:
    """The cluster the :func:`add_cluster_source` flags name: the ``--cluster-file`` one, else Kubernetes (the
    kubeconfig, the pod's service account, or the usual lookup) with ``client`` options (``qps``, ``burst``)."""
    if args.cluster_file:
        return cluster_file(args.cluster_file)
    try:
        kube = importlib.import_module("hami_core.cluster.kube")
    except ImportError as exc:
        raise HamiError(f"the Kubernetes cluster adapter is unavailable ({exc}); use --cluster-file") from None
    return kube.KubeCluster(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster, **client)


def unavailable(command: str, extra: str | None, exc: BaseException) -> HamiError:
    """The error of a command that cannot load: why, and the extra that brings its dependencies (if one does)."""
    hint = f"; install 'hami-core[{extra}]'" if extra else ""
    return HamiError(f"hami {command} is unavailable: {type(exc).__name__}: {one_line(exc)}{hint}")


# ------------------------------------------------------------------------------------------ serving

def stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: a service runs until it is set, then shuts down gracefully."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop
