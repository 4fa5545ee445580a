"""Builders for the hami-nvidia tests: Kubernetes Node/Pod JSON, engines with a fake clock, fit inputs.

Units follow HAMi: memory in MiB, cores in percent of one card.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import hami_nvidia.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
)
from hami_core.wire import keys
from hami_nvidia import backend as nv
from hami_nvidia.config import parse_config

#: The fake clock's start (Unix seconds).
T0 = 1_750_000_000.0

GPU = keys.NVIDIA_RESOURCE_COUNT
GPUMEM = keys.NVIDIA_RESOURCE_MEMORY
GPUMEM_PCT = keys.NVIDIA_RESOURCE_MEMORY_PERCENTAGE
GPUCORES = keys.NVIDIA_RESOURCE_CORES
PRIORITY = keys.NVIDIA_RESOURCE_PRIORITY
REGISTER = keys.NODE_NVIDIA_REGISTER
HANDSHAKE = keys.NODE_HANDSHAKE
SCORE = keys.NODE_NVIDIA_SCORE
CORDON = keys.DEVICE_CORDON
ALLOCATED = keys.VGPU_DEVICES_ALLOCATED
TO_ALLOCATE = keys.VGPU_DEVICES_TO_ALLOCATE
VGPU_NODE = keys.VGPU_NODE
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY


class Clock:
    """A settable clock for :class:`Engine` (``clock.now += 60``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def local_time(t: float) -> str:
    """``t`` as HAMi's handshake time: local ``YYYY-MM-DD HH:MM:SS``."""
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def requesting(t: float) -> str:
    """The scheduler's handshake mark written at ``t``."""
    return "Requesting_" + local_time(t)


# --------------------------------------------------------------------------------------------- engine
def plugin_manager() -> Any:
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_nvidia.plugin])


def make_engine(nvidia: Mapping[str, Any] | None = None, *, scheduler: Mapping[str, Any] | None = None,
                clock: Any = None) -> Engine:
    """An engine with only the built-in plugins and hami-nvidia, at a fake time."""
    config: dict[str, Any] = {"nvidia": dict(nvidia or {})}
    if scheduler is not None:
        config["scheduler"] = dict(scheduler)
    return Engine(config, plugins=plugin_manager(), clock=clock if clock is not None else Clock())


def make_backend(**nvidia: Any) -> DeviceBackend:
    """The NVIDIA backend for an ``nvidia:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return nv.make_backend(parse_config(nvidia))


# --------------------------------------------------------------------------------------------- pods
def container(name: str = "c", *, limits: Mapping[str, Any] | None = None,
              requests: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    if resources:
        ctr["resources"] = resources
    ctr.update(extra)
    return ctr


def gpu_container(name: str = "c", gpus: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, pct: int | str | None = None) -> dict[str, Any]:
    """A container with NVIDIA limits (values as strings, as in Kubernetes JSON)."""
    limits = {GPU: str(gpus)}
    if mem is not None:
        limits[GPUMEM] = str(mem)
    if cores is not None:
        limits[GPUCORES] = str(cores)
    if pct is not None:
        limits[GPUMEM_PCT] = str(pct)
    return container(name, limits=limits)


def make_pod(*containers: Mapping[str, Any], init: Sequence[Mapping[str, Any]] = (), name: str = "p",
             namespace: str = "default", uid: str | None = None, annotations: Mapping[str, str] | None = None,
             **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    if annotations:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"containers": [dict(c) for c in containers]}
    if init:
        body["initContainers"] = [dict(c) for c in init]
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1, init: int = 0,
                uid: str | None = None) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the allocated annotation."""
    pod = make_pod(*(container(f"c{i}") for i in range(containers)),
                   init=[container(f"i{i}") for i in range(init)], name=name, uid=uid,
                   annotations={VGPU_NODE: node, ALLOCATED: allocated, TO_ALLOCATE: allocated},
                   nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


# --------------------------------------------------------------------------------------------- nodes
def reg(id: str, *, count: int = 10, devmem: int = 8000, devcore: int = 100, type: str = "NVIDIA",
        numa: int = 0, mode: str = "hami-core", health: bool = True, index: int = 0,
        **extra: Any) -> dict[str, Any]:
    """One device of ``hami.io/node-nvidia-register`` (JSON keys as the HAMi device plugin writes them)."""
    out = {"id": id, "index": index, "count": count, "devmem": devmem, "devcore": devcore, "type": type,
           "numa": numa, "mode": mode, "health": health}
    out.update(extra)
    return out


def make_node(name: str, devices: Sequence[Mapping[str, Any]] | None = (), *,
              annotations: Mapping[str, str | None] | None = None, allocatable: int | str | None = None,
              register: str | None = None) -> dict[str, Any]:
    """A Node whose register annotation lists ``devices`` (or the raw ``register`` text).

    ``allocatable`` sets ``status.allocatable[nvidia.com/gpu]``; annotations mapped to ``None`` are left out.
    """
    annos: dict[str, str] = {}
    if register is not None:
        annos[REGISTER] = register
    elif devices is not None:
        annos[REGISTER] = json.dumps(list(devices))
    for key, value in (annotations or {}).items():
        if value is None:
            annos.pop(key, None)
        else:
            annos[key] = value
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
                            "status": {}}
    if allocatable is not None:
        node["status"]["allocatable"] = {GPU: str(allocatable)}
    return node


# --------------------------------------------------------------------------------------------- fit
@dataclass
class FakeNode:
    """The part of a node that ``filter_nodes`` reads (a NodeView)."""

    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usage(id: str, *, index: int = 0, count: int = 100, totalmem: int = 128, totalcore: int = 100,
          used: int = 0, usedmem: int = 0, usedcores: int = 0, type: str = "NVIDIA", numa: int = 0,
          mode: str = "hami-core", health: bool = True,
          pair_scores: Mapping[str, int] | None = None) -> DeviceUsage:
    """A device with its usage, as HAMi's ``DeviceUsage`` (defaults: the B.10 card, 128 MiB / 100 cores)."""
    info = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore, type=type, numa=numa,
                      mode=mode, health=health, vendor=nv.COMMON_WORD, pair_scores=pair_scores)
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = MEM_PERCENTAGE_UNSET,
            type: str = nv.COMMON_WORD) -> DeviceRequest:
    return DeviceRequest(type, nums, memreq, pct, coresreq)


def gpu_policy(gpu: str = "spread", *, node: str = "binpack", numa_bind: bool = False) -> GpuPolicy:
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=tuple(t.strip() for t in gpu.split(",") if t.strip()),
                     numa_bind=numa_bind)


_DEFAULT_BACKEND: list[DeviceBackend] = []


def default_backend() -> DeviceBackend:
    if not _DEFAULT_BACKEND:
        _DEFAULT_BACKEND.append(make_backend())
    return _DEFAULT_BACKEND[0]


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        node_annotations: Mapping[str, str] | None = None, policy: GpuPolicy | None = None,
        backend: DeviceBackend | None = None) -> FitResult:
    """``hami_nvidia.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    pod = make_pod(container(), annotations=pod_annotations)
    cand = FitCandidate(FakeNode(annotations=dict(node_annotations or {})), list(devices), {})
    results = nv.filter_nodes(backend or default_backend(), pod, req, [cand], policy or gpu_policy())
    assert len(results) == 1
    return results[0]


def chosen(result: FitResult) -> list[str]:
    """UUIDs of the devices a successful fit chose, in order."""
    assert result.ok, result.reason
    return [d.uuid for d in result.devices]
