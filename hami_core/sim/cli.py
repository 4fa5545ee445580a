"""``hami simulate``: place a workload onto a cluster in-process and report placements and usage."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from hami_core.engine.facade import Engine
from hami_core.sim.loader import load_file
from hami_core.sim.report import print_report, to_json
from hami_core.sim.run import replay


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Place a workload onto a cluster with the real scheduling engine, in-process, and "
                          "print where each pod went and how full every device is. Without arguments it "
                          "uses the bundled example cluster and workload.")
    parser.add_argument("--cluster", metavar="PATH", help="YAML file of Node objects (default: bundled example)")
    parser.add_argument("--workload", metavar="PATH", help="YAML file of Pod objects (default: bundled example)")
    parser.add_argument("--config", metavar="PATH", help="device-config.yaml (default: NVIDIA with HAMi defaults)")
    parser.add_argument("--node-policy", choices=("binpack", "spread"), help="default node scheduler policy")
    parser.add_argument("--gpu-policy", help="default GPU scheduler policy (binpack, spread, mutex, ...)")
    parser.add_argument("--json", action="store_true", help="print a JSON report instead of tables")


def run(args: argparse.Namespace) -> int:
    from hami_core.engine.config import load_config

    config = load_config(args.config)
    overrides = {}
    if args.node_policy:
        overrides["node_scheduler_policy"] = args.node_policy
    if args.gpu_policy:
        overrides["gpu_scheduler_policy"] = args.gpu_policy
    if overrides:
        from dataclasses import replace

        from pydantic import ValidationError

        from hami_core.engine.config import SchedulerConfig, pydantic_error

        merged = {**config.scheduler.model_dump(), **overrides}
        try:
            config = replace(config, scheduler=SchedulerConfig.model_validate(merged))
        except ValidationError as exc:
            raise pydantic_error("scheduler", exc) from None
    engine = Engine(config)
    nodes, cluster_src = load_file(args.cluster, default="cluster.yaml", kind="Node")
    pods, workload_src = load_file(args.workload, default="workload.yaml", kind="Pod")
    result, _ = replay(engine, nodes, pods)
    if args.json:
        json.dump(to_json(engine, result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        console = Console(width=None if sys.stdout.isatty() else 140)
        print_report(console, engine, result, cluster=cluster_src, workload=workload_src)
    return 0
