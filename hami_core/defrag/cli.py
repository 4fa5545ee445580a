"""``hami defrag plan`` and ``hami defrag apply``: the planner (:mod:`hami_core.defrag.planner`) on the cluster as
read now, and the evictions that carry a plan out.

``plan`` prints the moves and the expected gain and writes nothing. ``apply`` plans the same way, prints the plan,
and with ``--yes`` evicts through the Eviction API (``pods/eviction`` create), one source node at a time, waiting
until that node's evicted pods are gone before the next: the owners' replacements are then scheduled by the
scheduler, as any new pod. Without ``--yes`` it is a dry run. This module lives outside the scheduler package so
that the scheduler's RBAC never needs ``pods/eviction``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

from hami_core.cmdline import UsageError, add_cluster_source, cluster_from_args, one_line
from hami_core.defrag.planner import Budget, Move, Plan, plan_defrag
from hami_core.plugins.errors import HamiError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``hami defrag``: ``plan`` or ``apply``, the cluster, the budget."""
    parser.description = ("Plan (and apply) pod moves that free whole devices and cut FGD's fragmentation, within a "
                          "budget, respecting PodDisruptionBudgets and the hami.io/defrag: \"false\" label.")
    parser.add_argument("action", choices=("plan", "apply"), help="plan: print the moves; apply: evict them")
    add_cluster_source(parser, cluster_file_help="read Nodes, Pods and PodDisruptionBudgets from this YAML file "
                                                 "instead of a cluster")
    parser.add_argument("--device-config", "--config", dest="device_config", metavar="PATH",
                        help="the scheduler's device-config.yaml (default: built-in defaults)")
    parser.add_argument("--node-scheduler-policy", metavar="POLICY", help="default node policy, as the scheduler's")
    parser.add_argument("--gpu-scheduler-policy", metavar="POLICY", help="default GPU policy, as the scheduler's")
    parser.add_argument("--max-percent", type=float, default=5.0, metavar="K",
                        help="move at most K %% of running pods (default: 5)")
    parser.add_argument("--max-moves", type=int, default=None, metavar="N", help="and at most N pods")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument("--yes", action="store_true", help="apply: really evict (default: a dry run)")
    parser.add_argument("--wait-timeout", type=float, default=300.0, metavar="S",
                        help="apply: seconds to wait for a node's evicted pods to be gone (default: 300)")


def read_and_plan(args: argparse.Namespace, cluster: Any) -> Plan:
    from hami_core.explain import engine_for

    if not 0 <= args.max_percent <= 100:
        raise UsageError(f"--max-percent must be between 0 and 100, got {args.max_percent}")
    try:
        nodes, pods, pdbs = cluster.list_nodes(), cluster.list_pods(), cluster.list_pod_disruption_budgets()
    except HamiError as exc:
        raise HamiError(f"cannot read the cluster: {one_line(exc)}") from None
    return plan_defrag(engine_for(args), nodes, pods, pdbs, Budget(args.max_percent, args.max_moves))


def render(plan: Plan) -> str:
    """The plan as a table, then the expected gain."""
    rows = [("POD", "OWNER", "FROM", "TO")] + [(m.pod, m.owner, m.from_node, m.to_node or "(anywhere)")
                                               for m in plan.moves]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if not plan.moves:
        lines = ["no move helps within the budget"]
    lines.append(f"moves: {len(plan.moves)} of a budget of {plan.budget} ({plan.running} running pods)")
    lines.append(f"whole devices freed: {plan.gpus_freed} (idle {plan.idle_before} -> {plan.idle_after})")
    lines.append(f"fragmentation (FGD, device milli): {plan.frag_before:.1f} -> {plan.frag_after:.1f}")
    return "\n".join(lines)


def by_node(moves: Sequence[Move]) -> list[tuple[str, list[Move]]]:
    """The moves grouped by source node, in plan order of each node's first move."""
    out: dict[str, list[Move]] = {}
    for m in moves:
        out.setdefault(m.from_node, []).append(m)
    return list(out.items())


def apply(cluster: Any, plan: Plan, *, timeout_s: float, poll_s: float = 1.0,
          clock: Any = time.monotonic, sleep: Any = time.sleep) -> list[str]:
    """Evict the plan's pods, one source node at a time, waiting until that node's evicted pods are gone (or have
    another UID: recreated under the same name); returns what was evicted. A refused eviction stops here."""
    from hami_core.cluster.base import NotFoundError

    done: list[str] = []
    for node, moves in by_node(plan.moves):
        for m in moves:
            namespace, _, name = m.pod.partition("/")
            try:
                cluster.evict_pod(namespace, name, m.uid)
            except HamiError as exc:
                raise HamiError(f"evicting {m.pod} from {node}: {one_line(exc)} (evicted so far: "
                                f"{', '.join(done) or 'none'})") from None
            done.append(m.pod)
        deadline = clock() + timeout_s
        pending = list(moves)
        while pending:
            still = []
            for m in pending:
                namespace, _, name = m.pod.partition("/")
                try:
                    if (cluster.get_pod(namespace, name).get("metadata") or {}).get("uid") == m.uid:
                        still.append(m)
                except NotFoundError:
                    pass
            pending = still
            if pending:
                if clock() > deadline:
                    raise HamiError(f"node {node}: {', '.join(m.pod for m in pending)} still there after "
                                    f"{timeout_s:g} s; stopping before the next node")
                sleep(poll_s)
    return done


def run(args: argparse.Namespace) -> int:
    cluster = cluster_from_args(args)
    try:
        plan = read_and_plan(args, cluster)
        if args.json:
            print(json.dumps(plan.as_dict(), indent=2))
        else:
            print(render(plan))
        if args.action == "apply":
            if not args.yes:
                print("dry run: nothing evicted (pass --yes to evict)")
            elif plan.moves:
                done = apply(cluster, plan, timeout_s=args.wait_timeout)
                print(f"evicted {len(done)} pod(s)")
    finally:
        close = getattr(cluster, "close", None)
        if close is not None:
            close()
    return 0
