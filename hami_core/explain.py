"""``hami explain NAMESPACE/POD``: why a pod fits where it fits, and nowhere else; its ``add_arguments`` and ``run``,
dispatched by :mod:`hami_core.cli`, and the renderers ``hami simulate --explain`` shares.

The cluster is read once (Nodes, Pods, ResourceQuotas) from Kubernetes (``--kubeconfig``, ``--in-cluster``) or a
``--cluster-file``, into an engine with the scheduler's device configuration (``--device-config``) and plugins; the
explanation is the engine's own (:mod:`hami_core.engine.explain`). Nothing is written.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from hami_core.cmdline import UsageError, add_cluster_source, cluster_from_args, one_line
from hami_core.engine.explainview import DEFAULT_MAX_NODES, print_explanation
from hami_core.plugins.errors import HamiError

__all__ = ["add_arguments", "engine_for", "print_explanation", "run", "split_pod_name"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami explain``."""
    parser.description = (
        "Explain why a pod is pending (or where it would go): for each candidate node, each request of each "
        "container and each device, which check passed and which failed (health, cordon, type and selectors, NUMA, "
        "UUID selectors, split count, mutex/exclusive, quota, memory, cores, the vendor's rule), the node's reason as "
        "the filter gives it, and the policy score of the nodes that fit. It uses the scheduler's own fit on the "
        "cluster as read now (nothing is written), and shows the reasons the scheduler kept on the pod from its last "
        "failed filter (hami.io/filter-reasons).")
    parser.add_argument("pod", metavar="NAMESPACE/POD", help="the pod (NAME alone: in --namespace)")
    parser.add_argument("-n", "--namespace", default="default", help="namespace of a POD given without one "
                                                                     "(default: default)")
    add_cluster_source(parser, cluster_file_help="read Nodes, Pods and ResourceQuotas from this YAML file (the format "
                                                 "of hami scheduler --cluster-file) instead of a cluster")
    parser.add_argument("--device-config", "--config", dest="device_config", metavar="PATH",
                        help="the scheduler's device-config.yaml (default: built-in defaults)")
    parser.add_argument("--node-scheduler-policy", metavar="POLICY",
                        help="default node policy, as the scheduler's flag (default: the device config's)")
    parser.add_argument("--gpu-scheduler-policy", metavar="POLICY",
                        help="default GPU policy, as the scheduler's flag (default: the device config's)")
    parser.add_argument("--node", action="append", default=None, metavar="NAME",
                        help="explain only these candidate nodes (repeat the flag; default: every node)")
    parser.add_argument("--max-nodes", type=int, default=DEFAULT_MAX_NODES, metavar="N",
                        help=f"nodes shown in the tables, those that fit first (default: {DEFAULT_MAX_NODES}; "
                             "--output json has them all)")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="table (default) or json")


def split_pod_name(text: str, namespace: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` or ``NAME`` (in ``namespace``) → (namespace, name); anything else is a usage error."""
    parts = text.split("/")
    if len(parts) == 1 and parts[0]:
        return namespace, parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise UsageError(f"pod {text!r}: expected NAMESPACE/NAME or NAME")


def engine_for(args: argparse.Namespace) -> Any:
    """An engine with the scheduler's configuration: ``--device-config`` and the policy flags over it."""
    from dataclasses import replace

    from pydantic import ValidationError

    from hami_core.engine.config import SchedulerConfig, load_config
    from hami_core.engine.facade import Engine
    from hami_core.plugins.helpers import pydantic_error

    config = load_config(args.device_config)
    overrides = {k: v for k, v in (("node_scheduler_policy", args.node_scheduler_policy),
                                   ("gpu_scheduler_policy", args.gpu_scheduler_policy)) if v}
    if overrides:
        try:
            scheduler = SchedulerConfig.model_validate({**config.scheduler.model_dump(), **overrides})
        except ValidationError as exc:
            raise pydantic_error("scheduler", exc) from None
        config = replace(config, scheduler=scheduler)
    return Engine(config)


def run(args: argparse.Namespace) -> int:
    """Read the cluster, explain the pod, print the explanation."""
    from hami_core.cluster.base import NotFoundError
    from hami_core.engine.explain import explain
    from hami_core.plugins.objects import metadata
    from hami_core.wire.filterreasons import FILTER_REASONS, decode

    if args.max_nodes < 1:
        raise UsageError(f"--max-nodes must be at least 1, got {args.max_nodes}")
    namespace, name = split_pod_name(args.pod, args.namespace)
    engine = engine_for(args)
    cluster = cluster_from_args(args)
    where = _where(args)
    try:
        try:
            pod = cluster.get_pod(namespace, name)
        except NotFoundError:
            raise HamiError(f"pod {namespace}/{name} not found in {where}") from None
        nodes = cluster.list_nodes()
        pods = cluster.list_pods()
        quotas = _quotas(cluster)
    except HamiError as exc:
        if str(exc).startswith(f"pod {namespace}/{name} not found"):
            raise
        raise HamiError(f"cannot read {where}: {one_line(exc)}") from None
    finally:
        close = getattr(cluster, "close", None)
        if close is not None:
            close()
    for quota in quotas:
        engine.upsert_quota(quota)
    for node in nodes:
        engine.upsert_node(node)
    for other in pods:
        engine.upsert_pod(other)
    notes = []
    bound_to = (pod.get("spec") or {}).get("nodeName")
    if bound_to:
        notes.append(f"the pod is bound to node {bound_to}: this is how a filter would judge it now, with its own "
                     "devices left out")
    if args.node:
        unknown = sorted(set(args.node) - {str(metadata(n).get("name") or "") for n in nodes})
        if unknown:
            raise HamiError(f"--node {', '.join(unknown)}: no such node in {where}")
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(FILTER_REASONS)
    persisted = (decode(raw) or {"unreadable": raw}) if isinstance(raw, str) and raw else None
    explanation = explain(engine, pod, args.node, persisted=persisted, notes=notes)
    print_explanation(explanation, output=args.output, max_nodes=args.max_nodes)
    return 0


def _where(args: argparse.Namespace) -> str:
    if args.cluster_file:
        return f"cluster file {args.cluster_file}"
    if args.in_cluster:
        return "the cluster (in-cluster service account)"
    return f"the cluster (kubeconfig {args.kubeconfig or 'default'})"


def _quotas(cluster: Any) -> list[Mapping[str, Any]]:
    lister = getattr(cluster, "list_resource_quotas", None)
    return list(lister()) if lister is not None else []
