"""Builders for the hami-mthreads tests: Kubernetes Node/Pod JSON, engines with a fake clock, fit inputs.

Units follow HAMi: memory resources in 512 MiB units, booked memory in MiB, cores in sixteenths of a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hami_mthreads.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
)
from hami_core.wire import keys
from hami_mthreads import backend as mt
from hami_mthreads.config import parse_config

#: The fake clock's start (Unix seconds).
T0 = 1_750_000_000.0

VGPU = "mthreads.com/vgpu"
MEM = "mthreads.com/sgpu-memory"
CORE = "mthreads.com/sgpu-core"
ALLOCATED = "hami.io/mthreads-vgpu-devices-allocated"
TO_ALLOCATE = "hami.io/mthreads-vgpu-devices-to-allocate"
GPU_INDEX = "mthreads.com/gpu-index"
PREDICATE_TIME = "mthreads.com/predicate-time"
PREDICATE_NODE = "mthreads.com/predicate-node"
REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"
USE_UUID = "mthreads.ai/use-gpuuuid"
NOUSE_UUID = "mthreads.ai/nouse-gpuuuid"
VGPU_NODE = keys.VGPU_NODE
VGPU_TIME = keys.VGPU_TIME
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY


class Clock:
    """A settable clock for :class:`Engine` (``clock.now += 60``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------------------------- engine
def plugin_manager() -> Any:
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_mthreads.plugin])


def make_engine(mthreads: Mapping[str, Any] | None = None, *, clock: Any = None) -> Engine:
    """An engine with only the built-in plugins and hami-mthreads, at a fake time."""
    return Engine({"mthreads": dict(mthreads or {})}, plugins=plugin_manager(),
                  clock=clock if clock is not None else Clock())


def make_backend(**mthreads: Any) -> DeviceBackend:
    """The Mthreads backend for an ``mthreads:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return mt.make_backend(parse_config(mthreads))


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


def mt_container(name: str = "c", gpus: int | str = 1, mem: int | str | None = None,
                 cores: int | str | None = None) -> dict[str, Any]:
    """A container with Mthreads limits (values as strings, as in Kubernetes JSON)."""
    limits = {VGPU: str(gpus)}
    if mem is not None:
        limits[MEM] = str(mem)
    if cores is not None:
        limits[CORE] = str(cores)
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


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1, init: int = 0) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the Mthreads allocated annotation."""
    pod = make_pod(*(container(f"c{i}") for i in range(containers)),
                   init=[container(f"i{i}") for i in range(init)], name=name,
                   annotations={VGPU_NODE: node, ALLOCATED: allocated}, nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


# --------------------------------------------------------------------------------------------- nodes
def make_node(name: str, cores: int | str | None = 16, memory: int | str | None = 96, *,
              capacity: Mapping[str, str] | None = None, allocatable: bool = True) -> dict[str, Any]:
    """A Node as the Moore Threads device plugin leaves it: sGPU cores and memory in ``status.capacity``.

    ``cores``/``memory`` of ``None`` leave the resource out; ``capacity`` adds raw entries.
    """
    cap: dict[str, str] = {"cpu": "32", "memory": "256Gi"}
    if cores is not None:
        cap[CORE] = str(cores)
    if memory is not None:
        cap[MEM] = str(memory)
    cap.update(capacity or {})
    status: dict[str, Any] = {"capacity": cap}
    if allocatable:
        status["allocatable"] = dict(cap)
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": status}


# --------------------------------------------------------------------------------------------- fit
@dataclass
class FakeNode:
    """The part of a node that ``filter_nodes`` reads (a NodeView)."""

    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usage(id: str, *, index: int = 0, count: int = 100, totalmem: int = 49152, totalcore: int = 16,
          used: int = 0, usedmem: int = 0, usedcores: int = 0, type: str = mt.COMMON_WORD,
          health: bool = True) -> DeviceUsage:
    """A device with its usage (defaults: one registered MTT GPU, 49152 MiB / 16 cores, split 100)."""
    info = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore, type=type,
                      health=health, vendor=mt.COMMON_WORD)
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = MEM_PERCENTAGE_UNSET,
            type: str = mt.COMMON_WORD) -> DeviceRequest:
    return DeviceRequest(type, nums, memreq, pct, coresreq)


def gpu_policy(gpu: str = "spread", *, node: str = "binpack") -> GpuPolicy:
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=tuple(t.strip() for t in gpu.split(",") if t.strip()))


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None,
        allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None) -> FitResult:
    """``hami_mthreads.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi. ``allocated`` is what earlier
    containers of the pod got on the node.
    """
    pod = make_pod(container(), annotations=pod_annotations)
    cand = FitCandidate(FakeNode(), list(devices), dict(allocated or {}))
    results = mt.filter_nodes(pod, req, [cand], policy or gpu_policy())
    assert len(results) == 1
    return results[0]


def chosen(result: FitResult) -> list[str]:
    """UUIDs of the devices a successful fit chose, in order."""
    assert result.ok, result.reason
    return [d.uuid for d in result.devices]
