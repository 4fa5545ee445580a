"""The cluster's fragmentation as the ``fgd`` policy measures it (FGD, Weng et al., ATC '23), and its idle devices.

The workload mix is the running pods' request shapes (each pod counted once, as the ``fgd`` policy learns it):
the defragmenter asks how much free device share the pods that usually come could not use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from hami_core.engine.facade import Engine
from hami_core.engine.pods import host_requests, pod_key
from hami_core.engine.workload import pod_shapes
from hami_core.policies.fgd.fragmentation import DeviceArrays, Mix, fragmentation
from hami_core.policies.fgd.mix import MixClass, WorkloadModel


def workload_mix(engine: Engine, pods: Iterable[Mapping[str, Any]]) -> dict[str, list[MixClass]]:
    """Per backend, the mix of ``pods``' device requests (shape, weight, CPU, memory)."""
    model = WorkloadModel(window=1 << 30, tolerance=0.0, coverage=1.0)
    for pod in pods:
        model.observe(pod_key(pod), pod_shapes(pod, engine.requests(pod), engine.backends), host_requests(pod))
    snap = model.snapshot()
    return {b: snap.for_backend(b) for b in snap.backends}


def node_fragmentation(engine: Engine, mix: Mapping[str, list[MixClass]],
                       names: Iterable[str] | None = None) -> dict[str, float]:
    """FGD's fragmentation of each node (all, or ``names``) in device milli (1000 = a whole device), summed over
    backends. A node's fragmentation depends on that node alone, so a move changes only its two nodes'."""
    nodes = [engine.nodes[n] for n in sorted(engine.nodes if names is None else set(names))]
    out = dict.fromkeys((s.name for s in nodes), 0.0)
    host = np.array([[s.host_total[0] - s.host_used[0], s.host_total[1] - s.host_used[1]] for s in nodes],
                    dtype=float).reshape(len(nodes), 2)
    for backend, classes in mix.items():
        per_node = [s.devices.get(backend, []) for s in nodes]
        types = sorted({d.type for devs in per_node for d in devs})
        if not types or not classes:
            continue
        dev = DeviceArrays.build(per_node, {t: i for i, t in enumerate(types)}, host)
        for state, value in zip(nodes, fragmentation(dev, Mix(classes, types)).tolist(), strict=True):
            out[state.name] += value
    return out


def cluster_fragmentation(engine: Engine, mix: Mapping[str, list[MixClass]],
                          names: Iterable[str] | None = None) -> float:
    """The sum of :func:`node_fragmentation`."""
    return sum(node_fragmentation(engine, mix, names).values())


def idle_devices(engine: Engine) -> int:
    """Healthy devices nobody uses (whole cards a new pod could take)."""
    return sum(1 for s in engine.nodes.values() for d in s.by_uuid.values() if d.health and d.used == 0)
