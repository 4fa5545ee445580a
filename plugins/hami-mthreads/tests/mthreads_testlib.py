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
from hami_core.engine.facade import Engine
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceBackend,
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
from hami_mthreads import backend as mt
from hami_mthreads.config import parse_config

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
plugin_manager = partial(kit.plugin_manager, hami_mthreads.plugin)


def make_engine(mthreads: Mapping[str, Any] | None = None, *, clock: Any = None) -> Engine:
    """An engine with only the built-in plugins and hami-mthreads, at a fake time."""
    return kit.engine_with(hami_mthreads.plugin, config={"mthreads": dict(mthreads or {})}, clock=clock)


def make_backend(**mthreads: Any) -> DeviceBackend:
    """The Mthreads backend for an ``mthreads:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return mt.make_backend(parse_config(mthreads))


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given.
container = partial(kit.container, as_strings=False)


def mt_container(name: str = "c", gpus: int | str = 1, mem: int | str | None = None,
                 cores: int | str | None = None) -> dict[str, Any]:
    """A container with Mthreads limits (values as strings, as in Kubernetes JSON)."""
    return kit.device_container(MT_RESOURCES, gpus, mem, cores, name=name)


def make_pod(*containers: Mapping[str, Any], name: str = "p", uid: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """The kit's pod, named ``p`` with UID ``uid-<name>`` unless given."""
    return kit.pod(*containers, name=name, uid=uid or f"uid-{name}", **kwargs)


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1, init: int = 0) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the Mthreads allocated annotation."""
    return kit.running_pod(name, node, {ALLOCATED: allocated}, uid=f"uid-{name}", containers=containers, init=init)


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
#: A device with its usage (defaults: one registered MTT GPU, 49152 MiB / 16 cores, split 100).
usage = partial(kit.usage, vendor=mt.COMMON_WORD, totalmem=49152, totalcore=16)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = MEM_PERCENTAGE_UNSET,
            type: str = mt.COMMON_WORD) -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None,
        allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None) -> FitResult:
    """``hami_mthreads.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi. ``allocated`` is what earlier
    containers of the pod got on the node.
    """
    return kit.fit_one(mt.filter_nodes, None, devices, req, pod_annotations=pod_annotations, policy=policy,
                       allocated=allocated)
