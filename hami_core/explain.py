"""``hami explain NAMESPACE/POD``: why a pod fits where it fits, and nowhere else; its ``add_arguments`` and ``run``,
dispatched by :mod:`hami_core.cli`, and the renderers ``hami simulate --explain`` shares.

The cluster is read once (Nodes, Pods, ResourceQuotas) from Kubernetes (``--kubeconfig``, ``--in-cluster``) or a
``--cluster-file``, into an engine with the scheduler's device configuration (``--device-config``) and plugins; the
explanation is the engine's own (:mod:`hami_core.engine.explain`). Nothing is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.cmdline import UsageError, add_cluster_source, cluster_from_args, one_line
from hami_core.plugins.errors import HamiError

__all__ = ["add_arguments", "engine_for", "print_explanation", "run", "split_pod_name"]

#: A check's status in the device table: passed, failed (the device's first failing check), not reached.
MARK = {"pass": "ok", "fail": "X", "not reached": "."}
DEFAULT_MAX_NODES = 30


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


# ------------------------------------------------------------------------------------------ rendering

def print_explanation(explanation: Any, *, output: str = "table", max_nodes: int = DEFAULT_MAX_NODES,
                      file: Any = None) -> None:
    """Print a :class:`~hami_core.engine.explain.PodExplanation` as tables or JSON on ``file`` (default stdout)."""
    out = file if file is not None else sys.stdout
    if output == "json":
        json.dump(explanation.to_json(), out, indent=2)
        out.write("\n")
        return
    from rich.console import Console

    console = Console(file=out, width=None if out.isatty() else 200)
    for line in _summary(explanation):
        console.print(line, highlight=False, markup=False)
    if explanation.error:
        return
    shown = _ordered(explanation.nodes)[:max_nodes]
    console.print(_node_table(shown, len(explanation.nodes)))
    for n in shown:
        for r in n.requests:
            if r.devices:
                console.print(_device_table(n, r))

def _summary(explanation: Any) -> list[str]:
    lines = [f"pod {explanation.pod}"]
    if explanation.policy:
        p = explanation.policy
        lines[0] += f"   policy: node {p['node']}, gpu {p['gpu']}" + (", numa-bind" if p.get("numa_bind") else "")
    fitting = sum(1 for n in explanation.nodes if n.fits)
    if explanation.error:
        lines.append(f"cannot be scheduled at all: {explanation.error}")
    elif explanation.node:
        lines.append(f"fits: the filter would choose node {explanation.node} ({fitting} of "
                     f"{len(explanation.nodes)} nodes fit)")
    else:
        lines.append(f"pending: no node fits ({len(explanation.nodes)} candidate nodes)")
    disagree = [n.name for n in explanation.nodes if n.fits != n.filter_fits or n.reason != n.filter_reason]
    if disagree:  # a bug: the explanation and the filter run the same fit
        lines.append(f"warning: the filter judged these nodes differently: {', '.join(disagree[:10])}")
    lines.extend(f"note: {note}" for note in explanation.notes)
    lines.extend(_persisted(explanation.persisted))
    return lines


def _persisted(doc: Mapping[str, Any] | None) -> list[str]:
    if not doc:
        return []
    if "unreadable" in doc:
        return [f"hami.io/filter-reasons (not hami's format): {doc['unreadable']}"]
    lines = [f"the scheduler's last failed filter (hami.io/filter-reasons): {doc.get('failed', '?')} of "
             f"{doc.get('nodes', '?')} nodes failed"]
    if doc.get("error"):
        lines.append(f"  error: {doc['error']}")
    for group in doc.get("reasons") or ():
        names = ", ".join(group.get("nodes") or ())
        more = group.get("more") or 0
        lines.append(f"  {group.get('count')} nodes: {group.get('reason')}"
                     + (f" ({names}{f', +{more} more nodes' if more else ''})" if names or more else ""))
    more = doc.get("more") or {}
    if more.get("reasons"):
        lines.append(f"  +{more['reasons']} more reasons on {more.get('nodes', 0)} nodes")
    return lines


def _ordered(nodes: Sequence[Any]) -> list[Any]:
    """Nodes that fit first (the chosen one, then by score as ranked), then the others by name."""
    fit = sorted((n for n in nodes if n.fits), key=lambda n: (not n.chosen, n.name))
    return fit + [n for n in nodes if not n.fits]


def _node_table(nodes: Sequence[Any], total: int) -> Any:
    from rich.table import Table

    caption = f"{total - len(nodes)} more nodes: --max-nodes, --node or --output json" if total > len(nodes) else None
    table = Table(title="nodes", caption=caption)
    for column in ("node", "verdict", "reason", "score", "chosen"):
        table.add_column(column, overflow="fold")
    for n in nodes:
        table.add_row(n.name, "fits" if n.fits else "fails", n.reason or "-",
                      "-" if n.score is None else f"{n.score:.2f}", "yes" if n.chosen else "")
    return table


def _device_table(node: Any, r: Any) -> Any:
    """One node's devices against one request: a column per check, the failing check's facts last."""
    from rich.table import Table

    from hami_core.engine.explain import CHECKS

    req = r.request
    asked = f"{req.nums} device(s)" + (f", {req.memreq} MiB" if req.memreq else "") + (
        f", {req.mem_percentage}% memory" if 0 <= req.mem_percentage <= 100 and not req.memreq else "") + (
        f", {req.coresreq}% cores" if req.coresreq else "")
    verdict = "fits" if r.fits else f"fails: {r.reason}"
    table = Table(title=f"{node.name} / {r.container} / {r.backend}: {asked} -> {verdict}", title_justify="left")
    table.add_column("device", overflow="fold", max_width=28)
    table.add_column("type", overflow="fold", max_width=18)
    table.add_column("verdict")
    for name, _ in CHECKS:
        table.add_column(name, justify="center")
    table.add_column("failed check: what it saw", overflow="fold", min_width=40)
    for d in r.devices:
        failing = next((c for c in d.checks if c.status == "fail"), None)
        table.add_row(f"{d.index} {d.id}", d.type, "picked" if d.chosen else ("fits" if d.fits else "fails"),
                      *[MARK[c.status] for c in d.checks],
                      f"{failing.name}: {failing.detail}" if failing is not None else "")
    return table
