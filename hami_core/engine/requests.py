"""Turning a pod into per-container device requests (HAMi ``Resourcereqs``, spec §6.2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.engine.pods import containers
from hami_core.plugins.errors import PluginError
from hami_core.plugins.types import ContainerRequests, DeviceBackend, DeviceRequest


def pod_requests(hook: Any, backends: Sequence[DeviceBackend], pod: Mapping[str, Any]) -> ContainerRequests:
    """Ask every backend about every container; init containers come first, as in HAMi."""
    init, app = containers(pod)
    per_container: list[Mapping[str, DeviceRequest]] = []
    for ctr in (*init, *app):
        found: dict[str, DeviceRequest] = {}
        for backend in backends:
            req = hook.hami_container_request(backend=backend, pod=pod, container=ctr)
            if req is None:
                continue
            if not isinstance(req, DeviceRequest) or req.backend != backend.name:
                raise PluginError(f"plugin {backend.plugin!r}: hami_container_request for backend {backend.name!r} "
                                  f"returned {req!r}; expected a DeviceRequest with backend={backend.name!r}")
            found[backend.name] = req
        per_container.append(found)
    names = tuple(str(c.get("name", "")) for c in (*init, *app))
    return ContainerRequests(tuple(per_container), len(init), names)
