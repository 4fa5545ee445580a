"""The ``hami`` command: ``hami plugins``, ``hami version`` and ``hami simulate``.

Errors raised by hami-core (:class:`HamiError`) are printed as one line, ``hami: error: <message>``,
with exit status 1; no traceback reaches the user. Usage errors exit with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import HamiPluginManager, get_plugin_manager

__all__ = ["main"]

PROG = "hami"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LOG_LEVEL = "WARNING"
_STATUS_STYLE = {"loaded": "green", "builtin": "cyan", "failed": "red", "blocked": "yellow"}

Handler = Callable[[argparse.Namespace, list[str]], int]


class UsageError(HamiError):
    """A flag's value that cannot be used, found only once it is acted on (a ``--cluster-file`` that is not a
    cluster): one line and exit status 2, as argparse's own usage errors."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hami`` command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    parser = _build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if args.command is None:
            parser.print_help(sys.stderr)
            return 2
        if extra and args.command != "simulate":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:
        return _exit_status(exc)

    args.log_level = getattr(args, "log_level", DEFAULT_LOG_LEVEL)
    _configure_logging(args.log_level)
    handler: Handler = args.handler
    try:
        return handler(args, extra)
    except UsageError as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except HamiError as exc:
        print(f"{PROG}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _build_parser() -> argparse.ArgumentParser:
    # --log-level is accepted before or after the subcommand. The parsers share this one action, so its
    # default must stay SUPPRESS (a subcommand would otherwise overwrite a value given before it); main()
    # supplies the real default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--log-level", type=str.upper, choices=LOG_LEVELS, default=argparse.SUPPRESS,
                        help=f"logging threshold on stderr (default: {DEFAULT_LOG_LEVEL})")

    parser = argparse.ArgumentParser(prog=PROG, parents=[common],
                                     description="HAMi GPU-sharing scheduler: plugins, simulation, version.")
    parser.set_defaults(command=None)
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    plugins = commands.add_parser(
        "plugins", parents=[common], help="list plugins and the backends they register",
        description="List built-in and installed plugins, why any was skipped, and the device backends each "
                    "registers with the device configuration (default: every vendor section at HAMi's chart defaults).")
    plugins.add_argument("action", nargs="?", choices=("list", "check"), default="list",
                         help="list (default) the plugins; check: load every plugin, register its backends and "
                              "exit 1 on any contract problem or failed import")
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plugins.add_argument("--config", metavar="PATH", help="device-config.yaml to compute backends with")
    plugins.set_defaults(command="plugins", handler=_cmd_plugins)

    version = commands.add_parser("version", parents=[common], help="print the hami-core version")
    version.set_defaults(command="version", handler=_cmd_version)

    # The simulator defines its own arguments; they are parsed only once it is imported, so a broken
    # simulator cannot break `hami plugins`.
    simulate = commands.add_parser("simulate", parents=[common], add_help=False,
                                   help="place a workload onto a cluster in-process (hami simulate -h)")
    simulate.set_defaults(command="simulate", handler=_cmd_simulate)

    _add_scheduler_parser(commands, common)
    _add_monitor_parser(commands, common)
    _add_device_plugin_parser(commands, common)
    certs = commands.add_parser("certs", parents=[common], help="write a self-signed TLS certificate and key",
                                description="Write tls.crt (mode 0644) and tls.key (mode 0600, created afresh, "
                                            "never through a symbolic link) self-signed, for serving the "
                                            "scheduler over TLS locally.")
    certs.add_argument("--out", metavar="DIR", required=True, help="directory to write tls.crt and tls.key to")
    certs.add_argument("--host", metavar="NAME", action="append", dest="hosts",
                       help="DNS name or IP the certificate is valid for (repeatable; default localhost, 127.0.0.1)")
    certs.add_argument("--days", type=int, default=365, help="validity in days (default: 365)")
    certs.add_argument("--force", action="store_true",
                       help="replace an existing tls.crt/tls.key (removed, then created afresh; a symbolic link "
                            "there is refused either way)")
    certs.set_defaults(command="certs", handler=_cmd_certs)
    return parser


def _seconds(text: str) -> float:
    """An argparse type: a non-negative number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number of seconds, 0 or more")
    return value


def _positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (a period; 0 would spin)."""
    value = _seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is out of range (0 to 65535)")
    return value


def _bind(default_port: int, *, empty: bool = False) -> Callable[[str], str]:
    """An argparse type checking ``HOST:PORT`` with :func:`~hami_core.scheduler.server.parse_bind` (``empty``:
    "" is allowed and means disabled); the text itself is kept for messages."""

    def check(text: str) -> str:
        if empty and text == "":
            return text
        from hami_core.scheduler.server import parse_bind

        try:
            parse_bind(text, default_port)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    return check


def _count(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more")
    return value


def _identity_names(text: str) -> tuple[str, ...]:
    """An argparse type: a comma-separated list of Kubernetes user or group names."""
    from hami_core.scheduler.identity import parse_names

    try:
        return parse_names(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_scheduler_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    from hami_core.scheduler.inflight import DEFAULT_INFLIGHT_LIMIT

    sched = commands.add_parser(
        "scheduler", parents=[common], help="serve the kube-scheduler extender and admission webhook",
        description="Serve HAMi's scheduler extender (/filter, /bind), mutating webhook (/webhook), /healthz, "
                    "/readyz and Prometheus metrics, against a Kubernetes cluster or an in-memory cluster file.")
    source = sched.add_mutually_exclusive_group()
    source.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: the usual lookup)")
    source.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    source.add_argument("--cluster-file", metavar="PATH",
                        help="serve an in-memory cluster of the Nodes and Pods in this YAML file (no Kubernetes)")
    sched.add_argument("--http-bind", type=_bind(9443), default="127.0.0.1:9443", metavar="HOST:PORT",
                       help="extender address, and the webhook's without --webhook-bind (default: 127.0.0.1:9443)")
    sched.add_argument("--webhook-bind", type=_bind(9443), metavar="HOST:PORT",
                       help="serve /webhook, /healthz and /readyz on this address and only /filter and /bind on "
                            "--http-bind, e.g. --webhook-bind=0.0.0.0:9443 --http-bind=127.0.0.1:9444 to keep the "
                            "extender on loopback beside kube-scheduler (default: one listener for all, as HAMi)")
    sched.add_argument("--http-server", choices=("asyncio", "uvicorn"), default="asyncio",
                       help="HTTP server: asyncio (hand-written, httptools parser) or uvicorn; both enforce the same "
                            "limits and answer alike (default: asyncio)")
    sched.add_argument("--client-ca-file", metavar="FILE",
                       help="require a client certificate signed by this CA (PEM) for /filter and /bind "
                            "(kube-scheduler's extender tlsConfig certFile/keyFile); needs --tls-cert")
    sched.add_argument("--webhook-client-ca-file", metavar="FILE",
                       help="require a client certificate signed by this CA (PEM) for /webhook (kube-apiserver's "
                            "AdmissionConfiguration kubeConfigFile); needs --tls-cert; probes need none")
    sched.add_argument("--extender-token-file", metavar="FILE",
                       help="accept 'Authorization: Bearer TOKEN' for /filter and /bind with a token from this file "
                            "(one a line; re-read when it changes); with --client-ca-file either one suffices")
    sched.add_argument("--metrics-bind", type=_bind(9395, empty=True), default=":9395", metavar="HOST:PORT",
                       help="metrics address, empty to disable (default: :9395)")
    sched.add_argument("--metrics-device-detail", action="store_true",
                       help="export HAMi's per-device and per-pod series (hami_gpu_*, hami_node_gpu_*, hami_vgpu_*; "
                            "a series per GPU and per pod) instead of one per node and device type")
    sched.add_argument("--tls-cert", metavar="FILE", help="TLS certificate (PEM); with --tls-key serves HTTPS")
    sched.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    sched.add_argument("--scheduler-name", default="hami-scheduler",
                       help="scheduler name set by the webhook and used as event source (default: hami-scheduler)")
    sched.add_argument("--trusted-identities", type=_identity_names, metavar="USER,...",
                       help="user names (as kube-apiserver authenticates them) that may change the scheduler-owned pod "
                            "annotations (hami.io/vgpu-node, bind phase and time, every vendor's to-allocate and "
                            "allocated keys); the webhook denies anyone else's UPDATE that adds, changes or removes "
                            "one (default: system:serviceaccount:kube-system:hami-scheduler,"
                            "system:serviceaccount:kube-system:hami-device-plugin)")
    sched.add_argument("--trusted-groups", type=_identity_names, default=(), metavar="GROUP,...",
                       help="group names whose members may too (default: none; system:nodes, every kubelet, is not "
                            "trusted)")
    sched.add_argument("--node-scheduler-policy", choices=("binpack", "spread", "fgd"),
                       help="default node policy (default: the device config's, else binpack)")
    sched.add_argument("--gpu-scheduler-policy", metavar="POLICY",
                       help="default GPU policy, e.g. spread, binpack, topology-aware (default: the device "
                            "config's, else spread)")
    sched.add_argument("--device-config", metavar="PATH", help="device-config.yaml (default: built-in defaults)")
    sched.add_argument("--node-lock-timeout", type=_seconds, metavar="SECONDS",
                       help="node lock expiry (default: the device config's scheduler.nodeLockTimeout, 300); a "
                            "lock whose pod is bound and still waits for its Allocate is kept past it")
    sched.add_argument("--node-lock-retry-timeout", type=_seconds, default=28.0, metavar="SECONDS",
                       help="how long PodGroup members wait for a locked node (default: 28)")
    sched.add_argument("--node-lock-wait", type=_seconds, default=10.0, metavar="SECONDS",
                       help="how long a bind of any other pod waits, queued in arrival order, for a node another "
                            "pod has locked until its device plugin's Allocate (default: 10; 0 fails the bind at "
                            "once, as HAMi does, and kube-scheduler retries it after its backoff)")
    sched.add_argument("--write-allocation", choices=("filter", "bind"), default="filter",
                       help="filter: /filter patches the pod with its device allocation before answering, as HAMi "
                            "does; bind: /filter answers once the devices are booked, with no API call, and /bind "
                            "writes the allocation with the bind phase in one patch under the node lock "
                            "(default: filter)")
    sched.add_argument("--node-inflight-limit", type=_count, default=DEFAULT_INFLIGHT_LIMIT, metavar="N",
                       help="a node with N pods between filter and its device plugin's Allocate (HAMi's node lock "
                            "lets one at a time through) is chosen only when no other node fits, so that a burst "
                            "fills several nodes side by side instead of queueing on one, at some cost in packing "
                            f"(default: {DEFAULT_INFLIGHT_LIMIT}: off, placing as HAMi does)")
    sched.add_argument("--normal-events", action=argparse.BooleanOptionalAction, default=True,
                       help="post HAMi's Normal events FilteringSucceed and BindingSucceed for every pod, two API "
                            "writes a pod (default: on, as HAMi; Warning events are always posted)")
    sched.add_argument("--resync", type=_positive_seconds, default=15.0, metavar="SECONDS",
                       help="period of the node re-registration pass (default: 15)")
    sched.add_argument("--leader-elect", action="store_true",
                       help="register nodes only while holding the scheduler lease (Kubernetes only)")
    sched.add_argument("--leader-elect-resource-name", default="hami-scheduler", metavar="NAME",
                       help="lease name (default: hami-scheduler)")
    sched.add_argument("--leader-elect-resource-namespace", default="kube-system", metavar="NAMESPACE",
                       help="lease namespace (default: kube-system)")
    sched.add_argument("--kube-qps", type=float, default=5.0, help="API client QPS (default: 5)")
    sched.add_argument("--kube-burst", type=int, default=10, help="API client burst (default: 10)")
    sched.set_defaults(command="scheduler", handler=_cmd_scheduler)


def _add_device_plugin_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    dp = commands.add_parser(
        "device-plugin", parents=[common], help="serve the kubelet device plugin for one vendor on this node",
        description="Serve the kubelet device-plugin API (v1beta1) for a vendor backend, register with kubelet, "
                    "write the node registration annotation and answer Allocate from the scheduler's annotations.")
    dp.add_argument("--vendor", default="nvidia", help="vendor section of the device config (default: nvidia)")
    dp.add_argument("--node-name", default=None, metavar="NAME", help="this node (default: $NODE_NAME)")
    source = dp.add_mutually_exclusive_group()
    source.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file (default: the usual lookup)")
    source.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    source.add_argument("--cluster-file", metavar="PATH",
                        help="use an in-memory cluster of the Nodes and Pods in this YAML file (no Kubernetes)")
    dp.add_argument("--kubelet-dir", default="/var/lib/kubelet/device-plugins", metavar="DIR",
                    help="kubelet device-plugin directory (default: /var/lib/kubelet/device-plugins)")
    dp.add_argument("--devices-file", metavar="PATH",
                    help="fake devices YAML instead of the driver (sets HAMI_OVERRIDE_<VENDOR>_DEVICES_FILE)")
    dp.add_argument("--device-config", metavar="PATH", help="device-config.yaml (default: built-in defaults)")
    dp.add_argument("--register-interval", type=_positive_seconds, default=30.0, metavar="SECONDS",
                    help="period of the node registration pass (default: 30)")
    dp.set_defaults(command="device-plugin", handler=_cmd_device_plugin)


def _cmd_device_plugin(args: argparse.Namespace, _extra: list[str]) -> int:
    import os
    import signal
    import threading

    from hami_core.engine.config import load_config

    node_name = args.node_name or os.environ.get("NODE_NAME")
    if not node_name:
        raise HamiError("--node-name or $NODE_NAME is required")
    if args.devices_file:
        os.environ[f"HAMI_OVERRIDE_{args.vendor.upper()}_DEVICES_FILE"] = args.devices_file
    try:
        app_mod = importlib.import_module("hami_core.node.app")
    except ImportError as exc:
        raise HamiError(f"the device plugin is unavailable ({exc})") from None
    config = load_config(args.device_config)
    pm = get_plugin_manager()
    backends = [b for b in pm.backends(config.devices) if b.vendor == args.vendor]
    if not backends:
        raise HamiError(f"no device backend for vendor {args.vendor!r} (is the {args.vendor} plugin installed "
                        "and its section in the device config?)")
    args.kube_qps, args.kube_burst = 5.0, 10
    cluster = _scheduler_cluster(args)
    app = app_mod.DevicePluginApp(pm, backends[0], cluster, node_name, plugin_dir=args.kubelet_dir,
                                  register_interval_s=args.register_interval)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: app.restart())
    try:
        app.start()
    except Exception as exc:  # OSError, or a gRPC error from kubelet's Register
        app.stop()
        detail = exc.details() if hasattr(exc, "details") else exc
        raise HamiError(f"cannot start the device plugin (kubelet at {app.kubelet_socket}): {detail}") from None
    logging.getLogger("hami.node").warning("hami device-plugin %s serving %s on %s for node %s (%d devices)",
                                           args.vendor, backends[0].resource_names.count, app.server.socket_path,
                                           node_name, len(app.devices))
    stop.wait()
    app.stop()
    return 0


def _add_monitor_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    import os

    mon = commands.add_parser(
        "monitor", parents=[common], help="export per-container GPU usage from HAMi-core's shared regions",
        description="Serve Prometheus metrics (/metrics) of the HAMi-core shared regions under --containers-dir "
                    "and run the priority feedback loop. Pods come from Kubernetes or a cluster file when one "
                    "is given, from the directory names otherwise.")
    mon.add_argument("--containers-dir", default="/usr/local/vgpu/containers", metavar="DIR",
                     help="HAMi-core cache directories <podUID>_<container>/ (default: /usr/local/vgpu/containers)")
    mon.add_argument("--host", default="0.0.0.0", help="metrics address (default: 0.0.0.0)")
    mon.add_argument("--port", type=_port, default=9394, help="metrics port, 0 for any free one (default: 9394)")
    source = mon.add_mutually_exclusive_group()
    source.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig file")
    source.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    source.add_argument("--cluster-file", metavar="PATH", help="Pods from this YAML file (no Kubernetes)")
    mon.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""), metavar="NAME",
                     help="this node; pods are filtered by it (default: $NODE_NAME)")
    mon.add_argument("--legacy-metrics", action="store_true", help="also emit HAMi's pre-2.5 metric names")
    mon.add_argument("--feedback", action=argparse.BooleanOptionalAction, default=True,
                     help="run the priority feedback loop, writing recent_kernel/utilization_switch (default: on)")
    mon.add_argument("--interval", type=_positive_seconds, default=5.0, metavar="SECONDS",
                     help="feedback and rescan period (default: 5)")
    mon.add_argument("--gc-after", type=_seconds, default=300.0, metavar="SECONDS",
                     help="remove a deleted pod's directory once unmodified this long (default: 300)")
    mon.set_defaults(command="monitor", handler=_cmd_monitor)


def _cmd_monitor(args: argparse.Namespace, _extra: list[str]) -> int:
    import signal
    import threading

    from hami_core.monitor import Monitor, MonitorOptions

    cluster = None
    if args.cluster_file:
        cluster = _cluster_file(args.cluster_file)
    elif args.kubeconfig or args.in_cluster:
        try:
            kube = importlib.import_module("hami_core.cluster.kube")
        except ImportError as exc:
            raise HamiError(f"the Kubernetes cluster adapter is unavailable ({exc})") from None
        cluster = kube.KubeCluster(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster)
    options = MonitorOptions(containers_dir=args.containers_dir, host=args.host, port=args.port,
                             node_name=args.node_name, legacy_metrics=args.legacy_metrics, feedback=args.feedback,
                             interval_s=args.interval, gc_after_s=args.gc_after)
    monitor = Monitor(options, cluster)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        monitor.start()
    except OSError as exc:
        raise HamiError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    logging.getLogger("hami.monitor").warning(
        "hami monitor serving %s for %s; feedback %s; pods from %s", monitor.url, args.containers_dir,
        "on" if args.feedback else "off", "the cluster" if cluster is not None else "directory names")
    stop.wait()
    monitor.stop()
    return 0


def _cmd_certs(args: argparse.Namespace, _extra: list[str]) -> int:
    from hami_core.scheduler.certs import DEFAULT_HOSTS, write_self_signed

    try:
        cert, key = write_self_signed(args.out, args.hosts or DEFAULT_HOSTS, days=args.days, force=args.force)
    except OSError as exc:
        raise HamiError(f"cannot write certificates to {args.out}: {exc.strerror or exc}") from None
    print(f"wrote {cert} and {key}")
    return 0


def _cluster_file(path: str) -> Any:
    """The in-memory cluster of ``--cluster-file``; a file that is not one is a usage error naming the flag."""
    from hami_core.cluster.memory import MemoryCluster

    try:
        return MemoryCluster.from_file(path)
    except HamiError as exc:
        raise UsageError(f"--cluster-file: {_one_line(exc)}") from None


def _scheduler_cluster(args: argparse.Namespace) -> Any:
    if args.cluster_file:
        return _cluster_file(args.cluster_file)
    try:
        kube = importlib.import_module("hami_core.cluster.kube")
    except ImportError as exc:
        raise HamiError(f"the Kubernetes cluster adapter is unavailable ({exc}); use --cluster-file") from None
    return kube.KubeCluster(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster, qps=args.kube_qps,
                            burst=args.kube_burst)


def _scheduler_leader(args: argparse.Namespace, cluster: Any) -> tuple[Any, Any]:
    """(elector, stop event) following the kube-scheduler's Lease, or (None, None) without --leader-elect."""
    if not args.leader_elect:
        return None, None
    if args.cluster_file:
        raise HamiError("--leader-elect needs a Kubernetes cluster, not --cluster-file")
    try:
        leader = importlib.import_module("hami_core.cluster.leader")
    except ImportError as exc:
        raise HamiError(f"leader election is unavailable ({exc})") from None
    import socket
    import threading

    # HAMi does not campaign: it follows the co-located kube-scheduler's Lease (holder = <hostname>_<uuid>).
    elector = leader.LeaderElector(cluster.api_client, namespace=args.leader_elect_resource_namespace,
                                   name=args.leader_elect_resource_name, identity=socket.gethostname(),
                                   campaign=False)
    stop = threading.Event()
    threading.Thread(target=elector.run, args=(stop,), name="hami-leader", daemon=True).start()
    return elector, stop


def _cmd_scheduler(args: argparse.Namespace, _extra: list[str]) -> int:
    import signal
    import threading

    from hami_core.engine.config import load_config
    from hami_core.engine.facade import Engine
    from hami_core.scheduler.app import Options, Scheduler
    from hami_core.scheduler.server import parse_bind

    if bool(args.tls_cert) != bool(args.tls_key):
        raise HamiError("--tls-cert and --tls-key go together")
    for flag, value in (("--client-ca-file", args.client_ca_file),
                        ("--webhook-client-ca-file", args.webhook_client_ca_file)):
        if value and not args.tls_cert:
            raise HamiError(f"{flag} needs TLS: give --tls-cert and --tls-key too")
    try:
        host, port = parse_bind(args.http_bind, 9443)
        webhook = parse_bind(args.webhook_bind, 9443) if args.webhook_bind else None
        metrics = parse_bind(args.metrics_bind, 9395) if args.metrics_bind else None
    except ValueError as exc:
        raise HamiError(str(exc)) from None
    if webhook is not None and webhook[1] == port and port != 0:
        raise HamiError(f"--webhook-bind {args.webhook_bind} and --http-bind {args.http_bind} need different ports")
    config = load_config(args.device_config)
    overrides = {k: v for k, v in (("node_scheduler_policy", args.node_scheduler_policy),
                                   ("gpu_scheduler_policy", args.gpu_scheduler_policy),
                                   ("scheduler_name", args.scheduler_name)) if v}
    if overrides:
        config = _with_scheduler(config, overrides)
    engine = Engine(config)
    cluster = _scheduler_cluster(args)
    elector, elector_stop = _scheduler_leader(args, cluster)
    options = Options(host=host, port=port, metrics_host=metrics[0] if metrics else None,
                      metrics_port=metrics[1] if metrics else 0, cert_file=args.tls_cert, key_file=args.tls_key,
                      scheduler_name=args.scheduler_name,
                      lock_timeout_s=args.node_lock_timeout or config.scheduler.node_lock_timeout,
                      lock_retry_timeout_s=args.node_lock_retry_timeout, lock_wait_s=args.node_lock_wait,
                      write_allocation=args.write_allocation, resync_s=args.resync,
                      inflight_limit=args.node_inflight_limit, normal_events=args.normal_events,
                      http_server=args.http_server, webhook_host=webhook[0] if webhook else None,
                      webhook_port=webhook[1] if webhook else 0, client_ca_file=args.client_ca_file,
                      extender_token_file=args.extender_token_file, metrics_device_detail=args.metrics_device_detail,
                      webhook_client_ca_file=args.webhook_client_ca_file,
                      trusted_users=args.trusted_identities,
                      trusted_groups=args.trusted_groups)
    try:
        service = Scheduler(engine, cluster, options, is_leader=elector.is_leader if elector else None)
    except OSError as exc:
        where = " or ".join(a for a in (args.http_bind, args.webhook_bind) if a)
        raise HamiError(f"cannot listen on {where}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise HamiError(str(exc)) from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        service.start()
    except OSError as exc:
        for server in service.servers:
            server.shutdown()
        raise HamiError(f"cannot start: {exc.strerror or exc}") from None
    # At warning level so that the default log level still shows where the service listens, and who may call it.
    log = logging.getLogger("hami.scheduler")
    if service.webhook_server is None:
        listeners = f"{service.server.url}/filter, /bind, /webhook, /healthz, /readyz"
    else:
        listeners = f"{service.server.url}/filter, /bind; {service.webhook_server.url}/webhook, /healthz, /readyz"
    extender_callers = " or ".join(w for w, on in (
        (f"client certificates of {args.client_ca_file}", args.client_ca_file),
        (f"the bearer tokens of {args.extender_token_file}", args.extender_token_file)) if on)
    callers = (f"extender: {extender_callers or 'anyone'}; webhook: "
               + (f"client certificates of {args.webhook_client_ca_file}" if args.webhook_client_ca_file else "anyone"))
    log.warning("hami scheduler %s serving %s (%s server); callers: %s; metrics %s; %d node(s)",
                args.scheduler_name, listeners, args.http_server, callers, service.metrics_url or "disabled",
                len(engine.nodes))
    if not extender_callers and host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("the extender on %s accepts any caller: anyone reaching the port can bind pods; give "
                    "--client-ca-file or --extender-token-file, or serve it on loopback (--webhook-bind)",
                    args.http_bind)
    stop.wait()
    logging.getLogger("hami.scheduler").warning("shutting down")
    service.stop()
    if elector_stop is not None:
        elector_stop.set()
    return 0


def _with_scheduler(config: Any, overrides: Mapping[str, str]) -> Any:
    """``config`` with scheduler settings replaced (flags win over the device config file)."""
    from dataclasses import replace

    from pydantic import ValidationError

    sched = config.scheduler
    try:
        updated = type(sched).model_validate({**sched.model_dump(), **overrides})
    except ValidationError as exc:
        raise HamiError(f"invalid scheduler flag: {exc.errors()[0].get('msg', exc)}") from None
    return replace(config, scheduler=updated)


def _cmd_plugins(args: argparse.Namespace, _extra: list[str]) -> int:
    if getattr(args, "action", "list") == "check":
        return _cmd_plugins_check(args)
    pm = get_plugin_manager()
    import yaml

    from hami_core.engine.config import load_config
    from hami_core.sim.loader import bundled

    path = getattr(args, "config", None)
    # Without a config, show what each plugin registers with every vendor section at HAMi's chart defaults.
    config = load_config(path) if path else load_config(yaml.safe_load(bundled("device-config.yaml")))
    rows, backends_error = _plugin_rows(pm, config.devices)
    if args.json:
        json.dump({"plugins": rows, "backends_error": backends_error}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0

    from rich.console import Console
    from rich.table import Table

    table = Table(title="hami plugins")
    for column in ("Name", "Distribution", "Version", "Status", "Backends", "Reason"):
        table.add_column(column, overflow="fold")
    for row in rows:
        backends = "?" if row["backends"] is None else ", ".join(row["backends"])
        status = row["status"]
        table.add_row(row["name"], row["distribution"] or "", row["version"] or "",
                      f"[{_STATUS_STYLE.get(status, 'default')}]{status}[/]", backends, row["reason"])
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 140)
    console.print(table)
    if backends_error:
        console.print(f"backends could not be computed with the default configuration: {backends_error}",
                      markup=False)
    return 0


def _plugin_rows(pm: HamiPluginManager, devices: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """One JSON-ready row per plugin report, plus why backends could not be computed (if so)."""
    by_plugin: dict[str, list[str]] | None = {}
    backends_error = None
    try:
        for backend in pm.backends(devices):
            by_plugin.setdefault(backend.plugin, []).append(backend.name)
    except HamiError as exc:
        by_plugin, backends_error = None, _one_line(exc)

    rows = []
    for report in pm.reports:
        active = report.status in ("loaded", "builtin")
        backends = (by_plugin.get(report.name, []) if by_plugin is not None else None) if active else []
        rows.append({"name": report.name, "distribution": report.distribution, "version": report.version,
                     "status": report.status, "reason": report.reason, "backends": backends})
    return rows, backends_error


def _cmd_plugins_check(args: argparse.Namespace) -> int:
    """Load every plugin and register its backends; report each problem on one line; exit 1 if any."""
    import yaml

    from hami_core.engine.config import load_config
    from hami_core.engine.facade import Engine
    from hami_core.sim.loader import bundled

    problems: list[str] = []
    try:
        pm = get_plugin_manager()
    except HamiError as exc:  # a contract error (bad signature, unknown hook, duplicate name) names the plugin
        problems.append(_one_line(exc))
        pm = None
    if pm is not None:
        problems += [f"plugin {r.name} ({r.distribution or '?'} {r.version or ''}): failed to load: {r.reason}"
                     for r in pm.reports if r.status == "failed"]
        path = getattr(args, "config", None)
        config = load_config(path) if path else load_config(yaml.safe_load(bundled("device-config.yaml")))
        try:
            engine = Engine(config, plugins=pm)
            engine.policies()
        except HamiError as exc:
            problems.append(_one_line(exc))
    if args.json:
        json.dump({"ok": not problems, "problems": problems}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif problems:
        for line in problems:
            print(f"problem: {line}")
    else:
        print(f"ok: {len(pm.reports) if pm else 0} plugins loaded, contracts valid")
    return 1 if problems else 0


def _cmd_version(_args: argparse.Namespace, _extra: list[str]) -> int:
    from hami_core import __version__

    print(f"hami-core {__version__}")
    return 0


def _cmd_simulate(args: argparse.Namespace, extra: list[str]) -> int:
    try:
        sim_cli = importlib.import_module("hami_core.sim.cli")
    except ImportError as exc:
        raise HamiError(f"hami simulate is unavailable: {type(exc).__name__}: {exc}") from exc

    parser = argparse.ArgumentParser(prog=f"{PROG} simulate")
    sim_cli.add_arguments(parser)
    try:
        sim_args = parser.parse_args(extra)
    except SystemExit as exc:
        return _exit_status(exc)
    sim_args.log_level = args.log_level
    return sim_cli.run(sim_args)


def _configure_logging(level: str) -> None:
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    return exc.code if isinstance(exc.code, int) else 1


if __name__ == "__main__":
    raise SystemExit(main())
