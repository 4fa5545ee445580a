"""One mode per node (issue 30): a node is in device-plugin mode or in DRA mode, never both.

A node labelled ``hami.io/device-mode: dra`` (:data:`MODE_LABEL`) is in DRA mode: kube-scheduler's DRA allocator
places claims on the ResourceSlices ``hami dra-driver`` publishes for it, so hami's extender must not book its
devices and ``hami device-plugin`` must not serve them (the two would hand one card out twice). Any other node
is in device-plugin mode, and ``hami dra-driver`` refuses to publish for it. The label, not the components that
happen to run, decides, so an operator switches a node by relabelling it and restarting its DaemonSet pods.

This module sits in the cluster layer because the scheduler, the device plugin and the DRA driver all call it
(they may not import one another); :mod:`hami_core.dra.mode` re-exports it with the DRA driver's own check.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

__all__ = ["DEVICE_PLUGIN", "DRA", "MODE_LABEL", "REFUSED_REASON", "check_device_plugin_node", "device_plugin_refusal",
           "extender_refusal", "node_mode", "refuse"]

log = logging.getLogger("hami.cluster.devicemode")

#: The Node (and Namespace) label naming the mode.
MODE_LABEL = "hami.io/device-mode"
DRA = "dra"
DEVICE_PLUGIN = "device-plugin"
#: The reason of the Warning event a component records on a Node it refuses.
REFUSED_REASON = "DeviceModeConflict"


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def node_mode(node: Mapping[str, Any]) -> str:
    """:data:`DRA` for a node labelled ``hami.io/device-mode: dra``, :data:`DEVICE_PLUGIN` otherwise."""
    return DRA if _labels(node).get(MODE_LABEL) == DRA else DEVICE_PLUGIN


def _name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata") if isinstance(node, Mapping) else None
    return str((meta or {}).get("name") or "<unnamed>")


def extender_refusal(node: Mapping[str, Any]) -> str | None:
    """The extender's filter reason for a DRA node (``None``: a device-plugin node it may book)."""
    if node_mode(node) == DRA:
        return f"node in DRA mode (label {MODE_LABEL}={DRA}): its devices are allocated by kube-scheduler's DRA " \
               "allocator, not booked by hami"
    return None


def device_plugin_refusal(node: Mapping[str, Any]) -> str | None:
    """Why ``hami device-plugin`` must not serve ``node`` (``None``: it may)."""
    if node_mode(node) == DRA:
        return f"node {_name(node)} is in DRA mode (label {MODE_LABEL}={DRA}): hami device-plugin does not serve " \
               "it; run hami dra-driver there, or remove the label to use the device plugin"
    return None


def refuse(cluster: Any, node: Mapping[str, Any], component: str, message: str) -> None:
    """Log ``message`` and record it as a Warning :data:`REFUSED_REASON` event on ``node`` (best effort: a failed
    event is logged, the refusal stands)."""
    log.error("%s: %s", component, message)
    obj = {"kind": "Node", "apiVersion": "v1", "metadata": {
        "name": _name(node), "uid": ((node.get("metadata") or {}).get("uid") if isinstance(node, Mapping) else None)}}
    try:
        cluster.event(obj, "Warning", REFUSED_REASON, f"{component}: {message}")
    except Exception as exc:  # an event is a courtesy; the refusal is the log line and the exit
        log.warning("%s: could not record the event on node %s: %s", component, _name(node), exc)


def check_device_plugin_node(cluster: Any, node_name: str) -> None:
    """Refuse to start ``hami device-plugin`` on a DRA node: a Warning event on the Node, a log line, and a
    :class:`~hami_core.plugins.errors.HamiError` (the command exits). A node that cannot be read is not refused
    (the device plugin then starts as it always has; its registration loop reports the node)."""
    from hami_core.plugins.errors import HamiError

    try:
        node = cluster.get_node(node_name)
    except Exception as exc:
        log.warning("device-plugin: cannot read node %s to check its %s label (%s); starting", node_name,
                    MODE_LABEL, exc)
        return
    message = device_plugin_refusal(node)
    if message is not None:
        refuse(cluster, node, "hami device-plugin", message)
        raise HamiError(message)
