"""The default node lock: the backend's lock annotation when an app container uses the backend."""

from __future__ import annotations

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import ContainerRequests, DeviceBackend, LockSpec


@hookimpl(trylast=True)
def hami_node_lock(backend: DeviceBackend, requests: ContainerRequests) -> LockSpec | None:
    if not backend.lock_annotation:
        return None
    # HAMi checks app containers only: an init-only pod is bound without a lock (quirk §12.1.5).
    app = requests.containers[requests.init_count:]
    if any(backend.name in ctr for ctr in app):
        return LockSpec(backend.lock_annotation)
    return None
