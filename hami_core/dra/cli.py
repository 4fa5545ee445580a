"""``hami dra-driver``: publish this node's devices as DRA ResourceSlices (resource.k8s.io/v1) and keep them current;
its ``add_arguments`` and ``run``, dispatched by :mod:`hami_core.cli`.

``--dry-run --node NODE.yaml`` prints, as YAML, the ResourceSlices the driver would publish for that Node from its
HAMi registration annotations, with no cluster. ``--withdraw`` deletes this node's slices (a node leaving DRA mode).
The live driver also serves the kubelet plugin of each backend's driver (registration socket in
``--kubelet-registry-dir``, DRA socket and checkpoint in ``--kubelet-plugins-dir``, CDI specs in ``--cdi-dir``)
unless ``--no-kubelet-plugin``. Importing this module is cheap: the driver and the cluster adapters load when the
command runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from hami_core.cmdline import (
    UsageError,
    add_cluster_source,
    cluster_from_args,
    one_line,
    positive_seconds,
    stop_on_signals,
)
from hami_core.plugins.errors import HamiError
from hami_core.plugins.manager import get_plugin_manager

# Plain constants, copied so that --help imports neither grpc nor the plugin (a test checks they agree).
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_CDI_DIR = "/var/run/cdi"

__all__ = ["add_arguments", "load_node", "run"]

log = logging.getLogger("hami.dra")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami dra-driver``."""
    parser.description = textwrap.fill(
        "Publish this node's devices, as the vendor plugins describe them, as DRA ResourceSlices "
        "(resource.k8s.io/v1): one pool per node and backend, shareable cards with consumable memory, cores and "
        "shares, unhealthy devices withdrawn, the pool's generation bumped on every change. The slices stay when "
        "the driver stops (a restart republishes only what changed); --withdraw deletes them.", width=100)
    parser.epilog = ("examples:\n"
                     "  hami dra-driver --dry-run --node node.yaml           # the slices of a Node's registration\n"
                     "  hami dra-driver --node-name gpu-1 --in-cluster       # the node component (DaemonSet)\n"
                     "  hami dra-driver --withdraw --node-name gpu-1         # delete this node's slices")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--vendor", action="append", metavar="VENDOR",
                        help="publish only this vendor's backends (repeatable; default: every enabled backend)")
    parser.add_argument("--node-name", default=None, metavar="NAME", help="this node (default: $NODE_NAME)")
    add_cluster_source(parser, cluster_file_help="use an in-memory cluster of the Nodes and Pods in this YAML file "
                                                 "(no Kubernetes)")
    parser.add_argument("--device-config", metavar="PATH", help="device-config.yaml (default: built-in defaults)")
    parser.add_argument("--devices-file", metavar="PATH",
                        help="fake devices YAML instead of the driver, for every --vendor "
                             "(sets HAMI_OVERRIDE_<VENDOR>_DEVICES_FILE)")
    parser.add_argument("--resync", type=positive_seconds, default=60.0, metavar="SECONDS",
                        help="period of the publication pass (default: 60); a health change republishes at once")
    kubelet = parser.add_argument_group("kubelet plugin (NodePrepareResources / NodeUnprepareResources)")
    kubelet.add_argument("--kubelet-registry-dir", default=DEFAULT_REGISTRY_DIR, metavar="DIR",
                         help="kubelet's plugin registry, where <driver>-reg.sock is bound "
                              f"(default: {DEFAULT_REGISTRY_DIR})")
    kubelet.add_argument("--kubelet-plugins-dir", default=DEFAULT_PLUGINS_DIR, metavar="DIR",
                         help="where <driver>/dra.sock and the prepared-claims checkpoint live "
                              f"(default: {DEFAULT_PLUGINS_DIR})")
    kubelet.add_argument("--cdi-dir", default=DEFAULT_CDI_DIR, metavar="DIR",
                         help=f"where the CDI specs of prepared claims are written (default: {DEFAULT_CDI_DIR})")
    kubelet.add_argument("--no-kubelet-plugin", action="store_true",
                         help="publish ResourceSlices only; serve no kubelet plugin (claims cannot be prepared)")
    parser.add_argument("--from-registration", action="store_true",
                        help="publish a backend that no plugin discovers from the node's HAMi registration "
                             "annotation")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print the ResourceSlices for --node's registration annotations as YAML and exit")
    mode.add_argument("--withdraw", action="store_true", help="delete this node's ResourceSlices and exit")
    parser.add_argument("--node", metavar="NODE.yaml", help="with --dry-run: the Node (YAML or JSON) to publish for")


def load_node(path: str) -> dict[str, Any]:
    """The one Node in ``path``; a :class:`HamiError` naming the file, the document and the field otherwise."""
    from hami_core.engine.objectfile import objects_from_yaml
    from hami_core.plugins.yamlload import MAX_INPUT_BYTES, YamlInputError, read_text

    try:
        text = read_text(path, "node file", max_bytes=MAX_INPUT_BYTES)
        objects = objects_from_yaml(text, source=f"node file {path}", kinds=("Node",))
    except YamlInputError as exc:
        raise HamiError(str(exc)) from None
    if len(objects) != 1:
        raise HamiError(f"node file {path}: expected one Node, found {len(objects)}")
    node = objects[0]
    name = (node.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise HamiError(f"node file {path}: metadata.name: a Node needs a name")
    return node


def _backends(pm: Any, devices: Any, vendors: Sequence[str] | None) -> list[Any]:
    backends = pm.backends(devices)
    if vendors:
        unknown = sorted(set(vendors) - {b.vendor for b in backends})
        if unknown:
            raise UsageError(f"--vendor {', '.join(unknown)}: no enabled backend (is the plugin installed and its "
                             "section in the device config?)")
        backends = [b for b in backends if b.vendor in vendors]
    if not backends:
        raise HamiError("no device backend is enabled (install a vendor plugin and give its section in the device "
                        "config)")
    return backends


def _dump(objects: Sequence[Any]) -> str:
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False, default_flow_style=False)


def run(args: argparse.Namespace) -> int:
    """Dry-run, withdraw, or publish until SIGTERM or SIGINT."""
    from hami_core.engine.config import load_config

    if args.node and not args.dry_run:
        raise UsageError("--node is for --dry-run (the live driver reads its node from the cluster: --node-name)")
    if args.dry_run and not args.node:
        raise UsageError("--dry-run needs --node NODE.yaml")
    config = load_config(args.device_config)
    pm = get_plugin_manager(blocked=config.blocked_plugins)
    backends = _backends(pm, config.devices, args.vendor)
    from hami_core.dra import driver

    if args.dry_run:
        node = load_node(args.node)
        sys.stdout.write(_dump(driver.node_slices(pm, backends, node)))
        return 0
    node_name = args.node_name or os.environ.get("NODE_NAME")
    if not node_name:
        raise UsageError("--node-name or $NODE_NAME is required")
    if args.devices_file:
        for vendor in sorted({b.vendor for b in backends}):
            os.environ[f"HAMI_OVERRIDE_{vendor.upper()}_DEVICES_FILE"] = args.devices_file
    cluster = cluster_from_args(args, qps=5.0, burst=10)
    if args.withdraw:
        gone = driver.withdraw(cluster, node_name, backends)
        print(f"node {node_name}: deleted {len(gone)} ResourceSlice(s){': ' if gone else ''}{', '.join(gone)}")
        return 0
    from hami_core.dra.mode import check_dra_node

    check_dra_node(cluster, node_name, backends, from_registration=args.from_registration)  # one mode per node
    app = driver.DraDriver(pm, backends, cluster, node_name, registration=args.from_registration,
                           resync_s=args.resync)
    stop = stop_on_signals()
    plugins: list[Any] = []
    try:
        app.start()
        if not args.no_kubelet_plugin:
            from hami_core.dra.kubelet.plugin import serve_kubelet_plugins

            plugins = serve_kubelet_plugins(app, cluster, registry_dir=args.kubelet_registry_dir,
                                            plugins_dir=args.kubelet_plugins_dir, cdi_dir=args.cdi_dir)
    except HamiError:
        app.stop()
        raise
    except Exception as exc:
        app.stop()
        raise HamiError(f"cannot start the DRA driver on node {node_name}: {one_line(exc)}") from None
    log.info("hami dra-driver publishing %s for node %s%s", ", ".join(b.name for b in backends), node_name,
             "" if plugins else " (no kubelet plugin)")
    stop.wait()
    for plugin in plugins:  # the sockets first: kubelet must stop calling a driver that no longer publishes
        plugin.stop()
    app.stop()
    return 0
