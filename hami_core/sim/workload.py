"""Simulator tasks: a Pod plus what the replay needs to know about it, and the openb inflation rule."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami_core.engine.pods import host_requests
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, ContainerRequests
from hami_core.sim.openb import Task, pod_object
from hami_core.wire import keys
from hami_core.wire.common import split_list


@dataclass(frozen=True, slots=True)
class SimPod:
    """One pod to place. ``gpu_demand`` is in GPU milli (1000 = one whole GPU).

    ``klass`` groups pods that ask for the same thing (GPU count, milli per GPU, allowed models), for
    the fragmentation measure's workload distribution.
    """

    pod: Mapping[str, Any]
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    per_gpu: int
    models: tuple[str, ...] = ()

    @property
    def gpu_demand(self) -> int:
        return self.num_gpu * self.per_gpu

    @property
    def klass(self) -> tuple[int, int, tuple[str, ...]]:
        return (self.num_gpu, self.per_gpu, self.models)

    @property
    def name(self) -> str:
        meta = self.pod.get("metadata") or {}
        return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def from_task(task: Task, *, uid: str | None = None) -> SimPod:
    models = tuple(m.upper() for m in task.gpu_spec.split("|") if m)
    return SimPod(pod_object(task, uid=uid), task.cpu_milli, task.memory_mib, task.num_gpu, task.per_gpu, models)


def from_pod(pod: Mapping[str, Any], requests: ContainerRequests) -> SimPod:
    """A YAML pod: its GPU share is the largest of its cores and memory percentage per device.

    A request given only in MiB (no percentage) has no share until placed, so it counts as 0 demand.
    """
    cpu, mem = host_requests(pod)
    num_gpu = per_gpu = 0
    for container in requests.containers:
        for req in container.values():
            pct = req.mem_percentage if req.mem_percentage != MEM_PERCENTAGE_UNSET else 0
            share = max(min(req.coresreq, 100), pct) * 10
            num_gpu += req.nums
            per_gpu = max(per_gpu, share)
    annos = (pod.get("metadata") or {}).get("annotations") or {}
    models = tuple(m.upper() for m in split_list(annos.get(keys.NVIDIA_USE_GPUTYPE)))
    return SimPod(pod, cpu, mem, num_gpu, per_gpu, models)


def inflate(pods: Sequence[SimPod], capacity: int, factor: float, rng: random.Random) -> list[SimPod]:
    """The openb experiment's task list: ``pods`` topped up with random copies until their GPU demand
    reaches ``factor`` x ``capacity`` (GPU milli), then shuffled. Copies get new names and UIDs.
    """
    out = list(pods)
    total = sum(p.gpu_demand for p in out)
    target = factor * capacity
    if not any(p.gpu_demand for p in pods):
        return out
    copy_no = 0
    while total < target:
        src = rng.choice(pods)
        copy_no += 1
        meta = dict(src.pod.get("metadata") or {})
        meta["name"] = f"{meta.get('name')}-copy{copy_no}"
        meta["uid"] = f"{meta.get('uid') or meta['name']}-copy{copy_no}"
        out.append(replace(src, pod={**src.pod, "metadata": meta}))
        total += src.gpu_demand
    rng.shuffle(out)
    return out
