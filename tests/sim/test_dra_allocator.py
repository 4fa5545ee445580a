"""``hami simulate --allocator dra``: kube-scheduler's DRA placement (hami_core.sim.dra) on small clusters whose
outcome is worked out by hand: first fit in slice order, consumed capacity and its rounding, whole cards, distinct
devices for multi-GPU requests, CPU/memory filtering, LeastAllocated + BalancedAllocation scoring, determinism,
and the CLI flag with its refusals."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from hami_core.cli import main
from hami_core.engine.config import load_config
from hami_core.plugins.dra import MIB, DraCapacity, DraDevice
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import ContainerRequests, DeviceInfo, DeviceRequest, DeviceUsage
from hami_core.sim.dra import (
    CANNOT_ALLOCATE,
    DevicePool,
    DraReplay,
    DraRequest,
    allocate_on,
    balanced_allocation,
    consumed_quantity,
    least_allocated,
    translate,
)
from hami_core.sim.experiment import Experiment, Policy
from hami_core.sim.openb import Task, TraceNode, node_object
from hami_core.sim.replay import INSUFFICIENT_CPU_MEMORY, Placed
from hami_core.sim.workload import SimPod, from_task

PLUGINS = get_plugin_manager()
DRA = Policy("dra", "binpack", "spread", allocator="dra")


def nodes(*specs: tuple[str, int, int, int, str]) -> list[dict[str, Any]]:
    """(name, cpu milli, memory MiB, GPUs, model) per node, as ``hami simulate`` registers trace nodes."""
    return [node_object(TraceNode(*spec)) for spec in specs]


def task(name: str, gpus: int, milli: int, *, cpu: int = 1000, mem: int = 1024, spec: str = "") -> SimPod:
    return from_task(Task(name, cpu, mem, gpus, milli if gpus else 0, spec))


def replay(cluster: Sequence[dict[str, Any]], seed: int | None = None) -> DraReplay:
    experiment = Experiment(load_config(None), PLUGINS, cluster, [], [DRA])
    return DraReplay(experiment.engine(DRA), cluster, policy="dra", seed=seed, keep_placements=True)


def cards(rep: DraReplay, node: str) -> list[tuple[int, int, int]]:
    """(tasks, memory MiB, cores %) booked on each card of ``node``, in index order."""
    return [(d.used, d.usedmem, d.usedcores) for d in rep.devices[rep.row[node]]]


def picked(p: Placed) -> list[int]:
    assert p.decision is not None
    return [d.idx for per in p.decision.devices.values() for ctr in per for d in ctr]


# ---------------------------------------------------------------------------------------------- allocator rules
def test_first_fit_keeps_filling_the_first_card_that_satisfies() -> None:
    rep = replay(nodes(("n", 16000, 65536, 2, "V100M16")))
    a, b, c = (rep.place(task(n, 1, m)) for n, m in (("a", 300), ("b", 300), ("c", 500)))
    # 30 % + 30 % on gpu-0; 50 % no longer fits beside them (60 + 50 > 100 cores), so gpu-1: slice order, no score
    assert (picked(a), picked(b), picked(c)) == ([0], [0], [1])
    # memory: 30 % of the smallest (and only) card, 16384 MiB -> 4915 MiB (whole MiB: the policy's step)
    assert cards(rep, "n") == [(2, 2 * 4915, 60), (1, 8192, 50)]
    d = rep.place(task("d", 1, 400))  # 60 + 40 = 100: fits gpu-0 exactly
    assert picked(d) == [0]
    assert rep.result.allocated_milli == pytest.approx(1000 + 500)


def test_whole_cards_are_exclusive_and_a_busy_card_takes_no_whole_request() -> None:
    rep = replay(nodes(("n", 16000, 65536, 2, "T4")))
    share = rep.place(task("share", 1, 100))
    whole = rep.place(task("whole", 1, 1000))
    assert picked(share) == [0] and picked(whole) == [1]  # gpu-0 is partly used: a whole card is gpu-1
    assert cards(rep, "n")[1] == (1, 15360, 100)  # memory named nowhere: the default, the whole card
    later = rep.place(task("later", 1, 100))
    assert picked(later) == [0]  # nothing fits beside a whole card, not even 1 MiB
    again = rep.place(task("again", 1, 1000))
    assert again.node is None and again.reason == CANNOT_ALLOCATE


def test_split_count_is_a_consumed_capacity() -> None:
    rep = replay(nodes(("n", 64000, 262144, 2, "A10")))
    placed = [rep.place(task(f"t{i}", 1, 50)) for i in range(11)]
    # ten 5 % shares use gpu-0's ten shares (HAMi's split count), so the eleventh goes to gpu-1 with room left
    assert [picked(p)[0] for p in placed] == [0] * 10 + [1]
    assert cards(rep, "n")[0][0] == 10 and cards(rep, "n")[0][2] == 50


def test_multi_gpu_requests_take_distinct_cards() -> None:
    rep = replay(nodes(("one", 16000, 65536, 1, "A10"), ("two", 8000, 65536, 2, "A10")))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pair", "namespace": "default", "uid": "pair"},
           "spec": {"containers": [{"name": "main", "resources": {
               "requests": {"cpu": "1", "memory": "1Gi"},
               "limits": {"nvidia.com/gpu": "2", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "1000"}}}]}}
    p = rep.place(SimPod(pod, 1000, 1024, 2, 300))
    # "one" has the room for two 30 % shares on its card, but distinctAttribute (uuid) needs two cards: only "two"
    assert p.node == "two" and picked(p) == [0, 1]
    assert cards(rep, "two") == [(1, 1000, 30), (1, 1000, 30)] and cards(rep, "one") == [(0, 0, 0)]


def test_use_gputype_is_a_selector_on_the_type() -> None:
    rep = replay(nodes(("t4", 16000, 65536, 1, "T4"), ("v100", 8000, 65536, 1, "V100M32")))
    p = rep.place(task("pinned", 1, 200, spec="V100M32"))
    assert p.node == "v100"
    # the percentage is resolved against the smallest card the selector allows: 20 % of 32768 MiB
    assert cards(rep, "v100") == [(1, 6553, 20)]
    assert rep.place(task("nowhere", 1, 200, spec="A100")).reason == CANNOT_ALLOCATE


def test_two_containers_get_one_claim_each_on_the_same_node() -> None:
    rep = replay(nodes(("n", 16000, 65536, 2, "A10")))
    rep.place(task("busy", 1, 300))  # gpu-0: 30 % of cores, 30 % of 24576 MiB = 7372 MiB
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "two", "namespace": "default", "uid": "two"},
           "spec": {"containers": [
               {"name": "share", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "60",
                                                          "nvidia.com/gpumem": "1000"}}},
               {"name": "whole", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    p = rep.place(SimPod(pod, 0, 0, 2, 1000))
    # the share fits beside "busy" on gpu-0 (first fit); the whole card is gpu-1, the only one nothing uses
    assert p.node == "n" and picked(p) == [0, 1]
    assert cards(rep, "n") == [(2, 7372 + 1000, 90), (1, 24576, 100)]
    assert p.decision is not None and [len(c) for c in p.decision.devices["NVIDIA"]] == [1, 1]


def _pool(cards: int) -> DevicePool:
    devices = []
    for i in range(cards):
        info = DeviceInfo(f"GPU-{i}", index=i, count=10, devmem=1000, devcore=100, type="NVIDIA-A10", health=True)
        capacity = {"memory": DraCapacity(1000 * MIB, default=1000 * MIB, minimum=MIB, step=MIB),
                    "cores": DraCapacity(100, default=0, minimum=0),
                    "shares": DraCapacity(10, default=1, minimum=1, maximum=1)}
        devices.append((DraDevice("NVIDIA", i, info.id, info.type, capacity=capacity), DeviceUsage(info)))
    return DevicePool("NVIDIA", [devices])


def test_the_allocator_backtracks_across_requests_of_one_pod() -> None:
    pool = _pool(2)
    # shares name their memory: a claim that names none consumes the default, the whole card's
    pool.take(0, 1, DraRequest("NVIDIA", 1, {"cores": 50, "memory": 100 * MIB}))  # gpu-1 half used, gpu-0 free
    share = DraRequest("NVIDIA", 1, {"cores": 40, "memory": 100 * MIB})
    whole = DraRequest("NVIDIA", 1, {"cores": 100}, container=1)
    assert allocate_on({"NVIDIA": pool}, 0, [DraRequest("NVIDIA", 1, {"cores": 10})]) == [
        (DraRequest("NVIDIA", 1, {"cores": 10}), 0)]  # no memory named: only the untouched card has all of it
    # first fit gives the share gpu-0; then no card is free for the whole one, so the search steps back and gives
    # the share the next device that satisfies it, gpu-1, leaving gpu-0 for the whole card
    assert allocate_on({"NVIDIA": pool}, 0, [share, whole]) == [(share, 1), (whole, 0)]
    assert allocate_on({"NVIDIA": pool}, 0, [whole, whole]) is None
    assert allocate_on({"MLU": pool}, 0, [share]) is None  # no device of the request's class on the node
    pair = DraRequest("NVIDIA", 2, {"cores": 10, "memory": MIB}, distinct=True)
    assert allocate_on({"NVIDIA": pool}, 0, [pair]) == [(pair, 0), (pair, 1)]


def test_capacity_rounding_follows_the_request_policy() -> None:
    cap = DraCapacity(value=100 * MIB, default=100 * MIB, minimum=MIB, step=MIB)
    assert consumed_quantity(None, cap) == 100 * MIB  # nothing named: the default
    assert consumed_quantity(10, cap) == MIB  # below the minimum: the minimum
    assert consumed_quantity(MIB + 1, cap) == 2 * MIB  # up to a whole step above the minimum
    assert consumed_quantity(3 * MIB, cap) == 3 * MIB
    odd = DraCapacity(value=100, default=7, minimum=10, step=4)
    assert [consumed_quantity(r, odd) for r in (None, 3, 10, 11, 14, 15)] == [7, 10, 10, 14, 14, 18]


def test_translation_of_hami_requests() -> None:
    reqs = ContainerRequests(({"NVIDIA": DeviceRequest("NVIDIA", 2, mem_percentage=100, coresreq=100)},
                              {"NVIDIA": DeviceRequest("NVIDIA", 1, memreq=2048, coresreq=0)},
                              {"NVIDIA": DeviceRequest("NVIDIA", 1, mem_percentage=25, coresreq=25)}))
    whole, mib, share = translate(reqs, ["v100"], {"NVIDIA": 16384})
    assert (whole.count, dict(whole.capacity), whole.distinct, whole.types) == (2, {"cores": 100}, True, ("V100",))
    assert dict(mib.capacity) == {"memory": 2048 * MIB} and not mib.distinct and mib.container == 1
    assert dict(share.capacity) == {"memory": 4096 * MIB, "cores": 25}


# ---------------------------------------------------------------------------------------------- kube-scheduler
def test_cpu_and_memory_filter_nodes_before_devices() -> None:
    rep = replay(nodes(("small", 2000, 4096, 1, "T4"), ("big", 32000, 131072, 1, "T4")))
    assert rep.place(task("fat", 1, 100, cpu=4000)).node == "big"  # "small" is first and has a free card
    assert rep.place(task("huge", 1, 100, cpu=64000)).reason == INSUFFICIENT_CPU_MEMORY
    cpu_only = rep.place(task("cpu", 0, 0, cpu=1000))
    assert cpu_only.node is not None and cpu_only.decision is not None and cpu_only.decision.skipped


def test_least_allocated_plus_balanced_scores_by_hand() -> None:
    rep = replay(nodes(("a", 8000, 32768, 1, "T4"), ("b", 16000, 32768, 1, "T4")))
    p = rep.place(task("p", 1, 100, cpu=4000, mem=4096))
    # a: LeastAllocated cpu 50, memory 87 -> 68; balanced: fractions 0.5 and 0.125, std 0.1875 -> 81; total 149
    # b: cpu 75, memory 87 -> 81; balanced: 0.25 and 0.125, std 0.0625 -> 93; total 174
    assert p.node == "b" and p.decision is not None and p.decision.scores == {"b": 174.0}
    assert list(least_allocated(np.array([4000, 16000, 1]), np.array([8000.0, 8000.0, np.inf]))) == [50, 0, 0]
    assert list(balanced_allocation(np.array([0.5, 2.0]), np.array([0.125, 1.0]))) == [81, 100]


def test_no_device_score_a_fuller_node_does_not_attract_shares() -> None:
    """DRA has no binpack: with equal CPU and memory the busier GPU node is not preferred (hami binpack would)."""
    rep = replay(nodes(("a", 16000, 65536, 2, "T4"), ("b", 16000, 65536, 2, "T4")))
    first = rep.place(task("first", 1, 500))
    second = rep.place(task("second", 1, 500))
    # LeastAllocated sends the second pod to the node the first did not load: the other node
    assert {first.node, second.node} == {"a", "b"}


def test_ties_are_broken_by_the_seed_deterministically() -> None:
    cluster = nodes(*((f"n{i}", 16000, 65536, 1, "T4") for i in range(8)))

    def run(seed: int) -> list[str | None]:
        rep = replay(cluster, seed)
        return [rep.place(task(f"t{i}", 1, 100)).node for i in range(4)]

    assert run(42) == run(42)
    assert len({tuple(run(s)) for s in range(42, 48)}) > 1  # a tie among empty nodes goes to a random one


def test_experiment_runs_dra_with_the_same_metrics() -> None:
    cluster = nodes(("a", 16000, 65536, 2, "T4"), ("b", 16000, 65536, 2, "V100M16"))
    tasks = [task("s", 1, 400), task("w", 1, 1000), task("m", 2, 1000, cpu=2000)]
    runs = Experiment(load_config(None), PLUGINS, cluster, tasks, [DRA], seeds=[42, 42]).run()
    assert runs[0].policy == "dra" and runs[0].capacity_milli == 4000
    assert [r.ratio_at_100 for r in runs] == [runs[0].ratio_at_100] * 2 and runs[0].ratio_at_100 is not None
    assert runs[0].curve and runs[0].per_model and runs[0].node_allocation


# ---------------------------------------------------------------------------------------------- the CLI
def _files(tmp_path: Path) -> tuple[str, str]:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(nodes(("a", 16000, 65536, 2, "T4"))))
    workload = tmp_path / "workload.yaml"
    workload.write_text(yaml.safe_dump_all([task(f"t{i}", 1, 300).pod for i in range(3)]))
    return str(cluster), str(workload)


def test_cli_allocator_dra_reports_the_allocator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, workload = _files(tmp_path)
    page = tmp_path / "report.html"
    assert main(["simulate", "--cluster", cluster, "--workload", workload, "--allocator", "dra", "--json",
                 "--html", str(page)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "<dt>allocator</dt><dd>dra (kube-scheduler&#x27;s DRA allocator: first device" in page.read_text()
    run = report["runs"][0]
    assert report["inputs"]["allocator"] == "dra"
    assert (run["policy"], run["allocator"], run["node_policy"], run["gpu_policy"]) == ("dra", "dra", None, None)
    assert [p["node"] for p in run["placements"]] == ["a"] * 3
    assert run["final_gpu_allocation_ratio"] == pytest.approx(45.0)  # 3 x 30 % of 2 cards, all on gpu-0
    assert main(["simulate", "--cluster", cluster, "--workload", workload, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["allocator"] == "hami"


@pytest.mark.parametrize("extra, named", [
    (["--policy", "binpack"], "--policy"),
    (["--node-policy", "spread"], "--node-policy"),
    (["--gpu-policy", "binpack"], "--gpu-policy"),
    (["--preemption"], "--preemption"),
    (["--fgd-mix", "trace"], "--fgd-mix trace"),
    (["--explain", "t0"], "--explain"),
])
def test_cli_refuses_hami_policies_with_dra(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                            named: str) -> None:
    cluster, workload = _files(tmp_path)
    assert main(["simulate", "--cluster", cluster, "--workload", workload, "--allocator", "dra", *extra]) == 1
    err = capsys.readouterr().err
    assert f"--allocator dra: {named} cannot apply" in err and "Traceback" not in err


def test_cli_refuses_resource_quotas_with_dra(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster, workload = _files(tmp_path)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "openb"},
             "spec": {"hard": {"limits.nvidia.com/gpu": "1"}}}
    Path(cluster).write_text(Path(cluster).read_text() + "---\n" + yaml.safe_dump(quota))
    assert main(["simulate", "--cluster", cluster, "--workload", workload, "--allocator", "dra"]) == 1
    assert "--allocator dra: " in capsys.readouterr().err


def test_cli_unknown_allocator_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--allocator", "kube"]) == 2
    assert "invalid choice: 'kube'" in capsys.readouterr().err
