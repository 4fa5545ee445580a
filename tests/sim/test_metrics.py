"""Simulator metrics on small hand-computed clusters: inflation, allocation ratio, fragmentation, reasons."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from hami_core.engine.config import load_config
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim import openb
from hami_core.sim.experiment import Experiment, Policy, PolicyError, parse_seeds, resolve_policies, summarize
from hami_core.sim.fragmentation import FragmentationModel, TaskClass, workload_classes
from hami_core.sim.openb import Task, TraceNode
from hami_core.sim.replay import Replay, dominant_reason
from hami_core.sim.workload import from_task, inflate, node_order, node_ranks

BINPACK = Policy("binpack", "binpack", "binpack")


def _tasks(*specs: tuple[int, int]) -> list:
    return [from_task(Task(f"t{i}", 1000, 1024, n, milli)) for i, (n, milli) in enumerate(specs)]


def test_inflation_tops_up_to_the_target_then_shuffles() -> None:
    tasks = _tasks((1, 500), (2, 1000), (0, 0), (1, 200))
    capacity = 10_000
    out = inflate(tasks, capacity, 1.3, random.Random(7))
    demand = sum(t.gpu_demand for t in out)
    assert demand >= 13_000
    copies = [t for t in out if "-copy" in t.pod["metadata"]["name"]]
    last = max(copies, key=lambda t: int(t.pod["metadata"]["name"].rsplit("copy", 1)[1]))
    assert demand - last.gpu_demand < 13_000
    assert {t.pod["metadata"]["name"] for t in tasks} <= {t.pod["metadata"]["name"] for t in out}
    assert len({t.pod["metadata"]["uid"] for t in out}) == len(out)
    again = inflate(tasks, capacity, 1.3, random.Random(7))
    assert [t.pod["metadata"]["name"] for t in again] == [t.pod["metadata"]["name"] for t in out]
    other = inflate(tasks, capacity, 1.3, random.Random(8))
    assert [t.pod["metadata"]["name"] for t in other] != [t.pod["metadata"]["name"] for t in out]


def test_inflation_keeps_lists_that_already_exceed_the_target_and_cpu_only_lists() -> None:
    tasks = _tasks((8, 1000), (8, 1000))
    assert len(inflate(tasks, 10_000, 1.3, random.Random(1))) == 2
    cpu = _tasks((0, 0))
    assert len(inflate(cpu, 10_000, 1.3, random.Random(1))) == 1


def test_paper_protocol_shuffles_the_tasks_then_appends_the_copies() -> None:
    """The FGD paper's simulator shuffles the trace and appends its workload-tuning copies after it."""
    tasks = _tasks(*[(1, 100 * (i % 9 + 1)) for i in range(30)])
    capacity = 20_000
    out = inflate(tasks, capacity, 1.3, random.Random(3), "paper")
    names = [t.pod["metadata"]["name"] for t in out]
    head = names[:len(tasks)]
    assert sorted(head) == sorted(t.pod["metadata"]["name"] for t in tasks)  # every task once, before any copy
    assert head != [t.pod["metadata"]["name"] for t in tasks]  # and shuffled
    copies = names[len(tasks):]
    assert copies and all("-copy" in n for n in copies)
    assert [int(n.rsplit("copy", 1)[1]) for n in copies] == list(range(1, len(copies) + 1))  # in the order drawn
    demand = sum(t.gpu_demand for t in out)
    assert demand >= 26_000 and demand - out[-1].gpu_demand < 26_000
    assert [t.pod["metadata"]["name"] for t in inflate(tasks, capacity, 1.3, random.Random(3), "paper")] == names
    shuffled = [t.pod["metadata"]["name"] for t in inflate(tasks, capacity, 1.3, random.Random(3))]
    assert any("-copy" in n for n in shuffled[:len(tasks)])  # the default mixes copies in
    with pytest.raises(ValueError, match="protocol 'nope'"):
        inflate(tasks, capacity, 1.3, random.Random(3), "nope")


def test_paper_protocol_node_order_renames_nodes_into_a_random_permutation() -> None:
    nodes = [{"metadata": {"name": f"node-{i}", "labels": {"a": str(i)}}, "status": {"allocatable": {"cpu": "1"}}}
             for i in range(12)]
    out = node_order(nodes, 5)
    ranks = node_ranks(12, 5)
    assert sorted(ranks) == list(range(12)) and ranks != list(range(12))
    assert [n["metadata"]["name"] for n in out] == sorted(n["metadata"]["name"] for n in out)  # listed in rank order
    by_old = {n["metadata"]["name"].split("-", 1)[1]: n for n in out}
    for i, node in enumerate(nodes):
        moved = by_old[f"node-{i}"]
        assert moved["metadata"]["name"] == f"{ranks[i]:04d}-node-{i}"
        assert moved["metadata"]["labels"] == node["metadata"]["labels"] and moved["status"] == node["status"]
        assert node["metadata"]["name"] == f"node-{i}"  # the input is not changed
    assert node_order(nodes, 5) == out and node_order(nodes, 6) != out
    wide = node_order([{"metadata": {"name": f"n{i}"}} for i in range(10_001)], 1)
    assert wide[0]["metadata"]["name"].startswith("00000-")


def test_paper_protocol_runs_on_the_renamed_nodes() -> None:
    """Each seed's run places onto that seed's renamed nodes, and ties go by the random order, not the file's."""
    trace_nodes = [TraceNode(f"n{i}", 8000, 65536, 1, "T4") for i in range(6)]
    nodes = [openb.node_object(n) for n in trace_nodes]
    tasks = _tasks((1, 1000))
    config = load_config(None)
    pm = get_plugin_manager()
    placed = {}
    for protocol in ("shuffled", "paper"):
        for seed in (1, 2, 3):
            exp = Experiment(config, pm, nodes, tasks, [BINPACK], seeds=[seed], inflate=0.1, keep_placements=True,
                             protocol=protocol)
            run = exp.run()[0]
            placed[protocol, seed] = run.placements[0].node
    assert {placed["shuffled", s] for s in (1, 2, 3)} == {"n0"}  # a tie between empty nodes: the first by name
    for seed in (1, 2, 3):
        assert placed["paper", seed].startswith("0000-")  # the node ranked first in the seed's permutation
    assert len({placed["paper", s] for s in (1, 2, 3)}) > 1
    with pytest.raises(PolicyError, match="protocol 'Paper': expected one of shuffled, paper"):
        Experiment(config, pm, nodes, tasks, [BINPACK], seeds=[1], protocol="Paper")
    with pytest.raises(PolicyError, match="fgd_mix 'oracle': expected one of online, trace, paper"):
        Experiment(config, pm, nodes, tasks, [BINPACK], seeds=[1], fgd_mix="oracle")
    with pytest.raises(PolicyError, match="cpu_pods 'spread': expected one of policy, least-allocated"):
        Experiment(config, pm, nodes, tasks, [BINPACK], seeds=[1], cpu_pods="spread")
    with pytest.raises(ValueError, match="cpu_pods must be one of policy, least-allocated, got 'spread'"):
        Replay(Engine(config, plugins=pm), nodes, policy="binpack", seed=1, cpu_pods="spread")


def test_fragmentation_by_hand() -> None:
    """Two nodes of two GPUs. Node a: free [1000, 300]; node b: free [1000, 1000] but no CPU left.

    Workload: half 500-milli tasks, half 1-whole-GPU tasks (both 1 CPU).
    a: 500 fits (GPU0) ⇒ GPU1's 300 is stranded; whole fits (GPU0) ⇒ 300 stranded ⇒ F_a = 300.
    b: nothing fits for lack of CPU ⇒ all 2000 free is fragment ⇒ F_b = 2000.
    """
    classes = [TaskClass(1, 500, (), 1000, 0, 0.5), TaskClass(1, 1000, (), 1000, 0, 0.5)]
    model = FragmentationModel([["NVIDIA-T4", "NVIDIA-T4"], ["NVIDIA-T4", "NVIDIA-T4"]], classes)
    free = np.array([[1000.0, 300.0], [1000.0, 1000.0]])
    frag = model.node_fragments(free, np.array([4000.0, 0.0]), np.array([1e9, 1e9]))
    assert frag.tolist() == [300.0, 2000.0]
    # a CPU-only class sees every free share as a fragment; a model-restricted class sees foreign GPUs so
    cpu_only = FragmentationModel([["NVIDIA-T4"]], [TaskClass(0, 0, (), 0, 0, 1.0)])
    assert cpu_only.node_fragments(np.array([[700.0]]), np.array([1e9]), np.array([1e9])).tolist() == [700.0]
    v100 = FragmentationModel([["NVIDIA-T4"]], [TaskClass(1, 100, ("V100",), 0, 0, 1.0)])
    assert v100.node_fragments(np.array([[700.0]]), np.array([1e9]), np.array([1e9])).tolist() == [700.0]


def test_workload_classes_weights() -> None:
    classes = workload_classes(_tasks((1, 500), (1, 500), (2, 1000), (0, 0)))
    assert [(c.num_gpu, c.per_gpu, c.weight) for c in classes] == [(0, 0, 0.25), (1, 500, 0.5), (2, 1000, 0.25)]


def _experiment(nodes: list[TraceNode], tasks: list, **kw: object) -> Experiment:
    objects = [openb.node_object(n) for n in nodes]
    return Experiment(load_config(None), get_plugin_manager(), objects, tasks, [BINPACK], **kw)  # type: ignore[arg-type]


def test_allocation_ratio_and_failures_by_hand() -> None:
    """One node with 2 GPUs (capacity 2000 milli), arrival order:

    0.6 GPU → GPU a (arrived 30 %, allocated 30 %); 0.6 GPU → binpack's GPU a is too full, GPU b (60/60);
    1 whole GPU → no idle GPU, fails (arrived 110 %: the 100 % mark is crossed here, allocation 60 %);
    0.4 GPU → fits on a (arrived 130 %, allocated 80 %); a CPU-only task → placed, no GPU.
    """
    exp = _experiment([TraceNode("n", 64000, 262144, 2, "T4")], _tasks((1, 600), (1, 600), (1, 1000), (1, 400),
                                                                        (0, 0)))
    (run,) = exp.run()
    assert (run.tasks, run.placed, run.failed) == (5, 4, 1)
    assert run.ratio_at_100 == pytest.approx(60.0)
    assert run.final_ratio == pytest.approx(80.0)
    assert dict(run.failed_by_reason) == {"CardInsufficientMemory": 1}
    assert run.curve[0] == (0.0, 0.0, run.curve[0][2])
    assert run.curve[-1][:2] == (130.0, 80.0)
    # per-model usage is taken when arrived demand reaches 100 %
    assert run.per_model == {"NVIDIA-T4": {"gpus": 2, "allocated_gpus": 1.2, "allocation_ratio": 60.0}}
    assert run.node_allocation == {"n": 0.8}


def test_cpu_and_memory_limit_placement() -> None:
    big = from_task(Task("big", 9000, 1024, 1, 100))
    exp = _experiment([TraceNode("small", 8000, 262144, 1, "T4"), TraceNode("large", 16000, 262144, 1, "T4")], [big])
    (run,) = exp.run()
    assert run.placed == 1 and run.node_allocation == {"small": 0.0, "large": 0.1}
    too_big = from_task(Task("huge", 64000, 1024, 1, 100))
    (run,) = _experiment([TraceNode("small", 8000, 262144, 1, "T4")], [too_big]).run()
    assert dict(run.failed_by_reason) == {"InsufficientCPUOrMemory": 1}


def test_seeded_runs_and_summary() -> None:
    nodes = [TraceNode(f"n{i}", 64000, 262144, 2, "T4") for i in range(3)]
    exp = _experiment(nodes, _tasks((1, 300), (1, 700), (2, 1000), (0, 0)), seeds=[1, 2])
    runs = exp.run()
    assert [r.seed for r in runs] == [1, 2]
    assert all(r.ratio_at_100 is not None for r in runs)
    summary = summarize(runs)["binpack"]
    assert summary["runs"] == 2
    assert summary["gpu_allocation_ratio_at_100"] == pytest.approx(
        round(sum(r.ratio_at_100 for r in runs) / 2, 3))  # type: ignore[misc]


def test_dominant_reason() -> None:
    assert dominant_reason({"a": "1/2 CardInsufficientMemory, 1/2 CardUuidMismatch",
                            "b": "2/2 CardInsufficientMemory", "c": "node unregistered"}) == "CardInsufficientMemory"
    assert dominant_reason({"a": "NodeInsufficientDevice"}) == "NodeInsufficientDevice"
    # device-level reasons outrank nodes rejected as a whole, however many
    assert dominant_reason({"a": "1/1 CardInsufficientCore", "b": "NodeInsufficientDevice",
                            "c": "NodeInsufficientDevice"}) == "CardInsufficientCore"
    assert dominant_reason({}) == "NoCandidateNode"
    # a text shared by several nodes counts once per node (each distinct text is parsed once)
    assert dominant_reason({"a": "1/1 CardUuidMismatch", "b": "1/1 CardUuidMismatch",
                            "c": "1/1 CardInsufficientCore"}) == "CardUuidMismatch"
    assert dominant_reason({"a": "node unregistered", "b": "node unregistered",
                            "c": "NodeInsufficientDevice"}) == "node unregistered"


def test_parse_seeds_and_resolve_policies() -> None:
    assert parse_seeds("42-45") == [42, 43, 44, 45]
    assert parse_seeds("1, 5,9") == [1, 5, 9]
    for bad in ("x", "5-1", "-3", ""):
        with pytest.raises(PolicyError):
            parse_seeds(bad)
    from hami_core.engine.facade import Engine

    engine = Engine()
    assert resolve_policies("binpack, spread/binpack+numa, mutex", engine) == [
        Policy("binpack", "binpack", "binpack"), Policy("spread/binpack+numa", "spread", "binpack,numa"),
        Policy("mutex", "binpack", "mutex")]
    with pytest.raises(PolicyError, match="unknown GPU policy 'fast'"):
        resolve_policies("binpack/fast", engine)


def test_protocol_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """``--protocol paper`` on the bundled demo: the report names the protocol and its runs use renamed nodes;
    the flag is refused where nothing is drawn (arrival order), and an unknown protocol is a usage error."""
    from hami_core.cli import main

    assert main(["simulate", "--seeds", "1-2", "--protocol", "paper", "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"]["protocol"] == "paper" and report["inputs"]["mode"] == "openb"
    for run in report["runs"]:
        assert run["node_allocation"] and all(re.match(r"\d{4}-", name) for name in run["node_allocation"])
    assert main(["simulate", "--seeds", "1", "--json", "--no-progress"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert plain["inputs"]["protocol"] == "shuffled"
    assert not any(re.match(r"\d{4}-", name) for name in plain["runs"][0]["node_allocation"])
    assert main(["simulate", "--protocol", "paper", "--no-progress"]) == 1
    assert "--protocol paper applies to --mode openb" in capsys.readouterr().err
    assert main(["simulate", "--protocol", "nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
