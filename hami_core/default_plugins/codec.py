"""HAMi's pod allocation annotations: ``<uuid>,<type>,<mem>,<cores>:`` per device, ``;`` per container."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import DeviceBackend, PodSingleDevice
from hami_core.wire.pods import decode_pod_single_device, encode_pod_single_device


@hookimpl(trylast=True)
def hami_allocation_annotations(backend: DeviceBackend, devices: PodSingleDevice) -> dict[str, str] | None:
    """The same value under the to-allocate and the allocated key, one entry per container (padded)."""
    keys = [k for k in (backend.to_allocate_annotation, backend.allocated_annotation) if k]
    if not keys:
        return None
    value = encode_pod_single_device(devices)
    return dict.fromkeys(keys, value)


@hookimpl(trylast=True)
def hami_decode_allocation(backend: DeviceBackend, pod: Mapping[str, Any]) -> PodSingleDevice | None:
    key = backend.allocated_annotation
    if not key:
        return None
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    if not value:
        return None
    return decode_pod_single_device(value, key=key)
