"""Scheduler-owned pod annotations: the keys that carry a pod's device allocation (HAMi PRs #3042, #3074).

The device plugin hands a container the devices, memory and cores these keys name, and the scheduler rebuilds
its ledger from them, so whoever writes them decides what a pod gets. Only the scheduler and the node
components write them; the admission webhook refuses them from anyone else. The set is derived, not listed by
hand: the protocol's vendor-neutral keys (:mod:`hami_core.wire.keys`) plus the to-allocate and allocated keys of
every loaded backend, so a new vendor plugin is covered the day it is installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hami_core.plugins.types import DeviceBackend
from hami_core.wire import keys

__all__ = ["CORE_OWNED", "changed_owned", "first_owned", "owned_annotations"]

#: Written by the scheduler (filter and bind) and the device plugin (Allocate), whatever the vendor: the node
#: chosen, the decision time, the bind phase and time, MIG placements, and NVIDIA's assignment (also the key
#: HAMi's device plugins fall back to). HAMi's own list is node, bind phase and bind time plus each backend's
#: pair; the decision time and MIG placements are added because the ledger reads MIG placements back.
CORE_OWNED: tuple[str, ...] = (
    keys.VGPU_NODE,
    keys.VGPU_TIME,
    keys.VGPU_DEVICES_TO_ALLOCATE,
    keys.VGPU_DEVICES_ALLOCATED,
    keys.VGPU_MIG_ALLOCATIONS,
    keys.BIND_PHASE,
    keys.BIND_TIME,
)

_ABSENT: Any = object()


def owned_annotations(backends: Iterable[DeviceBackend]) -> tuple[str, ...]:
    """Every scheduler-owned key: :data:`CORE_OWNED` and each backend's ``to_allocate_annotation`` and
    ``allocated_annotation`` (HAMi's ``InRequestDevices`` and ``SupportDevices``), sorted, without duplicates."""
    found = set(CORE_OWNED)
    for backend in backends:
        found.update(k for k in (backend.to_allocate_annotation, backend.allocated_annotation) if k)
    return tuple(sorted(found))


def first_owned(annotations: Mapping[str, Any], owned: Iterable[str]) -> str | None:
    """The first key of ``owned`` that ``annotations`` carries (with any value, even empty), else ``None``."""
    return next((k for k in owned if k in annotations), None)


def changed_owned(old: Mapping[str, Any], new: Mapping[str, Any], owned: Iterable[str]) -> str | None:
    """The first key of ``owned`` that an update adds, removes or rewrites (``""`` and absent differ: the device
    plugin treats them differently), else ``None``."""
    for key in owned:
        before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if before is _ABSENT or after is _ABSENT:
            if before is not after:
                return key
        elif type(before) is not type(after) or before != after:
            return key
    return None
