"""Simulator tasks: a Pod plus what the replay needs to know about it, and the openb experiment's rules (inflation,
node order)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hami_core.engine.pods import host_requests
from hami_core.engine.workload import device_share
from hami_core.plugins.types import ContainerRequests
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
            share = device_share(req.coresreq, req.mem_percentage)
            num_gpu += req.nums
            per_gpu = max(per_gpu, share)
    annos = (pod.get("metadata") or {}).get("annotations") or {}
    models = tuple(m.upper() for m in split_list(annos.get(keys.NVIDIA_USE_GPUTYPE)))
    return SimPod(pod, cpu, mem, num_gpu, per_gpu, models)


#: How the openb experiment draws a seed's task list and node order (``hami simulate --protocol``).
#: ``shuffled``: the tasks topped up with random copies, all of it shuffled; nodes in file order.
#: ``paper``: the FGD paper's simulator (hkust-adsl/kubernetes-scheduler-simulator, ``--shuffle-pod=true -tune X``):
#: the tasks shuffled, then random copies after them; nodes in a random order (see :func:`node_order`).
PROTOCOLS = ("shuffled", "paper")


def inflate(pods: Sequence[SimPod], capacity: int, factor: float, rng: random.Random,
            protocol: str = "shuffled") -> list[SimPod]:
    """The openb experiment's task list: ``pods`` topped up with random copies until their GPU demand
    reaches ``factor`` x ``capacity`` (GPU milli). ``shuffled``: the whole list is shuffled afterwards;
    ``paper``: ``pods`` are shuffled first and the copies follow them, in the order drawn (the paper's
    simulator shuffles the trace and then appends its workload-tuning copies). Copies get new names and UIDs.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    out = list(pods)
    if protocol == "paper":
        rng.shuffle(out)
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
    if protocol == "shuffled":
        rng.shuffle(out)
    return out


def node_ranks(count: int, seed: int) -> list[int]:
    """The ``paper`` protocol's random place of each of ``count`` nodes for ``seed`` (a permutation of 0..count-1)."""
    ranks = list(range(count))
    random.Random(f"node-order-{seed}").shuffle(ranks)
    return ranks


def node_order(nodes: Sequence[Mapping[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The ``paper`` protocol's nodes for ``seed``: each renamed ``NNNN-<name>`` with ``NNNN`` its place in a
    random permutation (:func:`node_ranks`), and listed in that order.

    The paper's simulator gives its nodes such prefixes per seed, so a tie between equal scores, which it breaks
    by node order, goes to a random node rather than the first of the trace file. Renaming does the same here for
    every tie-break of the engine (name order, and the order nodes were learned). Only ``metadata.name`` changes.
    """
    width = max(4, len(str(len(nodes) - 1)))
    out: list[dict[str, Any] | None] = [None] * len(nodes)
    for rank, node in zip(node_ranks(len(nodes), seed), nodes, strict=True):
        meta = dict(node.get("metadata") or {})
        meta["name"] = f"{rank:0{width}d}-{meta.get('name')}"
        out[rank] = {**node, "metadata": meta}
    return [node for node in out if node is not None]
