"""Builders for the hami-cambricon tests: Node/Pod JSON, engines with a fake clock, fit inputs.

Units follow HAMi: device memory in MiB, container memory in 256 MiB units, cores in percent of one MLU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hami_cambricon.plugin
from hami_cambricon import backend as mlu
from hami_cambricon.config import CambriconConfig, parse_config
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import (
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

#: The fake clock's start (Unix seconds).
T0 = 1_750_000_000.0

VMLU = "cambricon.com/vmlu"
VMEMORY = "cambricon.com/mlu.smlu.vmemory"
VCORE = "cambricon.com/mlu.smlu.vcore"
#: The count name HAMi's own Cambricon tests configure.
MLU = "cambricon.com/mlu"
TO_ALLOCATE = "hami.io/cambricon-mlu-devices-to-allocate"
ALLOCATED = "hami.io/cambricon-mlu-devices-allocated"
PROFILE = "CAMBRICON_DSMLU_PROFILE"
ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
LOCK = "cambricon.com/dsmlu.lock"
VGPU_NODE = keys.VGPU_NODE
VGPU_TIME = keys.VGPU_TIME
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY

#: Two models, as the README's multi-model example configures them.
MODELS = {"models": [
    {"name": "MLU370", "resourceCountName": "cambricon.com/mlu370.vmlu"},
    {"name": "MLU590", "resourceCountName": "cambricon.com/mlu590.vmlu"},
]}


class Clock:
    """A settable clock for :class:`Engine` (``clock.now += 60``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------------------------- engine
def plugin_manager() -> Any:
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_cambricon.plugin])


def make_engine(cambricon: Mapping[str, Any] | None = None, *, clock: Any = None,
                scheduler: Mapping[str, Any] | None = None) -> Engine:
    """An engine with only the built-in plugins and hami-cambricon, at a fake time."""
    config: dict[str, Any] = {"cambricon": dict(cambricon) if cambricon is not None else None}
    if scheduler is not None:
        config["scheduler"] = dict(scheduler)
    return Engine(config, plugins=plugin_manager(), clock=clock if clock is not None else Clock())


def config(**section: Any) -> CambriconConfig:
    return parse_config(section)


def backend(name: str = "MLU", **section: Any) -> DeviceBackend:
    """The backend ``name`` for a ``cambricon:`` section given as keyword arguments (HAMi's camelCase keys)."""
    found = [b for b in mlu.make_backends(parse_config(section)) if b.name == name]
    assert len(found) == 1
    return found[0]


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


def mlu_container(name: str = "c", count: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, *, count_name: str = VMLU, mem_name: str = VMEMORY,
                  core_name: str = VCORE) -> dict[str, Any]:
    """A container with MLU limits (values as strings, as in Kubernetes JSON); ``mem`` in 256 MiB units."""
    limits = {count_name: str(count)}
    if mem is not None:
        limits[mem_name] = str(mem)
    if cores is not None:
        limits[core_name] = str(cores)
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


def running_pod(name: str, node: str, allocated: str, *, key: str = ALLOCATED, containers: int = 1,
                init: int = 0) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the allocated annotation."""
    pod = make_pod(*(container(f"c{i}") for i in range(containers)),
                   init=[container(f"i{i}") for i in range(init)], name=name,
                   annotations={VGPU_NODE: node, key: allocated}, nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


# --------------------------------------------------------------------------------------------- nodes
def make_node(name: str, cores: int | str | None = None, vmemory: int | str | None = None, *,
              core_name: str = VCORE, mem_name: str = VMEMORY, labels: Mapping[str, str] | None = None,
              annotations: Mapping[str, str] | None = None,
              extra_capacity: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node as Cambricon's dynamic-smlu device plugin leaves it: MLU cores and memory in ``capacity``."""
    capacity: dict[str, str] = {"cpu": "64", "memory": "256Gi"}
    if cores is not None:
        capacity[core_name] = str(cores)
    if vmemory is not None:
        capacity[mem_name] = str(vmemory)
    capacity.update(extra_capacity or {})
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "status": {"capacity": capacity, "allocatable": dict(capacity)}}


# --------------------------------------------------------------------------------------------- fit
@dataclass
class FakeNode:
    """The part of a node that ``filter_nodes`` reads (a NodeView)."""

    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usage(id: str, *, index: int = 0, count: int = 100, totalmem: int = 128, totalcore: int = 100, used: int = 0,
          usedmem: int = 0, usedcores: int = 0, type: str = "MLU", health: bool = True) -> DeviceUsage:
    """A device with its usage (defaults: the card of HAMi's Cambricon fit tests, 128 MiB / 100 cores)."""
    info = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore, type=type,
                      health=health, vendor=type)
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = 0, type: str = "MLU") -> DeviceRequest:
    return DeviceRequest(type, nums, memreq, pct, coresreq)


def gpu_policy(gpu: str = "spread", *, node: str = "binpack") -> GpuPolicy:
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=tuple(t.strip() for t in gpu.split(",") if t.strip()))


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod: Mapping[str, Any] | None = None,
        pod_annotations: Mapping[str, str] | None = None, policy: GpuPolicy | None = None,
        allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None,
        quotas: mlu.Quotas | None = None, cfg: CambriconConfig | None = None, name: str = "MLU") -> FitResult:
    """``hami_cambricon.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    cfg = cfg or parse_config({})
    spec = cfg.spec(name)
    assert spec is not None
    pod = pod if pod is not None else make_pod(container(), annotations=pod_annotations)
    cand = FitCandidate(FakeNode(), list(devices), dict(allocated or {}))
    results = mlu.filter_nodes(cfg, spec, pod, req, [cand], policy or gpu_policy(), quotas=quotas)
    assert len(results) == 1
    return results[0]


def chosen(result: FitResult) -> list[str]:
    """UUIDs of the devices a successful fit chose, in order."""
    assert result.ok, result.reason
    return [d.uuid for d in result.devices]
