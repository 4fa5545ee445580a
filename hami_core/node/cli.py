"""``hami device-plugin``: the kubelet device plugin of one vendor backend on this node; its ``add_arguments`` and
``run``, dispatched by :mod:`hami_core.cli`.

Importing this module is cheap and needs none of the ``node`` extra's packages (gRPC is imported by :func:`run`,
through :mod:`hami_core.node.app`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal

from hami_core.cmdline import add_cluster_source, cluster_from_args, positive_seconds, stop_on_signals, unavailable
from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import get_plugin_manager

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami device-plugin``."""
    parser.description = (
        "Serve the kubelet device-plugin API (v1beta1) for a vendor backend, register with kubelet, write the node "
        "registration annotation and answer Allocate from the scheduler's annotations.")
    parser.add_argument("--vendor", default="nvidia", help="vendor section of the device config (default: nvidia)")
    parser.add_argument("--node-name", default=None, metavar="NAME", help="this node (default: $NODE_NAME)")
    add_cluster_source(parser, cluster_file_help="use an in-memory cluster of the Nodes and Pods in this YAML file "
                                                 "(no Kubernetes)")
    parser.add_argument("--kubelet-dir", default="/var/lib/kubelet/device-plugins", metavar="DIR",
                        help="kubelet device-plugin directory (default: /var/lib/kubelet/device-plugins)")
    parser.add_argument("--devices-file", metavar="PATH",
                        help="fake devices YAML instead of the driver (sets HAMI_OVERRIDE_<VENDOR>_DEVICES_FILE)")
    parser.add_argument("--device-config", metavar="PATH", help="device-config.yaml (default: built-in defaults)")
    parser.add_argument("--register-interval", type=positive_seconds, default=30.0, metavar="SECONDS",
                        help="period of the node registration pass (default: 30)")


def run(args: argparse.Namespace) -> int:
    """Serve the first backend of ``--vendor`` until SIGTERM or SIGINT (SIGHUP re-registers with kubelet)."""
    from hami_core.engine.config import load_config

    node_name = args.node_name or os.environ.get("NODE_NAME")
    if not node_name:
        raise HamiError("--node-name or $NODE_NAME is required")
    if args.devices_file:
        os.environ[f"HAMI_OVERRIDE_{args.vendor.upper()}_DEVICES_FILE"] = args.devices_file
    try:
        from hami_core.node.app import DevicePluginApp
    except ImportError as exc:
        raise unavailable("device-plugin", "node", exc) from None
    config = load_config(args.device_config)
    pm = get_plugin_manager(blocked=config.blocked_plugins)
    backends = [b for b in pm.backends(config.devices) if b.vendor == args.vendor]
    if not backends:
        raise HamiError(f"no device backend for vendor {args.vendor!r} (is the {args.vendor} plugin installed "
                        "and its section in the device config?)")
    cluster = cluster_from_args(args, qps=5.0, burst=10)
    from hami_core.cluster.devicemode import check_device_plugin_node

    check_device_plugin_node(cluster, node_name)  # one mode per node (issue 30): never serve a DRA node
    app = DevicePluginApp(pm, backends[0], cluster, node_name, plugin_dir=args.kubelet_dir,
                          register_interval_s=args.register_interval)
    stop = stop_on_signals()
    signal.signal(signal.SIGHUP, lambda *_: app.restart())
    try:
        app.start()
    except Exception as exc:  # OSError, or a gRPC error from kubelet's Register
        app.stop()
        detail = exc.details() if hasattr(exc, "details") else exc
        raise HamiError(f"cannot start the device plugin (kubelet at {app.kubelet_socket}): {detail}") from None
    # INFO: the server commands log at INFO unless told otherwise (hami_core.cli.SERVER_LOG_LEVEL)
    logging.getLogger("hami.node").info("hami device-plugin %s serving %s on %s for node %s (%d devices)",
                                        args.vendor, backends[0].resource_names.count, app.server.socket_path,
                                        node_name, len(app.devices))
    stop.wait()
    app.stop()
    return 0
