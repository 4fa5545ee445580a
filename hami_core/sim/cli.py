"""``hami simulate``: capacity planning and policy comparison, in-process, through the real engine."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from hami_core.engine.config import EngineConfig, SchedulerConfig, load_config
from hami_core.engine.facade import Engine
from hami_core.plugins.helpers import pydantic_error
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim import openb
from hami_core.sim.defrag import DefragSpec
from hami_core.sim.dra import ALLOCATORS, DRA_LABEL
from hami_core.sim.experiment import (
    MAX_RUNS,
    Experiment,
    Policy,
    PolicyError,
    parse_seeds,
    resolve_policies,
    sim_pods,
)
from hami_core.sim.loader import InputError, bundled, load_file
from hami_core.sim.mix import MIX_SOURCES, write_mix
from hami_core.sim.priority import resolve_priorities
from hami_core.sim.replay import CPU_POD_PLACEMENTS
from hami_core.sim.report import print_single, report_json, summary_table, usage_json
from hami_core.sim.vendors import with_vendor_defaults
from hami_core.sim.workload import PROTOCOLS, from_task

#: GPU allocation ratio at 100 % arrived demand, mean of 10 seeds (traces/openb/README.md).
PAPER = {
    "default": {"Random-fit": 86.30, "Dot-product": 90.62, "GPU clustering": 91.65, "GPU packing": 91.78,
                "Best-fit": 92.86, "FGD": 95.23},
    "gpushare100": {"Random-fit": 78.90, "Dot-product": 81.98, "GPU clustering": 82.22, "GPU packing": 82.13,
                    "Best-fit": 84.62, "FGD": 86.64},
    "multigpu50": {"Random-fit": 81.28, "Dot-product": 94.73, "GPU clustering": 95.69, "GPU packing": 96.06,
                   "Best-fit": 95.62, "FGD": 97.09},
    "gpuspec33": {"Random-fit": 83.87, "Dot-product": 79.82, "GPU clustering": 81.09, "GPU packing": 82.22,
                  "Best-fit": 80.39, "FGD": 87.84},
}
DETAIL_LIMIT = 300
#: Largest ``--inflate`` without ``--force``: the task list grows with it (x100 of a trace is a million pods).
MAX_INFLATE = 100.0


def _cpus() -> int:
    """CPUs this process may run on (a container's cpuset, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _check_numbers(args: argparse.Namespace) -> None:
    """Refuse out-of-range numbers before any input is read, each in one line naming its flag."""
    if not math.isfinite(args.inflate) or args.inflate <= 0:
        raise PolicyError(f"--inflate: must be a positive number, got {args.inflate:g}")
    if args.inflate > MAX_INFLATE and not args.force:
        raise PolicyError(f"--inflate {args.inflate:g}: more than {MAX_INFLATE:g} times the capacity "
                          "(--force allows it)")
    if args.split_count < 1:
        raise PolicyError(f"--split-count: must be at least 1, got {args.split_count}")
    if args.jobs is not None and args.jobs < 1:
        raise PolicyError(f"--jobs: must be at least 1, got {args.jobs}")
    _check_bound(args)


def _check_bound(args: argparse.Namespace) -> None:
    """``--bound`` models openb tasks on openb nodes (a share of each GPU, or whole GPUs): refuse anything else."""
    if args.bound is None:
        return
    from hami_core.sim.bound import METHODS, require_solver

    if args.bound not in METHODS:
        raise PolicyError(f"--bound {args.bound}: expected one of {', '.join(METHODS)}")
    if not (args.trace_nodes and args.trace_pods):
        raise PolicyError("--bound: needs --trace-nodes and --trace-pods (the bound models openb tasks, whose GPU "
                          "shares are known before placement, on openb nodes)")
    if args.explain:
        raise PolicyError("--bound and --explain are exclusive (--explain prints no report to put the bound in)")
    require_solver()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Place a workload onto a cluster with the real scheduling engine, in-process, and report where pods "
        "went, how much GPU was allocated as demand arrived, what failed and why, and how fragmented the "
        "cluster became. Without inputs it uses the bundled example cluster and workload.")
    src = parser.add_argument_group("inputs")
    src.add_argument("--cluster", metavar="PATH", help="YAML file of Node objects (default: bundled example)")
    src.add_argument("--workload", metavar="PATH", help="YAML file of Pod objects (default: bundled example)")
    src.add_argument("--trace-nodes", metavar="CSV", help="openb node list (openb_node_list_gpu_node.csv)")
    src.add_argument("--trace-pods", metavar="CSV", help="openb task list (openb_pod_list_*.csv)")
    src.add_argument("--config", metavar="PATH",
                     help="device-config.yaml; its sections override the defaults (default: the chart defaults of "
                          "every installed vendor whose devices are on the nodes or requested by the pods; NVIDIA "
                          "for traces)")
    src.add_argument("--split-count", type=int, default=10, metavar="N",
                     help="tasks that may share one trace GPU (HAMi deviceSplitCount; default 10)")
    src.add_argument("--strict", action="store_true",
                     help="stop at the first malformed CSV row or YAML object instead of skipping it with a "
                          "warning")
    run = parser.add_argument_group("experiment")
    run.add_argument("--policy", metavar="LIST",
                     help="policies to compare, e.g. 'binpack,spread,binpack/spread' (NODE[/GPU], '+' chains GPU "
                          "tokens); 'list' prints the policies the installed plugins offer")
    run.add_argument("--node-policy", help="default node policy (as HAMi's --node-scheduler-policy)")
    run.add_argument("--gpu-policy", help="default GPU policy (as HAMi's --gpu-scheduler-policy)")
    run.add_argument("--mode", choices=("auto", "arrival", "openb"), default="auto",
                     help="arrival: pods in file order; openb: inflate and shuffle per seed (default: openb for "
                          "--trace-pods or when a seed is given, arrival otherwise)")
    run.add_argument("--seed", type=int, help="seed of the openb experiment (default 42)")
    run.add_argument("--seeds", metavar="SPEC", help="several seeds: N-M or a comma list (e.g. 42-51)")
    run.add_argument("--inflate", type=float, default=1.3, metavar="X",
                     help="openb: top tasks up until demand is X times capacity (default 1.3)")
    run.add_argument("--protocol", choices=PROTOCOLS, default="shuffled",
                     help="openb: how each seed draws the task list and node order. shuffled (default): the tasks "
                          "topped up with random copies, all shuffled, nodes in file order; paper: as the FGD "
                          "paper's simulator, the tasks shuffled with the copies after them, and the nodes renamed "
                          "NNNN-<name> into a random order, so ties between equal scores go to a random node")
    run.add_argument("--fgd-mix", choices=MIX_SOURCES, default="online",
                     help="the fgd policy's workload mix: learned from the pods seen (online, the default), or the "
                          "task list's classes given up front as the FGD paper's typical pods (CPU-only pods "
                          "included, most popular covering scheduler.fgd.coverage): trace weighs each by its share "
                          "of all tasks, paper renormalises them to sum to 1 as the paper's simulator does")
    run.add_argument("--cpu-pods", choices=CPU_POD_PLACEMENTS, default="policy",
                     help="where pods without devices go: as the node policy would (policy, the default: binpack "
                          "packs them, spread spreads them, fgd ranks them, as the FGD paper's simulator places "
                          "every task), or as kube-scheduler's default does in a cluster, where HAMi's extender never "
                          "sees them (least-allocated: the node with the most free CPU and memory)")
    run.add_argument("--preemption", action="store_true",
                     help="a pod that fits nowhere preempts, as kube-scheduler with hami's device-aware victim "
                          "choice: the fewest lower-priority pods whose devices it needs are evicted (not "
                          "resubmitted). Priorities: spec.priority or priorityClassName (PriorityClass objects in the "
                          "workload file), or the openb trace's qos column (LS, Guaranteed 2000; Burstable 1000; BE 0)")
    run.add_argument("--defrag", metavar="AT",
                     help="run the defragmenter (hami defrag) inside each run: a comma list of points, each a "
                          "percentage of arrived GPU demand at which the planner runs and its moves are applied "
                          "(70,80,90), or pending: whenever a pod fits nowhere, move the fewest pods that make it fit "
                          "(their replacements placed through the engine). See docs/defrag.md, In the simulator")
    run.add_argument("--defrag-percent", type=float, default=5.0, metavar="K",
                     help="the defragmenter's budget for the whole run: moves never exceed K %% of the pods holding "
                          "devices at the time (default 5)")
    run.add_argument("--allocator", choices=ALLOCATORS, default="hami",
                     help="who places the pods: hami (the default: HAMi's extender with the node and GPU policies) "
                          "or dra (kube-scheduler's DRA allocator with consumable capacity: the pods translated to "
                          "ResourceClaims, the first device in ResourceSlice order that satisfies each request, nodes "
                          "scored by kube-scheduler's default plugins; no HAMi policy, so no --policy, --node-policy, "
                          "--gpu-policy, --fgd-mix, --preemption or --explain)")
    run.add_argument("--bound", nargs="?", const="auto", metavar="METHOD",
                     help="also compute, per seed, the ceiling: an upper bound on the GPU allocation at 100 %% arrived "
                          "demand that any placement of the same arrived pods could reach (needs --trace-nodes, "
                          "--trace-pods and scipy). METHOD: exact (the placement problem as an integer program, "
                          "small clusters), classes (a linear program over pod classes and node types) or auto (the "
                          "default: exact when small). Each run also gets its ceiling for moves: the same bound "
                          "keeping every pod the run placed, which no defragmenter can pass; see docs/simulation.md, "
                          "The ceiling")
    out = parser.add_argument_group("output")
    out.add_argument("--report", metavar="PATH", help="write the JSON report here")
    out.add_argument("--html", metavar="PATH", help="write a self-contained HTML report with charts here")
    out.add_argument("--json", action="store_true", help="print the JSON report on stdout instead of tables")
    out.add_argument("--mix-out", metavar="PATH",
                     help="write the workload's mix as a scheduler.fgd.workload config (what --fgd-mix trace gives "
                          "fgd): from a cluster's past pods, a fixed mix for its scheduler")
    out.add_argument("--no-progress", action="store_true", help="no progress bar")
    out.add_argument("--explain", metavar="NS/POD",
                     help="instead of the report, explain one pod of the workload (NAMESPACE/NAME or NAME) when it "
                          "arrives in the first policy's run: each node's, device's and check's verdict, as hami "
                          "explain prints it (--json: as JSON)")
    run.add_argument("--jobs", type=int, metavar="N",
                     help="runs (policies x seeds) at a time, one process each (default: the CPUs this process may "
                          "use; 1 runs them in this process). The results are those of the serial run")
    run.add_argument("--force", action="store_true",
                     help=f"allow more than {MAX_RUNS} runs and --inflate above {MAX_INFLATE:g}")


def _check_dra(args: argparse.Namespace) -> None:
    """``--allocator dra`` runs no HAMi policy: refuse the flags that would choose or tune one."""
    given = [flag for flag, value in (("--policy", args.policy), ("--node-policy", args.node_policy),
                                      ("--gpu-policy", args.gpu_policy), ("--preemption", args.preemption),
                                      ("--defrag", args.defrag),
                                      ("--explain", args.explain)) if value]
    if args.fgd_mix != "online":
        given.append(f"--fgd-mix {args.fgd_mix}")
    if given:
        raise PolicyError(f"--allocator dra: {', '.join(given)} cannot apply: kube-scheduler's DRA allocator takes "
                          "the first device that satisfies each request and scores nodes with its default plugins, "
                          "with no HAMi node or GPU policy (run --allocator hami for those)")


def _config(args: argparse.Namespace) -> EngineConfig:
    if args.config:
        config = load_config(args.config)
    elif not (args.cluster or args.trace_nodes):  # the bundled cluster has a node of every vendor
        config = load_config(yaml.safe_load(bundled("device-config.yaml")))
    else:
        config = load_config(None)
    overrides = {}
    if args.node_policy:
        overrides["node_scheduler_policy"] = args.node_policy
    if args.gpu_policy:
        overrides["gpu_scheduler_policy"] = args.gpu_policy
    if not overrides:
        return config
    try:
        scheduler = SchedulerConfig.model_validate({**config.scheduler.model_dump(), **overrides})
    except ValidationError as exc:
        raise pydantic_error("scheduler", exc) from None
    return replace(config, scheduler=scheduler)


def _inputs(args: argparse.Namespace, config: EngineConfig, plugins: Any) -> tuple[
        EngineConfig, list[dict[str, Any]], list[dict[str, Any]], list[Any], dict[str, Any]]:
    """(the configuration with the vendors found switched on, nodes, resource quotas, tasks, the inputs' description
    for the report)."""
    skipped: list[str] = []
    quotas: list[dict[str, Any]] = []
    if args.trace_nodes:
        trace_nodes = openb.load_nodes(args.trace_nodes, strict=args.strict, skipped=skipped)
        nodes = [openb.node_object(n, split_count=args.split_count) for n in trace_nodes]
        cluster = args.trace_nodes
    else:
        objects, cluster = load_file(args.cluster, default="cluster.yaml", kind=("Node", "ResourceQuota"),
                                     strict=args.strict, skipped=skipped)
        nodes = [o for o in objects if o.get("kind", "Node") == "Node"]
        quotas = [o for o in objects if o.get("kind") == "ResourceQuota"]
        if not nodes:
            raise InputError(f"{cluster}: no Node objects (a cluster file holds Nodes, and optionally ResourceQuotas)")
    if args.trace_pods:
        tasks = [from_task(t) for t in openb.load_tasks(args.trace_pods, strict=args.strict, skipped=skipped)]
        workload = args.trace_pods
        if args.cluster:  # YAML nodes under a trace workload: their vendors and the tasks' (NVIDIA) too
            config = with_vendor_defaults(config, plugins, nodes, [t.pod for t in tasks])
    else:
        objects, workload = load_file(args.workload, default="workload.yaml", kind=("Pod", "PriorityClass"),
                                      strict=args.strict, skipped=skipped)
        pods = [o for o in objects if o.get("kind", "Pod") == "Pod"]
        resolve_priorities(pods, [o for o in objects if o.get("kind") == "PriorityClass"], source=workload)
        for i, pod in enumerate(pods):
            meta = pod.setdefault("metadata", {})
            meta.setdefault("uid", f"sim-{i:06d}")
        if args.cluster:  # the vendors of the nodes and pods, not NVIDIA alone (trace nodes are NVIDIA)
            config = with_vendor_defaults(config, plugins, nodes, pods)
        tasks = sim_pods(Engine(config, plugins=plugins), pods)
    return config, nodes, quotas, tasks, {"cluster": cluster, "workload": workload, "nodes": len(nodes),
                                          "resource_quotas": len(quotas), "tasks": len(tasks),
                                          "skipped_rows": len(skipped), "device_sections": sorted(config.devices)}


def _print_policies(engine: Engine) -> int:
    table = Table(title="Scheduling policies offered by the installed plugins")
    for col in ("kind", "name", "description"):
        table.add_column(col)
    for p in engine.policies():
        table.add_row(p.kind, p.name, p.description)
    Console().print(table)
    return 0


def _check_outputs(args: argparse.Namespace) -> None:
    """Fail before a long experiment, not after it, when an output file cannot be written."""
    for flag, path in (("--report", args.report), ("--html", args.html), ("--mix-out", args.mix_out)):
        if not path:
            continue
        target = Path(path)
        folder = target.parent if str(target.parent) else Path(".")
        if target.is_dir():
            raise InputError(f"{flag} {path}: is a directory")
        if not folder.is_dir():
            raise InputError(f"{flag} {path}: no such directory {folder}")
        if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            raise InputError(f"{flag} {path}: not writable")


def run(args: argparse.Namespace) -> int:
    _check_numbers(args)
    _check_outputs(args)
    config = _config(args)
    plugins = get_plugin_manager(blocked=config.blocked_plugins)
    probe = Engine(config, plugins=plugins)
    if args.policy == "list":
        return _print_policies(probe)
    default = Policy(f"{config.scheduler.node_scheduler_policy}/{config.scheduler.gpu_scheduler_policy}",
                     config.scheduler.node_scheduler_policy, config.scheduler.gpu_scheduler_policy)
    policies = resolve_policies(args.policy, probe) if args.policy else [default]
    if args.allocator == "dra":
        _check_dra(args)
        policies = [Policy(DRA_LABEL, default.node, default.gpu, allocator="dra")]
    seeded = args.seeds is not None or args.seed is not None
    mode = args.mode if args.mode != "auto" else ("openb" if args.trace_pods or seeded else "arrival")
    if args.seeds is not None and args.seed is not None:
        raise PolicyError("--seed and --seeds are exclusive")
    if mode == "arrival" and seeded:
        raise PolicyError("--seed/--seeds apply to --mode openb (arrival order has no randomness)")
    if mode == "arrival" and args.protocol != "shuffled":
        raise PolicyError(f"--protocol {args.protocol} applies to --mode openb (arrival order draws nothing)")
    seeds = None
    if mode == "openb":
        seeds = (parse_seeds(args.seeds, **({} if args.force else {"limit": MAX_RUNS})) if args.seeds
                 else [args.seed if args.seed is not None else 42])
        if len(seeds) * len(policies) > MAX_RUNS and not args.force:
            raise PolicyError(f"--seeds {args.seeds} x --policy: {len(seeds) * len(policies)} runs, more than "
                              f"{MAX_RUNS} (--force allows more)")
    defrag = DefragSpec.parse(args.defrag, args.defrag_percent) if args.defrag else None
    config, nodes, quotas, tasks, inputs = _inputs(args, config, plugins)
    if args.allocator == "dra" and quotas:
        raise PolicyError(f"--allocator dra: {inputs['cluster']} has ResourceQuotas, which limit HAMi's device "
                          "resources; DRA claims consume none of them (use --allocator hami, or a cluster without "
                          "ResourceQuotas)")
    inputs["allocator"] = args.allocator
    inputs.update(mode=mode, seeds=seeds, inflate=args.inflate if mode == "openb" else None,
                  policies=[p.label for p in policies], fgd_mix=args.fgd_mix, cpu_pods=args.cpu_pods,
                  preemption=args.preemption, defrag=defrag.label() if defrag else None,
                  defrag_percent=defrag.percent if defrag else None,
                  protocol=args.protocol if mode == "openb" else None)
    single = seeds is None and len(policies) == 1 and len(tasks) <= DETAIL_LIMIT
    experiment = Experiment(config, plugins, nodes, tasks, policies, seeds=seeds, inflate=args.inflate,
                            keep_placements=single, quotas=quotas, fgd_mix=args.fgd_mix,
                            protocol=args.protocol, cpu_pods=args.cpu_pods, preemption=args.preemption,
                            defrag=defrag)
    if args.explain:
        from hami_core.engine.explainview import print_explanation
        from hami_core.sim.explain import explain_arrival

        print_explanation(explain_arrival(experiment, args.explain), output="json" if args.json else "table")
        return 0
    if args.mix_out:
        write_mix(args.mix_out, experiment.task_mix())
    console = Console(width=None if sys.stdout.isatty() else 140)
    err = Console(stderr=True)
    show_progress = not args.no_progress and not args.json and err.is_terminal
    jobs = args.jobs if args.jobs is not None else _cpus()
    if show_progress:  # one bar for the whole experiment, in runs: k of n done, the time left
        total = len(experiment.plan())
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("runs"), TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(),
                            console=err, transient=True)
        with progress:
            bar = progress.add_task(f"simulating ({min(jobs, total)} at a time)", total=total)
            runs = experiment.run(progress=lambda share: progress.advance(bar, share), jobs=jobs)
    else:
        runs = experiment.run(jobs=jobs)
    bounds = moves = None
    if args.bound is not None:
        from hami_core.sim.bound import experiment_bounds, moves_bounds

        bounds = experiment_bounds(experiment, method=args.bound)
        moves = moves_bounds(experiment, runs, method=args.bound)
    report = report_json(runs, policies, inputs, bounds=bounds, moves=moves)
    trace = Path(args.trace_pods).stem.removeprefix("openb_pod_list_") if args.trace_pods else ""
    if single and runs[0].engine is not None:
        report["nodes"] = usage_json(runs[0].engine)
    if args.report:
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.html:
        from hami_core.sim.html import render

        Path(args.html).write_text(render(report, paper=PAPER.get(trace), trace=trace), encoding="utf-8")
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    header = (f"cluster: {inputs['cluster']} ({inputs['nodes']} nodes)   workload: {inputs['workload']} "
              f"({inputs['tasks']} pods)   mode: {mode}" + (f"   seeds: {seeds}" if seeds else "")
              + (f"   fgd mix: given from the task list ({args.fgd_mix})" if args.fgd_mix != "online" else "")
              + ("   protocol: the FGD paper's" if args.protocol == "paper" else "")
              + ("   CPU-only pods: least allocated" if args.cpu_pods != "policy" else "")
              + ("   preemption: on" if args.preemption else "")
              + (f"   defrag: {defrag.label()} (budget {defrag.percent:g} % of pods)" if defrag else "")
              + ("   allocator: kube-scheduler's DRA (first fit)" if args.allocator == "dra" else ""))
    if single and runs[0].engine is not None:
        print_single(console, runs[0].engine, runs[0], header)
    else:
        console.print(header)
    console.print(summary_table(runs, paper=PAPER.get(trace), bounds=bounds, moves=moves))
    for path in (args.report, args.html, args.mix_out):
        if path:
            console.print(f"wrote {path}")
    return 0
