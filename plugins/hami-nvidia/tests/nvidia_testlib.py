"""Builders for the hami-nvidia tests: the NVIDIA defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: memory in MiB, cores in percent of one card. The vendor-neutral pieces come from the kit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_nvidia.plugin
from hami_core import testing as kit
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    GpuPolicy,
    ResourceNames,
)
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import FakeNode as FakeNode
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.testing import local_time as local_time
from hami_core.testing import requesting as requesting
from hami_core.wire import keys
from hami_nvidia.backend import COMMON_WORD, NvidiaBackend
from hami_nvidia.config import NvidiaConfig

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
GPU_RESOURCES = ResourceNames(GPU, GPUMEM, GPUMEM_PCT, GPUCORES)


# --------------------------------------------------------------------------------------------- engine
NVIDIA = kit.VendorKit(hami_nvidia.plugin, "nvidia", NvidiaConfig)
#: The plugin manager with hami-nvidia; an engine on an ``nvidia:`` section (the defaults when ``None``) at a fake
#: time; the section validated as the plugin validates it.
plugin_manager, make_engine, parse_config = NVIDIA.plugin_manager, NVIDIA.engine, NVIDIA.parse_config


def make_backend(**nvidia: Any) -> NvidiaBackend:
    """The NVIDIA backend for an ``nvidia:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return NvidiaBackend.from_config(parse_config(nvidia))


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given; the kit's pod, named ``p`` with UID ``uid-<name>`` unless given.
container, make_pod = NVIDIA.container, NVIDIA.pod


def gpu_container(name: str = "c", gpus: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, pct: int | str | None = None) -> dict[str, Any]:
    """A container with NVIDIA limits (values as strings, as in Kubernetes JSON)."""
    return kit.device_container(GPU_RESOURCES, gpus, mem, cores, pct=pct, name=name)


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1, init: int = 0,
                uid: str | None = None) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the allocated annotation."""
    return kit.running_pod(name, node, {ALLOCATED: allocated, TO_ALLOCATE: allocated}, uid=uid or f"uid-{name}",
                           containers=containers, init=init)


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
usage = partial(kit.usage, vendor=COMMON_WORD, mode="hami-core")


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = MEM_PERCENTAGE_UNSET,
            type: str = COMMON_WORD) -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


_DEFAULT_BACKEND: list[NvidiaBackend] = []


def default_backend() -> NvidiaBackend:
    if not _DEFAULT_BACKEND:
        _DEFAULT_BACKEND.append(make_backend())
    return _DEFAULT_BACKEND[0]


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        node_annotations: Mapping[str, str] | None = None, policy: GpuPolicy | None = None,
        backend: NvidiaBackend | None = None) -> FitResult:
    """:meth:`NvidiaBackend.hami_filter_nodes` on one node whose devices are given in HAMi's sorted order."""
    nv = backend or default_backend()
    return kit.fit_one(nv.hami_filter_nodes, nv, devices, req, pod_annotations=pod_annotations,
                       node_annotations=node_annotations, policy=policy)
