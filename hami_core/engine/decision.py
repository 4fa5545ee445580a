"""The outcome of one scheduling decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hami_core.plugins.types import ContainerRequests, GpuPolicy, PodDevices


@dataclass(frozen=True, slots=True)
class Decision:
    """What :meth:`Engine.schedule` decided for one pod. Changes nothing until :meth:`Engine.reserve`.

    - ``node``: the chosen node, or ``None`` when nothing fits (or the pod requests no device);
    - ``nodes``: every feasible node, best first;
    - ``failed``: each rejected candidate → HAMi's reason string (``1/2 CardInsufficientMemory, ...``);
    - ``annotations``: the HAMi pod annotations to write for ``node``;
    - ``devices``: the chosen devices per backend, one entry per container (init first);
    - ``scores``: each feasible node's score; ``skipped``: the pod requests no managed device, so any
      candidate will do (the extender echoes the node list); ``error``: the pod cannot be scheduled at
      all (for example a malformed ``hami.io/device-scoring-weights``).
    """

    pod: str
    node: str | None = None
    nodes: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    devices: PodDevices = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)
    requests: ContainerRequests | None = None
    policy: GpuPolicy | None = None
    skipped: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.node is not None
