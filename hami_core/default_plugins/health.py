"""Built-in: HAMi's generic handshake health rule for legacy backends (backend objects bring their own)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core.plugins.health import HANDSHAKE_TIMEOUT_S, allocatable_count, generic_health, standard_health
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import DeviceBackend, DeviceInfo, HealthReport

__all__ = ["HANDSHAKE_TIMEOUT_S", "allocatable_count", "generic_health", "hami_node_health"]


@hookimpl(trylast=True)
def hami_node_health(backend: DeviceBackend, node: Mapping[str, Any], devices: Sequence[DeviceInfo],
                     now: float) -> HealthReport:
    return standard_health(backend, node, devices, now)
