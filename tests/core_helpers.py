"""Shared helpers for the core's tests (importable as ``core_helpers``; fixtures live in conftest).

The core is tested against ``AcmePlugin``, a minimal vendor written the way the plugin tutorial says
(standard fit, default annotation codec), so core tests do not depend on any real vendor package.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from hami_core import hookimpl
from hami_core.plugins.fit import standard_fit
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    Mutation,
    ResourceNames,
)
from hami_core.wire.nodes import decode_node_devices
from hami_core.wire.quantity import quantity_to_int

ACME_REGISTER = "acme.com/node-register"
ACME_HANDSHAKE = "hami.io/node-handshake-acme"
ACME_ALLOCATED = "hami.io/acme-devices-allocated"
ACME_TO_ALLOCATE = "hami.io/acme-devices-to-allocate"
COUNT, MEM, CORES = "acme.com/npu", "acme.com/npu-mem", "acme.com/npu-cores"
T0 = 1_748_765_730.0


class AcmePlugin:
    """A tiny vendor: JSON registration, HAMi's standard fit, the core's default codec and lock."""

    @hookimpl
    def hami_device_backends(self, config: Mapping[str, Any]) -> list[DeviceBackend]:
        if "acme" not in config:
            return []
        return [DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames(COUNT, MEM, "", CORES),
                              register_annotation=ACME_REGISTER, handshake_annotation=ACME_HANDSHAKE,
                              to_allocate_annotation=ACME_TO_ALLOCATE, allocated_annotation=ACME_ALLOCATED,
                              lock_annotation="hami.io/mutex.lock", standard_capacity=True)]

    @hookimpl
    def hami_node_devices(self, backend: DeviceBackend, node: Mapping[str, Any]) -> Any:
        if backend.name != "ACME":
            return None
        raw = ((node.get("metadata") or {}).get("annotations") or {}).get(ACME_REGISTER)
        return [] if raw is None else decode_node_devices(raw, key=ACME_REGISTER)

    @hookimpl
    def hami_mutate_container(self, backend: DeviceBackend, container: dict[str, Any]) -> Mutation | None:
        if backend.name != "ACME":
            return None
        return Mutation(COUNT in ((container.get("resources") or {}).get("limits") or {}))

    @hookimpl
    def hami_container_request(self, backend: DeviceBackend, container: Mapping[str, Any]) -> Any:
        if backend.name != "ACME":
            return None
        limits = (container.get("resources") or {}).get("limits") or {}
        nums = quantity_to_int(limits[COUNT]) if COUNT in limits else None
        if not nums:
            return None
        mem = quantity_to_int(limits.get(MEM, 0)) or 0
        cores = quantity_to_int(limits.get(CORES, 0)) or 0
        return DeviceRequest("ACME", nums, mem, MEM_PERCENTAGE_UNSET if mem else 100, cores)

    @hookimpl
    def hami_filter_nodes(self, backend: DeviceBackend, request: DeviceRequest, candidates: Any, policy: Any) -> Any:
        if backend.name != "ACME":
            return None
        return [standard_fit(c.devices, request, mutex=policy.has("mutex"), numa_bind=policy.numa_bind)
                for c in candidates]


def acme_device(i: int, *, count: int = 10, devmem: int = 8000, devcore: int = 100, numa: int = 0,
                health: bool = True, type: str = "ACME-X1", id: str | None = None) -> dict[str, Any]:
    return {"id": id or f"dev{i}", "index": i, "count": count, "devmem": devmem, "devcore": devcore,
            "type": type, "numa": numa, "health": health}


def acme_usage(i: int, used_milli: int = 0, type: str = "ACME-X1") -> DeviceUsage:
    """A 4-slot ACME card of 1,000 MiB and 100 cores with ``used_milli`` of it taken by one pod (cores and memory
    alike): the devices the fgd policy's tests build nodes of."""
    d = DeviceUsage(DeviceInfo(id=f"g{i}", index=i, count=4, devmem=1000, devcore=100, type=type, numa=0,
                               health=True))
    if used_milli:
        d.used, d.usedcores, d.usedmem = 1, used_milli // 10, used_milli
    return d


def make_node(name: str, devices: Iterable[Mapping[str, Any]] = (), *, annotations: Mapping[str, str] | None = None,
              allocatable: Mapping[str, str] | None = None, register: str = ACME_REGISTER) -> dict[str, Any]:
    annos = dict(annotations or {})
    devices = list(devices)
    if devices:
        annos[register] = json.dumps(devices)
    alloc = dict(allocatable) if allocatable is not None else ({COUNT: str(10 * len(devices))} if devices else {})
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
            "status": {"allocatable": alloc}}


def container(name: str = "c", **limits: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": dict(limits)}} if limits else {"name": name}


def acme(nums: int = 1, mem: int = 0, cores: int = 0, name: str = "c") -> dict[str, Any]:
    limits: dict[str, Any] = {COUNT: str(nums)}
    if mem:
        limits[MEM] = str(mem)
    if cores:
        limits[CORES] = str(cores)
    return {"name": name, "resources": {"limits": limits}}


def make_pod(name: str, *containers: Mapping[str, Any], init: Iterable[Mapping[str, Any]] = (),
             annotations: Mapping[str, str] | None = None, namespace: str = "default",
             uid: str | None = None, phase: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                     "annotations": dict(annotations or {})},
        "spec": {"containers": [dict(c) for c in containers] or [{"name": "main"}]},
    }
    init = list(init)
    if init:
        pod["spec"]["initContainers"] = [dict(c) for c in init]
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def scheduled(pod: dict[str, Any], node: str, allocated: str, key: str = ACME_ALLOCATED) -> dict[str, Any]:
    """``pod`` as it looks after HAMi scheduled it onto ``node`` with ``allocated`` devices."""
    pod["metadata"]["annotations"].update({"hami.io/vgpu-node": node, key: allocated})
    return pod


