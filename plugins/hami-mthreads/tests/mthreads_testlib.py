"""Builders for the hami-mthreads tests: the Moore Threads defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: memory resources in 512 MiB units, booked memory in MiB, cores in sixteenths of a GPU.
The vendor-neutral pieces (``Clock``, ``FakeNode``, ``chosen``, ``gpu_policy``...) come from the kit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_mthreads.plugin
from hami_core import testing as kit
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    GpuPolicy,
    ResourceNames,
)
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.wire import keys
from hami_mthreads.backend import COMMON_WORD, MthreadsBackend
from hami_mthreads.config import MthreadsConfig

VGPU = "mthreads.com/vgpu"
MEM = "mthreads.com/sgpu-memory"
CORE = "mthreads.com/sgpu-core"
MT_RESOURCES = ResourceNames(VGPU, MEM, cores=CORE)
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


# --------------------------------------------------------------------------------------------- engine
MTHREADS = kit.VendorKit(hami_mthreads.plugin, "mthreads", MthreadsConfig)
#: The plugin manager with hami-mthreads, an engine on an ``mthreads:`` section (the defaults when ``None``) at a
#: fake time, the section validated as the plugin validates it.
plugin_manager, make_engine, parse_config = MTHREADS.plugin_manager, MTHREADS.engine, MTHREADS.parse_config


def make_backend(**mthreads: Any) -> MthreadsBackend:
    """The Mthreads backend for an ``mthreads:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return MthreadsBackend.from_config(parse_config(mthreads))


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given; the kit's pod, named ``p`` with UID ``uid-<name>`` unless given.
container, make_pod = MTHREADS.container, MTHREADS.pod


def mt_container(name: str = "c", gpus: int | str = 1, mem: int | str | None = None,
                 cores: int | str | None = None) -> dict[str, Any]:
    """A container with Mthreads limits (values as strings, as in Kubernetes JSON)."""
    return kit.device_container(MT_RESOURCES, gpus, mem, cores, name=name)


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1, init: int = 0) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the Mthreads allocated annotation."""
    return kit.running_pod(name, node, {ALLOCATED: allocated}, uid=f"uid-{name}", containers=containers, init=init)


# --------------------------------------------------------------------------------------------- nodes
def make_node(name: str, cores: int | str | None = 16, memory: int | str | None = 96, *,
              capacity: Mapping[str, str] | None = None, allocatable: bool = True) -> dict[str, Any]:
    """A Node as the Moore Threads device plugin leaves it: sGPU cores and memory in ``status.capacity``.

    ``cores``/``memory`` of ``None`` leave the resource out; ``capacity`` adds raw entries.
    """
    cap = {"cpu": "32", "memory": "256Gi", **{k: v for k, v in ((CORE, cores), (MEM, memory)) if v is not None},
           **(capacity or {})}
    return kit.node(name, capacity=cap, allocatable=cap if allocatable else None)


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: one registered MTT GPU, 49152 MiB / 16 cores, split 100).
usage = partial(kit.usage, vendor=COMMON_WORD, totalmem=49152, totalcore=16)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = MEM_PERCENTAGE_UNSET,
            type: str = COMMON_WORD) -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None,
        allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None) -> FitResult:
    """:meth:`MthreadsBackend.hami_filter_nodes` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi. ``allocated`` is what earlier
    containers of the pod got on the node.
    """
    backend = make_backend()
    return kit.fit_one(backend.hami_filter_nodes, backend, devices, req, pod_annotations=pod_annotations,
                       policy=policy, allocated=allocated)
