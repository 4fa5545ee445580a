"""Builders for the hami-metax tests: Kubernetes Node/Pod JSON, engines with a fake clock, fit inputs.

Units follow HAMi: memory in MiB, cores in percent of one card.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hami_metax.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import DeviceBackend, DeviceInfo, DeviceRequest, DeviceUsage, FitCandidate, FitResult
from hami_core.wire import keys
from hami_metax import backend as mx
from hami_metax.config import parse_config

#: The fake clock's start (Unix seconds).
T0 = 1_750_000_000.0

GPU = "metax-tech.com/gpu"
SGPU = "metax-tech.com/sgpu"
VMEMORY = "metax-tech.com/vmemory"
VCORE = "metax-tech.com/vcore"
VGPU_NODE = keys.VGPU_NODE
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
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_metax.plugin])


def make_engine(metax: Mapping[str, Any] | None = None, *, scheduler: Mapping[str, Any] | None = None,
                clock: Any = None) -> Engine:
    """An engine with only the built-in plugins and hami-metax, at a fake time."""
    config: dict[str, Any] = {"metax": dict(metax or {})}
    if scheduler is not None:
        config["scheduler"] = dict(scheduler)
    return Engine(config, plugins=plugin_manager(), clock=clock if clock is not None else Clock())


def backends(**metax: Any) -> tuple[DeviceBackend, DeviceBackend]:
    """(MetaX GPU, MetaX sGPU) backends of one ``metax:`` section given as keyword arguments."""
    gpu, sgpu = mx.make_backends(parse_config(metax))
    return gpu, sgpu


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


def sgpu_container(name: str = "c", count: int | str = 1, mem: int | str | None = None,
                   cores: int | str | None = None) -> dict[str, Any]:
    """A container with MetaX sGPU limits (values as strings, as in Kubernetes JSON)."""
    limits = {SGPU: str(count)}
    if mem is not None:
        limits[VMEMORY] = str(mem)
    if cores is not None:
        limits[VCORE] = str(cores)
    return container(name, limits=limits)


def gpu_container(name: str = "c", count: int | str = 1) -> dict[str, Any]:
    return container(name, limits={GPU: str(count)})


def make_pod(*containers: Mapping[str, Any], init: Sequence[Mapping[str, Any]] = (), name: str = "p",
             namespace: str = "default", uid: str | None = None, annotations: Mapping[str, str] | None = None,
             **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"containers": [dict(c) for c in containers]}
    if init:
        body["initContainers"] = [dict(c) for c in init]
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def running_pod(name: str, node: str, allocated: str, *, key: str = mx.SGPU_ALLOCATED, containers: int = 1,
                annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the allocated annotation."""
    annos = {VGPU_NODE: node, key: allocated, **(annotations or {})}
    pod = make_pod(*(container(f"c{i}") for i in range(containers)), name=name, annotations=annos, nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


# --------------------------------------------------------------------------------------------- nodes
def sdev(uuid: str, *, count: int = 16, vram: int = 32768, compute: int = 100, healthy: bool = True,
         qos: str = "", zone: int = 0, numa: int = 0, model: str = "sgpu", **extra: Any) -> dict[str, Any]:
    """One device of ``metax-tech.com/node-gpu-devices`` as the MetaX sGPU device plugin writes it."""
    out: dict[str, Any] = {"uuid": uuid, "bdf": "0000:44:00.0", "model": model, "totalDevCount": count,
                           "totalCompute": compute, "totalVRam": vram, "numa": numa, "healthy": healthy}
    if qos:
        out["qosPolicy"] = qos
    if zone:
        out["linkZone"] = zone
    out.update(extra)
    return out


def sgpu_node(name: str, devices: Sequence[Mapping[str, Any]] | None = (), *, raw: str | None = None,
              annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node registered by the MetaX sGPU device plugin (``raw`` replaces the JSON text)."""
    annos: dict[str, str] = dict(annotations or {})
    if raw is not None:
        annos[mx.NODE_SGPU_DEVICES] = raw
    elif devices is not None:
        annos[mx.NODE_SGPU_DEVICES] = json.dumps(list(devices))
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos}, "status": {}}


def gpu_node(name: str, capacity: int | str | None = 8, *,
             annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node whose MetaX GPU device plugin advertises ``capacity`` cards."""
    status: dict[str, Any] = {}
    if capacity is not None:
        status = {"capacity": {GPU: str(capacity)}, "allocatable": {GPU: str(capacity)}}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(annotations or {})}, "status": status}


# --------------------------------------------------------------------------------------------- fit
@dataclass
class FakeNode:
    """The part of a node that the filter hooks read (a NodeView)."""

    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usage(id: str, *, index: int = 0, count: int = 100, totalmem: int = 128, totalcore: int = 100,
          used: int = 0, usedmem: int = 0, usedcores: int = 0, health: bool = True, qos: str | None = None,
          zone: int | None = None, type: str = mx.SGPU_WORD) -> DeviceUsage:
    """A device with its usage (defaults: the Go Fit tests' card, 128 MiB / 100 cores / split 100).

    ``qos`` and ``zone`` set the registered ``QosPolicy`` and ``LinkZone`` custom info.
    """
    info: dict[str, Any] = {}
    if qos is not None:
        info[mx.INFO_QOS] = qos
    if zone is not None:
        info[mx.INFO_LINK_ZONE] = zone
    dev = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore, type=type,
                     health=health, custom_info=info or None, vendor=type)
    return DeviceUsage(dev, used=used, usedmem=usedmem, usedcores=usedcores)


def sreq(nums: int = 1, memreq: int = 0, pct: int = 0, cores: int = 0, type: str = mx.SGPU_WORD) -> DeviceRequest:
    return DeviceRequest(type, nums, memreq, pct, cores)


def candidate(devices: Sequence[DeviceUsage], *, allocated: Mapping[str, Any] | None = None,
              annotations: Mapping[str, str] | None = None) -> FitCandidate:
    return FitCandidate(FakeNode(annotations=dict(annotations or {})), list(devices), dict(allocated or {}))


def chosen(result: FitResult) -> list[str]:
    """UUIDs of the devices a successful fit chose, in order."""
    assert result.ok, result.reason
    return [d.uuid for d in result.devices]


class InProcess:
    """Admission, schedule, reserve and the annotation write-back the pod watch would deliver, in-process."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.pods: dict[str, dict[str, Any]] = {}

    def add_node(self, node: dict[str, Any]) -> Any:
        return self.engine.upsert_node(node)

    def submit(self, pod: dict[str, Any]) -> Any:
        from types import SimpleNamespace

        admitted = self.engine.admit(pod)
        decision = self.engine.schedule(admitted)
        if decision.node is not None:
            self.engine.reserve(admitted, decision)
            admitted["metadata"].setdefault("annotations", {}).update(decision.annotations)
            admitted["spec"]["nodeName"] = decision.node
            self.engine.upsert_pod(admitted)
            self.pods[admitted["metadata"].get("uid") or admitted["metadata"]["name"]] = admitted
        return SimpleNamespace(node=decision.node, decision=decision)

    def delete_pod(self, key: str) -> None:
        self.engine.remove_pod(self.pods.pop(key))
