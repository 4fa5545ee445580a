"""What the engine makes of one pod before any node is looked at: :class:`PodPlan`.

A pod's requests (every backend asked about every container), its policy, its request shapes, its CPU and memory
needs and its namespace's quota are worked out once (:meth:`Engine.plan <hami_core.engine.facade.Engine.plan>`)
and the plan is handed on: to :meth:`~hami_core.engine.facade.Engine.schedule` (which may be called twice for one
filter), to the reservation, and to bind's lock and over-commit checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_core.engine.workload import Shape
from hami_core.plugins.types import ContainerRequests, GpuPolicy, QuotaView

__all__ = ["PodPlan"]


@dataclass(frozen=True, slots=True)
class PodPlan:
    """One pod as the engine plans it. Read-only; valid while the pod object and the engine's quota usage are
    unchanged (the quota view is taken when the plan is made, so a plan is made after the pod's own reservation
    was dropped when it is re-filtered).

    - ``requests``: every container's device requests (init containers first);
    - ``policy``: the node and GPU policy from the pod's annotations and the config (``None`` for a pod without
      device requests, whose ranking reads its policy on its own terms, and when ``error`` is set);
    - ``error``: why the pod cannot be scheduled at all (a malformed policy annotation), as the Decision says it;
    - ``shapes``: one request shape per (container, backend) request, for fragmentation-aware policies;
    - ``host_need``: the pod's (CPU milli, memory MiB) requests; ``quota``: its namespace's quota view (``None``:
      nothing is limited there).
    """

    pod: Mapping[str, Any]
    ref: str
    key: str
    namespace: str
    requests: ContainerRequests
    policy: GpuPolicy | None = None
    error: str | None = None
    shapes: tuple[Shape, ...] = ()
    host_need: tuple[int, int] = (0, 0)
    quota: QuotaView | None = None

    @property
    def empty(self) -> bool:
        """The pod requests no managed device."""
        return self.requests.empty
