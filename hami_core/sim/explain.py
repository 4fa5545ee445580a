"""``hami simulate --explain NS/POD``: the explanation of one pod of the workload, at the moment it arrives.

The first policy's run (and the first seed's task list under ``--mode openb``) is replayed exactly as the experiment
replays it (:class:`~hami_core.sim.replay.Replay`: admission, the CPU and memory pre-filter, the engine's decisions)
until the pod's first arrival; the pod is then explained on that engine (:mod:`hami_core.engine.explain`) against the
nodes with room for its CPU and memory, as the replay would offer them. The nodes the pre-filter leaves out are
listed with ``InsufficientCPUOrMemory``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.engine.explain import NodeExplanation, PodExplanation, explain
from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed, HamiError
from hami_core.plugins.objects import metadata
from hami_core.sim.experiment import Experiment
from hami_core.sim.replay import INSUFFICIENT_CPU_MEMORY, Replay
from hami_core.sim.workload import SimPod

__all__ = ["explain_arrival", "matches"]


def matches(pod: Mapping[str, Any], target: str) -> bool:
    """``target`` is ``NAMESPACE/NAME`` or ``NAME`` (any namespace)."""
    meta = metadata(pod)
    name, namespace = str(meta.get("name") or ""), str(meta.get("namespace") or "default")
    return target in (name, f"{namespace}/{name}")


def explain_arrival(experiment: Experiment, target: str) -> PodExplanation:
    """Replay ``experiment``'s first run up to the first task matching ``target`` and explain it there."""
    policy = experiment.policies[0]
    seed = experiment.seeds[0] if experiment.seeds else None
    replay = Replay(experiment.engine(policy, experiment.given_mix()), experiment.nodes_for(seed), policy=policy.label,
                    seed=seed, cpu_pods=experiment.cpu_pods)
    tasks: Sequence[SimPod] = experiment.task_list(seed, replay.result.capacity_milli)
    at = next((i for i, task in enumerate(tasks) if matches(task.pod, target)), None)
    if at is None:
        raise HamiError(f"--explain {target}: no such pod in the workload ({len(tasks)} pods)")
    for task in tasks[:at]:
        replay.place(task)
    task = tasks[at]
    engine = replay.engine
    try:
        pod = engine.admit(task.pod)
    except (AdmissionDenied, AdmissionFailed) as exc:
        raise HamiError(f"--explain {target}: the admission webhook refuses the pod: {exc}") from None
    fits = (replay.cpu_free >= task.cpu_milli) & (replay.mem_free >= task.memory_mib)
    offered = [name for name, ok in zip(replay.names, fits.tolist(), strict=True) if ok]
    notes = [f"at its arrival: pod {at + 1} of {len(tasks)}, policy {policy.label}"
             + (f", seed {seed}" if seed is not None else "")]
    explanation = explain(engine, pod, offered, notes=notes)
    short = [NodeExplanation(name, False, INSUFFICIENT_CPU_MEMORY, filter_reason=INSUFFICIENT_CPU_MEMORY)
             for name, ok in zip(replay.names, fits.tolist(), strict=True) if not ok]
    if not short:
        return explanation
    nodes = tuple(sorted((*explanation.nodes, *short), key=lambda n: n.name))
    return PodExplanation(explanation.pod, explanation.node, nodes, policy=explanation.policy,
                          error=explanation.error, persisted=explanation.persisted, notes=explanation.notes)
