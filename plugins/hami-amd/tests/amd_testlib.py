"""Builders for the hami-amd tests: the AMD backend's defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: memory in MiB, cores as a percentage in requests and as compute units (CUs) once booked.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_amd.plugin
from hami_amd.backend import COMMON_WORD, AmdBackend
from hami_amd.config import AmdConfig
from hami_core import testing as kit
from hami_core.plugins.types import DeviceRequest, DeviceUsage, FitResult, GpuPolicy, ResourceNames
from hami_core.testing import Clock as Clock
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy

GPU = "amd.com/gpu"
GPUMEM = "amd.com/gpumem"
GPUCORES = "amd.com/gpucores"
AMD_RESOURCES = ResourceNames(GPU, GPUMEM, cores=GPUCORES)
REGISTER = "hami.io/node-amd-register"
TO_ALLOCATE = "hami.io/amd-devices-to-allocate"
ALLOCATED = "hami.io/amd-devices-allocated"
CU_ALLOCATED = "hami.io/amd-cu-allocated"
USE_TYPE = "amd.com/use-gputype"
NOUSE_TYPE = "amd.com/nouse-gputype"
USE_UUID = "amd.com/use-gpu-uuid"
NOUSE_UUID = "amd.com/nouse-gpu-uuid"
NODE_LOCK = "hami.io/mutex.lock"
#: HAMi's test names (``Test_MutateAdmission``, ``Test_GenerateResourceRequests``): not the chart's.
HAMI_TEST_NAMES = {"resourceCountName": GPU, "resourceMemoryName": "amd.com/gpu-mem",
                   "resourceCoreName": "amd.com/gpu-core-pct"}

#: The design doc's card (``docs/develop/amd-vgpu.md`` §4.1): 196608 MiB, 304 CUs.
MI300X = "AMD Instinct MI300X VF"

# --------------------------------------------------------------------------------------------- engine
AMD = kit.VendorKit(hami_amd.plugin, "amd", AmdConfig)
plugin_manager, make_engine, parse_config = AMD.plugin_manager, AMD.engine, AMD.parse_config
container, make_pod = AMD.container, AMD.pod


def make_backend(**amd: Any) -> AmdBackend:
    """The AMD backend for an ``amd:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return AmdBackend.from_config(parse_config(amd))


def amd_container(name: str = "c", num: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None) -> dict[str, Any]:
    """A container with AMD limits (values as strings, as in Kubernetes JSON)."""
    return kit.device_container(AMD_RESOURCES, num, mem, cores, name=name)


# --------------------------------------------------------------------------------------------- nodes
def device_json(id: str, *, index: int = 0, count: int = 4, devmem: int = 196608, devcore: int = 304,
                type: str = MI300X, health: bool = True) -> dict[str, Any]:
    """One DeviceInfo of ``hami.io/node-amd-register`` (§4.1)."""
    return {"id": id, "index": index, "count": count, "devmem": devmem, "devcore": devcore, "type": type,
            "numa": 0, "mode": "hami-core", "health": health}


def make_node(name: str, register: str | None = None, *, capacity: int | str | None = None) -> dict[str, Any]:
    """A Node with ``hami.io/node-amd-register`` = ``register`` (left out when ``None``) and
    ``status.capacity[amd.com/gpu]`` = ``capacity`` (left out when ``None``)."""
    annos = {} if register is None else {REGISTER: register}
    return kit.node(name, annotations=annos, capacity=None if capacity is None else {GPU: capacity})


def amd_node(name: str, n: int = 2, **device: Any) -> dict[str, Any]:
    """A node with ``n`` GPUs ``<name>-gpu-<i>`` and the capacity ``count x n``."""
    register = json.dumps([device_json(f"{name}-gpu-{i}", index=i, **device) for i in range(n)])
    return make_node(name, register, capacity=n * device.get("count", 4))


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: HAMi's fit-test card, 1000 MiB / 100 CUs, split count 2).
usage = partial(kit.usage, vendor=COMMON_WORD, count=2, totalmem=1000, totalcore=100)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, type: str = COMMON_WORD) -> DeviceRequest:
    """HAMi's ``ContainerDeviceRequest`` as its AMD tests write it (``MemPercentagereq`` 0)."""
    return kit.request(type, nums, memreq, coresreq, 0)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: AmdBackend | None = None) -> FitResult:
    """:meth:`AmdBackend.hami_filter_nodes` on one node whose devices are in HAMi's order (walked last first)."""
    amd = backend or make_backend()
    return kit.fit_one(amd.hami_filter_nodes, amd, devices, req, pod_annotations=pod_annotations, policy=policy)
