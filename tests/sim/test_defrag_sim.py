"""``hami simulate --defrag``: the defragmenter inside a replay raises the allocation at 100 % arrived demand where
moves make room, keeps to its budget and the do-not-move label, never over-allocates a device or a node's CPU and
never loses a pod."""

from __future__ import annotations

import contextlib
import io
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hami_core.cli import main
from hami_core.engine.config import SchedulerConfig, load_config
from hami_core.engine.facade import Engine
from hami_core.engine.pods import pod_key
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim.defrag import DefragError, DefragReplay, DefragSpec
from hami_core.sim.fragmentation import workload_classes
from hami_core.sim.openb import Task, TraceNode, node_object
from hami_core.sim.replay import Replay, RunResult
from hami_core.sim.workload import SimPod, from_task


def _simulate(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["simulate", "--no-progress", "--jobs", "1", "--json", *args]) == 0
    return json.loads(out.getvalue())


def _engine(policy: str) -> Engine:
    config = load_config(None)
    sched = SchedulerConfig.model_validate({**config.scheduler.model_dump(), "node_scheduler_policy": policy,
                                            "gpu_scheduler_policy": policy})
    return Engine(replace(config, scheduler=sched), plugins=get_plugin_manager())


def _nodes(count: int, gpus: int, cpu: int = 64000) -> list[dict[str, Any]]:
    return [node_object(TraceNode(f"n{i}", cpu, 262144, gpus, "V100M16")) for i in range(count)]


def _task(name: str, milli: int, num: int = 1, cpu: int = 1000, labels: dict[str, str] | None = None) -> SimPod:
    pod = from_task(Task(name, cpu, 1024, num, milli))
    if labels:
        pod.pod["metadata"]["labels"] = labels
    return pod


def _halves_then_wholes(labels: dict[str, str] | None = None) -> list[SimPod]:
    """Four half cards spread over two nodes of two cards (one per card under ``spread``), then two pods of a whole
    card: without moves both fail (50 % at 100 % arrived), with one move each both fit (100 %)."""
    return [_task(f"half{i}", 500, labels=labels) for i in range(4)] + [_task(f"whole{i}", 1000) for i in range(2)]


def _run(tasks: Sequence[SimPod], spec: DefragSpec | None, *, policy: str = "spread", nodes: int = 2,
         gpus: int = 2, cpu: int = 64000) -> tuple[RunResult, DefragReplay | None]:
    engine = _engine(policy)
    if spec is None:
        replay: Any = Replay(engine, _nodes(nodes, gpus, cpu), policy=policy, seed=None)
    else:
        replay = DefragReplay(engine, _nodes(nodes, gpus, cpu), policy=policy, seed=None, defrag=spec)
    replay.use_workload(workload_classes(tasks))
    return replay.run(tasks), replay if spec is not None else None


def _check_books(replay: DefragReplay, tasks: Sequence[SimPod]) -> None:
    """No device or node over-allocated, every placed pod booked exactly once, the allocation measure exact."""
    engine = replay.engine
    for state in engine.nodes.values():
        for d in state.by_uuid.values():
            assert d.usedmem <= d.totalmem and d.usedcores <= d.totalcore and d.used <= d.count
    assert (replay.cpu_free >= 0).all() and (replay.mem_free >= 0).all()
    booked = {b.key for b in engine.ledger.bookings.values()}
    assert booked == set(replay.live)
    demand = sum(entry[0].gpu_demand for entry in replay.live.values())
    assert replay.result.allocated_milli == pytest.approx(demand, abs=1e-6)
    for key, (task, _, node, placed) in replay.live.items():
        assert engine.ledger.get(key).node == node == placed.node
        i = replay.row[node]
        assert task.cpu_milli <= replay.cpu_total[i]
    # each node's CPU in use is exactly its pods', those with devices and those without (moved ones included)
    used = {name: 0.0 for name in replay.names}
    for task, _, node, _ in replay.live.values():
        used[node] += task.cpu_milli
    for task, node in replay.hosted.values():
        used[node] += task.cpu_milli
    for name, i in replay.row.items():
        assert replay.cpu_total[i] - replay.cpu_free[i] == pytest.approx(used[name])


def test_pending_moves_raise_the_allocation_at_100() -> None:
    tasks = _halves_then_wholes()
    plain, _ = _run(tasks, None)
    assert plain.ratio_at_100 == pytest.approx(50.0) and plain.failed == 2
    moved, replay = _run(tasks, DefragSpec(pending=True, percent=50))
    assert replay is not None
    assert moved.ratio_at_100 == pytest.approx(100.0) and moved.failed == 0
    assert replay.stats.moves == 2 and replay.stats.rescued == 2
    assert moved.defrag is not None and moved.defrag["moves_at_100"] == 2
    _check_books(replay, tasks)


def test_pending_moves_a_pod_without_devices_off_a_node_short_of_cpu() -> None:
    # w0 takes one node's card; the CPU-only pod spreads to the other node, whose card is free but whose CPU is then
    # too short for w1. Moving the CPU-only pod next to w0 lets w1 take the free card: 50 % -> 100 % in one move.
    tasks = [_task("w0", 1000, cpu=1000), _task("c0", 0, 0, cpu=6000), _task("w1", 1000, cpu=4000)]
    plain, _ = _run(tasks, None, nodes=2, gpus=1, cpu=8000)
    assert plain.ratio_at_100 == pytest.approx(50.0) and plain.failed == 1
    moved, replay = _run(tasks, DefragSpec(pending=True, percent=100), nodes=2, gpus=1, cpu=8000)
    assert replay is not None
    assert moved.ratio_at_100 == pytest.approx(100.0) and moved.failed == 0
    assert replay.stats.moves == 1 and replay.stats.host_moves == 1 and replay.stats.rescued == 1
    assert moved.defrag is not None and moved.defrag["host_moves"] == 1
    w0, c0, w1 = (pod_key(t.pod) for t in tasks)
    assert replay.hosted[c0][1] == replay.live[w0][2] != replay.live[w1][2]  # c0 now beside w0
    _check_books(replay, tasks)
    # the CPU-only pod pinned, w0 moves instead (to the free card, its 1000 of CPU fits there) and w1 takes its node
    pin = {"hami.io/defrag": "false"}
    pinned_tasks = [tasks[0], _task("c0", 0, 0, cpu=6000, labels=pin), tasks[2]]
    other, replay = _run(pinned_tasks, DefragSpec(pending=True, percent=100), nodes=2, gpus=1, cpu=8000)
    assert replay is not None and replay.stats.host_moves == 0 and replay.stats.moves == 1 and other.failed == 0
    _check_books(replay, pinned_tasks)
    # both pinned: nothing moves and w1 fails
    both = [_task("w0", 1000, cpu=1000, labels=pin), pinned_tasks[1], tasks[2]]
    kept, replay = _run(both, DefragSpec(pending=True, percent=100), nodes=2, gpus=1, cpu=8000)
    assert replay is not None and replay.stats.moves == 0 and kept.failed == 1


@pytest.mark.parametrize(("case", "policy"), [(3, "spread"), (30, "spread"), (34, "binpack")])
def test_a_victim_with_no_room_goes_where_another_move_makes_way(case: int, policy: str) -> None:
    # three one-card nodes and random one-card shares (cases where the rescue needs a second hop): a victim that
    # fits no card as things are goes to a card that moving a pod with room elsewhere opens enough
    rng = random.Random(case)
    tasks = [_task(f"p{i}", rng.choice((100, 200, 300, 400, 500, 600, 700, 800, 1000)), 1, cpu=1000)
             for i in range(rng.choice((8, 10, 12, 16)))]
    plain, _ = _run(tasks, None, policy=policy, nodes=3, gpus=1)
    moved, replay = _run(tasks, DefragSpec(pending=True, percent=100), policy=policy, nodes=3, gpus=1)
    assert replay is not None and replay.stats.way_moves >= 1
    assert moved.ratio_at_100 is not None and plain.ratio_at_100 is not None
    assert moved.ratio_at_100 > plain.ratio_at_100
    assert moved.defrag is not None and moved.defrag["way_moves"] == replay.stats.way_moves
    _check_books(replay, tasks)


def test_the_budget_is_respected() -> None:
    # 25 % of 4 running pods is one move; at the second failure 25 % of 5 is still one: one rescue, not two
    moved, replay = _run(_halves_then_wholes(), DefragSpec(pending=True, percent=25))
    assert replay is not None and replay.stats.moves == 1 and replay.stats.rescued == 1
    assert moved.ratio_at_100 == pytest.approx(75.0)
    none, replay = _run(_halves_then_wholes(), DefragSpec(pending=True, percent=5))  # 5 % of 4: no move
    assert replay is not None and replay.stats.moves == 0 and none.ratio_at_100 == pytest.approx(50.0)


def test_do_not_move_label_is_respected() -> None:
    moved, replay = _run(_halves_then_wholes({"hami.io/defrag": "false"}), DefragSpec(pending=True, percent=50))
    assert replay is not None and replay.stats.moves == 0 and moved.ratio_at_100 == pytest.approx(50.0)


def test_a_move_whose_replacement_fits_nowhere_is_undone() -> None:
    # the half pods ask for 40 of 64 cores: moving one next to another would over-commit its node's CPU, so the
    # replacement fits nowhere and the step is undone (the whole pods need only 1 core each)
    tasks = [_task(f"half{i}", 500, cpu=40000) for i in range(2)] + [_task("whole", 1000)]
    moved, replay = _run(tasks, DefragSpec(pending=True, percent=100), nodes=2, gpus=1)
    assert replay is not None and replay.stats.moves == 0 and replay.stats.attempts == 1
    assert moved.failed == 1
    _check_books(replay, tasks)


def test_planner_points_free_whole_cards() -> None:
    # binpack alone packs; spread leaves four half cards: the planner at 60 % arrived moves a half onto another
    tasks = [_task(f"half{i}", 500) for i in range(4)] + [_task(f"whole{i}", 1000) for i in range(2)]
    moved, replay = _run(tasks, DefragSpec(points=(50.0,), percent=50))
    assert replay is not None and replay.stats.points and replay.stats.points[0][1] >= 1
    assert replay.stats.points[0][2] >= 1  # a whole card freed
    assert moved.ratio_at_100 is not None and moved.ratio_at_100 > 50.0
    _check_books(replay, tasks)


@pytest.mark.parametrize("case", range(4))
def test_random_traces_never_over_allocate(case: int) -> None:
    rng = random.Random(case)
    tasks = []
    for i in range(60):
        num, milli = (1, rng.choice((200, 300, 500, 700))) if rng.random() < 0.7 else (rng.choice((1, 2)), 1000)
        tasks.append(_task(f"p{i}", milli, num, cpu=rng.choice((1000, 4000, 8000))))
    spec = DefragSpec(points=(40.0, 80.0), pending=True, percent=20)
    result, replay = _run(tasks, spec, policy=rng.choice(("spread", "binpack")), nodes=4, gpus=4, cpu=16000)
    assert replay is not None
    _check_books(replay, tasks)
    assert replay.stats.moves <= int(0.2 * len(replay.live) + 1e-9)
    assert result.placed + result.failed == len(tasks)


def test_spec_parsing_and_cli(tmp_path: Path) -> None:
    spec = DefragSpec.parse("pending, 90,70", 3)
    assert spec.pending and spec.points == (70.0, 90.0) and spec.percent == 3 and spec.label() == "pending,70,90"
    for bad in ("", "x", "-5", "pending,nan"):
        with pytest.raises(DefragError):
            DefragSpec.parse(bad)
    with pytest.raises(DefragError):
        DefragSpec.parse("80", 150)
    nodes, pods = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,V100M16\nn1,64000,262144,2,V100M16\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + "".join(
        f"p{i},1000,1024,1,{500 if i % 3 else 1000},\n" for i in range(12)))
    report = _simulate("--trace-nodes", str(nodes), "--trace-pods", str(pods), "--policy", "spread",
                       "--seeds", "1-2", "--defrag", "pending", "--defrag-percent", "50")
    assert report["inputs"]["defrag"] == "pending" and report["inputs"]["defrag_percent"] == 50
    for run in report["runs"]:
        d = run["defrag"]
        assert d["moves_at_100"] is not None and d["moves_at_100"] <= 0.5 * d["running_at_100"]
    assert "defrag_moves_at_100" in report["summary"]["spread"]
