"""HAMi's generic handshake health rule (spec §9.2, Appendix B.1), shared by every backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceBackend, DeviceInfo, HealthReport
from hami_core.wire.handshake import encode_requesting, parse_handshake
from hami_core.wire.quantity import parse_quantity

#: HAMi's code uses 60 s (its docs say 5 minutes; spec quirk §12.1.8).
HANDSHAKE_TIMEOUT_S = 60.0


def allocatable_count(node: Mapping[str, Any], resource: str) -> int:
    """The node's allocatable amount of ``resource`` (0 when absent or unreadable)."""
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    if value is None:
        return 0
    try:
        return int(parse_quantity(value))
    except WireFormatError:
        return 0


def generic_health(backend: DeviceBackend, node: Mapping[str, Any], now: float) -> HealthReport:
    """Generic ``CheckHealth``: a ``Requesting_`` mark older than 60 s with nothing allocatable is stale."""
    key = backend.handshake_annotation
    if not key:
        return HealthReport(True, True)
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(key)
    hs = parse_handshake(value)
    if hs.state == "requesting":
        if hs.time is None or now < hs.time.timestamp() + HANDSHAKE_TIMEOUT_S:
            return HealthReport(True, False)
        if allocatable_count(node, backend.resource_names.count) > 0:
            return HealthReport(True, False)
        return HealthReport(False, False, reason=f"{key} has said Requesting since {hs.time} "
                                                 f"and {backend.resource_names.count} is not allocatable")
    return HealthReport(True, True, {key: encode_requesting(datetime.fromtimestamp(now))})


def standard_health(backend: DeviceBackend, node: Mapping[str, Any], devices: Sequence[DeviceInfo],
                    now: float) -> HealthReport:
    """The generic rule for a node that registers devices of ``backend``.

    A node that registers none of this backend's devices has nothing to hand-shake about; marking it would put
    one ``Requesting_`` annotation per enabled backend (seven Ascend chips...) on every node.
    """
    if not devices:
        return HealthReport(True, False)
    return generic_health(backend, node, now)
