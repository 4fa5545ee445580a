"""Reading a ResourceClaim's allocation for one driver and pool into HAMi's :class:`ContainerDevice` entries.

A claim allocated by kube-scheduler carries ``status.allocation.devices.results``: one entry per allocated device
(``request``, ``driver``, ``pool``, ``device``, and on a shared device ``shareID`` and ``consumedCapacity``). The
entries of this driver on this node's pool become what the vendor's ``hami_allocate`` hook gets: the device's
uuid and index, the memory share in MiB (HAMi-core's unit) and the cores share in percent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hami_core.dra.model import CAP_CORES, CAP_MEMORY, MIB, DraDevice
from hami_core.plugins.errors import HamiError, WireFormatError
from hami_core.plugins.types import ContainerDevice
from hami_core.wire.quantity import parse_quantity

__all__ = ["MAX_RESULTS", "AllocatedDevice", "ClaimError", "DeviceLookup", "allocated_devices"]

#: kube-apiserver's limit on a claim's allocation results (resource.k8s.io AllocationResultsMaxSize).
MAX_RESULTS = 32


class ClaimError(HamiError):
    """A claim this plugin cannot prepare; the message names the claim and the field."""


class DeviceLookup(Protocol):
    """The node's current devices by driver and device name (the DRA publisher provides one)."""

    def device(self, driver: str, name: str) -> DraDevice | None: ...


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of this driver on this node, resolved to the node's device."""

    request: str
    pool: str
    name: str
    share_id: str
    device: DraDevice
    entry: ContainerDevice


def _amount(claim: str, where: str, value: Any) -> int:
    try:
        number = parse_quantity(value)
    except WireFormatError as exc:
        raise ClaimError(f"claim {claim}: {where}: {exc}") from None
    if number < 0:
        raise ClaimError(f"claim {claim}: {where}: {value!r} is negative")
    return math.ceil(number)


def _share(claim: str, where: str, result: Mapping[str, Any], dev: DraDevice) -> tuple[int, int]:
    """(memory MiB, cores %) the result consumes; a result without ``consumedCapacity`` has the whole device."""
    consumed = result.get("consumedCapacity")
    if consumed is not None and not isinstance(consumed, Mapping):
        raise ClaimError(f"claim {claim}: {where}.consumedCapacity: expected an object")
    consumed = consumed or {}
    mem_cap, core_cap = dev.capacity.get(CAP_MEMORY), dev.capacity.get(CAP_CORES)
    mem = (_amount(claim, f"{where}.consumedCapacity.{CAP_MEMORY}", consumed[CAP_MEMORY]) if CAP_MEMORY in consumed
           else (mem_cap.value if mem_cap else 0))
    cores = (_amount(claim, f"{where}.consumedCapacity.{CAP_CORES}", consumed[CAP_CORES]) if CAP_CORES in consumed
             else (core_cap.value if core_cap else 100))
    if mem_cap is not None and mem > mem_cap.value:
        raise ClaimError(f"claim {claim}: {where}.consumedCapacity.{CAP_MEMORY}: {mem} bytes is more than device "
                         f"{dev.name}'s {mem_cap.value}")
    if cores > 100:
        raise ClaimError(f"claim {claim}: {where}.consumedCapacity.{CAP_CORES}: {cores} is more than 100")
    return math.ceil(mem / MIB), cores


def allocated_devices(claim_obj: Mapping[str, Any], *, driver: str, pool: str,
                      devices: DeviceLookup) -> list[AllocatedDevice]:
    """This driver's devices of an allocated claim, in result order; :class:`ClaimError` naming the field when
    the claim is not allocated, has nothing for this driver here, or names a device the node does not have."""
    meta = claim_obj.get("metadata") or {}
    claim = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    allocation = (claim_obj.get("status") or {}).get("allocation")
    if not isinstance(allocation, Mapping):
        raise ClaimError(f"claim {claim}: status.allocation is not set: the claim is not allocated")
    results = (allocation.get("devices") or {}).get("results")
    if not isinstance(results, Sequence) or isinstance(results, (str, bytes)):
        raise ClaimError(f"claim {claim}: status.allocation.devices.results: expected a list")
    if len(results) > MAX_RESULTS:
        raise ClaimError(f"claim {claim}: status.allocation.devices.results: {len(results)} entries, at most "
                         f"{MAX_RESULTS}")
    out: list[AllocatedDevice] = []
    elsewhere: list[str] = []
    for i, result in enumerate(results):
        where = f"status.allocation.devices.results[{i}]"
        if not isinstance(result, Mapping):
            raise ClaimError(f"claim {claim}: {where}: expected an object")
        if result.get("driver") != driver:
            continue
        if result.get("pool") != pool:
            elsewhere.append(f"{result.get('pool')!r}")
            continue
        name = result.get("device")
        if not isinstance(name, str) or not name:
            raise ClaimError(f"claim {claim}: {where}.device: expected a device name")
        dev = devices.device(driver, name)
        if dev is None:
            raise ClaimError(f"claim {claim}: {where}.device: {driver} has no device {name!r} in pool {pool}")
        if not dev.healthy:
            raise ClaimError(f"claim {claim}: {where}.device: device {name!r} ({dev.uuid}) is unhealthy")
        mem, cores = _share(claim, where, result, dev)
        share = result.get("shareID") or ""
        out.append(AllocatedDevice(request=str(result.get("request") or ""), pool=pool, name=name,
                                   share_id=str(share), device=dev,
                                   entry=ContainerDevice(uuid=dev.uuid, type=dev.backend, usedmem=mem,
                                                         usedcores=cores, idx=dev.index)))
    if not out:
        extra = f" (its results for {driver} are in pool {', '.join(elsewhere)})" if elsewhere else ""
        raise ClaimError(f"claim {claim}: status.allocation.devices.results: no device of driver {driver} in pool "
                         f"{pool}{extra}")
    return out
