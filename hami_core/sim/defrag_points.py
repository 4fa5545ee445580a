"""``--defrag 70,80,90``: the planner of :mod:`hami_core.defrag.planner` run on a replay's engine at a point of the
arrival, and its moves applied to the replay.

The planner works on the replay's own engine (no copy of 1,213 nodes and thousands of pods): its trials book and
unbook there and are undone by re-booking each pod's decision. To scale, each round tries only the groups on the
:data:`MAX_GROUPS` least used devices (a device with few milli used is the cheapest to free), and a pod only goes to
nodes with room for its CPU and memory as the engine counts them (kube-scheduler's NodeResourcesFit, which the
replay plays). The moves are then applied in the planner's order through the engine's fit on the planned node; a
move that no longer fits there (an earlier move took the room) is placed where the engine's policy puts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hami_core.defrag.measure import idle_devices, workload_mix
from hami_core.defrag.planner import MoveSearch, greedy_moves
from hami_core.engine.pods import host_requests

if TYPE_CHECKING:
    from hami_core.sim.defrag import DefragReplay

#: Groups (the pods of one device) tried per round: those of the least used devices.
MAX_GROUPS = 16


def run_planner(replay: DefragReplay, allowed: int) -> tuple[int, int]:
    """Plan at most ``allowed`` moves on the replay's state and apply them; (moves made, whole devices freed)."""
    if allowed <= 0:
        return 0, 0
    engine, live = replay.engine, replay.live
    pods = {key: entry[1] for key, entry in live.items()}
    movable = {key for key in live if replay.movable(key)}
    originals = {key: entry[3].decision for key, entry in live.items()}
    idle0 = idle_devices(engine)

    def restore(key: str) -> None:
        decision = originals[key]
        assert decision is not None
        engine.reserve(pods[key], decision)

    def targets(key: str, source: str) -> list[str]:
        cpu, mem = host_requests(pods[key])
        return [name for name, state in engine.nodes.items() if name != source
                and state.host_total[0] - state.host_used[0] >= cpu and state.host_total[1] - state.host_used[1] >= mem]

    search = MoveSearch(engine, pods, workload_mix(engine, pods.values()), restore=restore, targets=targets,
                        max_groups=MAX_GROUPS)
    planned = greedy_moves(search, pods, movable, allowed)
    for key, _, _ in planned:  # back to the replay's state, then the moves through the replay's books
        restore(key)
    moved = 0
    for key, _, target in planned:
        if key not in live:
            continue
        task, pod, _, placed = replay.evict(key)
        fits = replay.cpu_free[replay.row[target]] >= task.cpu_milli and \
            replay.mem_free[replay.row[target]] >= task.memory_mib
        decision = engine.schedule(pod, [target]) if fits else None
        if decision is not None and decision.ok:
            replay.book(task, pod, decision, placed)
        elif not replay.replace_pod(task, pod, placed):
            restore_decision = originals[key]
            assert restore_decision is not None
            replay.book(task, pod, restore_decision, placed)
            continue
        moved += 1
    return moved, idle_devices(engine) - idle0
