"""Replay a workload onto a cluster in arrival order, through the real engine."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_core.cluster.memory import MemoryCluster, Placement
from hami_core.engine.facade import Engine, NodeStatus


@dataclass(slots=True)
class SimResult:
    """Placements in arrival order, plus what registration made of each node."""

    placements: list[Placement] = field(default_factory=list)
    nodes: list[NodeStatus] = field(default_factory=list)

    @property
    def placed(self) -> int:
        return sum(1 for p in self.placements if p.node is not None)

    @property
    def requested(self) -> int:
        return sum(1 for p in self.placements if p.decision is None or not p.decision.skipped)


def replay(engine: Engine, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> tuple[
        SimResult, MemoryCluster]:
    """Register ``nodes``, then submit ``pods`` one by one (pods without a UID get one)."""
    cluster = MemoryCluster(engine)
    result = SimResult()
    for node in nodes:
        result.nodes.append(cluster.add_node(node))
    counter = itertools.count(1)
    for pod in pods:
        meta = pod.get("metadata") or {}
        if not meta.get("uid"):
            pod = {**pod, "metadata": {**meta, "uid": f"sim-{next(counter):06d}"}}
        result.placements.append(cluster.submit(pod))
    return result, cluster
