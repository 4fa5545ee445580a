"""Builders for the hami-metax tests: the MetaX defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: memory in MiB, cores in percent of one card. The vendor-neutral pieces (``Clock``,
``FakeNode``, ``candidate``, ``chosen``...) come from the kit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import hami_metax.plugin
from hami_core import testing as kit
from hami_core.plugins.types import DeviceRequest, DeviceUsage, ResourceNames
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import FakeNode as FakeNode
from hami_core.testing import candidate as candidate
from hami_core.testing import chosen as chosen
from hami_core.wire import keys
from hami_metax import sgpu as mx
from hami_metax.config import MetaxConfig
from hami_metax.gpu import GpuBackend

GPU = "metax-tech.com/gpu"
SGPU = "metax-tech.com/sgpu"
VMEMORY = "metax-tech.com/vmemory"
VCORE = "metax-tech.com/vcore"
SGPU_RESOURCES = ResourceNames(SGPU, VMEMORY, cores=VCORE)
VGPU_NODE = keys.VGPU_NODE
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY


# --------------------------------------------------------------------------------------------- engine
METAX = kit.VendorKit(hami_metax.plugin, "metax", MetaxConfig)
#: The plugin manager with hami-metax; an engine on a ``metax:`` section (the defaults when ``None``) at a fake
#: time; the section validated as the plugin validates it.
plugin_manager, make_engine, parse_config = METAX.plugin_manager, METAX.engine, METAX.parse_config


def backends(**metax: Any) -> tuple[GpuBackend, mx.SgpuBackend]:
    """(MetaX GPU, MetaX sGPU) backends of one ``metax:`` section given as keyword arguments."""
    cfg = parse_config(metax)
    return GpuBackend.from_config(cfg), mx.SgpuBackend.from_config(cfg)


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given (the request tests also feed YAML integers); the kit's pod, named
#: ``p`` with UID ``uid-<name>`` unless given.
container, make_pod = METAX.container, METAX.pod


def sgpu_container(name: str = "c", count: int | str = 1, mem: int | str | None = None,
                   cores: int | str | None = None) -> dict[str, Any]:
    """A container with MetaX sGPU limits (values as strings, as in Kubernetes JSON)."""
    return kit.device_container(SGPU_RESOURCES, count, mem, cores, name=name)


def gpu_container(name: str = "c", count: int | str = 1) -> dict[str, Any]:
    return container(name, limits={GPU: str(count)})


def running_pod(name: str, node: str, allocated: str, *, key: str = mx.SGPU_ALLOCATED, containers: int = 1,
                annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the allocated annotation."""
    return kit.running_pod(name, node, {key: allocated}, uid=f"uid-{name}", containers=containers,
                           annotations=annotations)


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
def usage(id: str, *, qos: str | None = None, zone: int | None = None, type: str = mx.SGPU_WORD,
          **kwargs: Any) -> DeviceUsage:
    """A device of backend ``type`` with its usage (defaults: the Go Fit tests' card, 128 MiB / 100 cores /
    split 100); other keywords as :func:`hami_core.testing.usage`.

    ``qos`` and ``zone`` set the registered ``QosPolicy`` and ``LinkZone`` custom info.
    """
    info: dict[str, Any] = {}
    if qos is not None:
        info[mx.INFO_QOS] = qos
    if zone is not None:
        info[mx.INFO_LINK_ZONE] = zone
    return kit.usage(id, vendor=type, custom_info=info or None, **kwargs)


def sreq(nums: int = 1, memreq: int = 0, pct: int = 0, cores: int = 0, type: str = mx.SGPU_WORD) -> DeviceRequest:
    return kit.request(type, nums, memreq, cores, pct)


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
