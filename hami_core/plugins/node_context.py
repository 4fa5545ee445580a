"""What a vendor's node-side hooks may ask of the device plugin they run in: this node, its pods, a state bag.

The node-side hooks (``hami_discover_devices``, ``hami_watch_health``, ``hami_allocate``) carry no cluster
handle, yet some vendor work needs one: NVIDIA's dynamic MIG destroys the instances that no live pod on the
node references any more. :class:`~hami_core.node.app.DevicePluginApp` therefore binds a :class:`NodeContext`
around every node-side hook call; the vendor reads it with :func:`current` *during* the call (a thread it
starts keeps the object it read). Outside a device plugin (the scheduler, the simulator, a unit test calling a
hook directly) :func:`current` is ``None`` and the vendor must cope.

It is a :class:`contextvars.ContextVar`, not a global: each call sees the context of the app that made it, so
several apps can live in one process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

_current: ContextVar[NodeContext | None] = ContextVar("hami_node_context", default=None)


@dataclass(frozen=True, slots=True)
class NodeContext:
    """One device plugin's node: its name, a reader of its pods and a per-plugin state bag for the vendor."""

    node_name: str
    #: The pods bound to this node (every phase; callers filter). Raises on an API error: callers that
    #: destroy something on the strength of the answer must treat an error as "everything is in use".
    list_pods: Callable[[], list[dict[str, Any]]]
    #: Vendor-owned objects that must live as long as the device plugin (e.g. a MIG manager), by key.
    state: dict[str, Any] = field(default_factory=dict)


def current() -> NodeContext | None:
    """The :class:`NodeContext` of the device plugin whose hook call is running, or ``None``."""
    return _current.get()


@contextlib.contextmanager
def bound(context: NodeContext) -> Iterator[NodeContext]:
    """Make ``context`` current for the duration of a hook call."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
