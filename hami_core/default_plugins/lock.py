"""Built-in: the default node lock for legacy backends (backend objects bring their own)."""

from __future__ import annotations

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.standard import standard_node_lock
from hami_core.plugins.types import ContainerRequests, DeviceBackend, LockSpec


@hookimpl(trylast=True)
def hami_node_lock(backend: DeviceBackend, requests: ContainerRequests) -> LockSpec | None:
    return standard_node_lock(backend, requests)
