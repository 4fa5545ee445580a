"""Builders for the hami-hygon tests: the DCU's defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: memory in MiB, cores in percent of one card. The vendor-neutral pieces (``Clock``,
``FakeNode``, ``chosen``, ``requesting``, ``gpu_policy``...) come from the kit; this module adds the DCU's
resource names, annotation keys, card and registration formats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_hygon.plugin
from hami_core import testing as kit
from hami_core.plugins.types import DeviceRequest, DeviceUsage, FitResult, GpuPolicy, ResourceNames
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import FakeNode as FakeNode
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.testing import requesting as requesting
from hami_core.wire import keys
from hami_hygon.backend import COMMON_WORD, DcuBackend
from hami_hygon.config import HygonConfig

DCUNUM = "hygon.com/dcunum"
DCUMEM = "hygon.com/dcumem"
DCUCORES = "hygon.com/dcucores"
DCU_RESOURCES = ResourceNames(DCUNUM, DCUMEM, cores=DCUCORES)
REGISTER = "hami.io/node-dcu-register"
HANDSHAKE = "hami.io/node-handshake-dcu"
TO_ALLOCATE = "hami.io/dcu-devices-to-allocate"
ALLOCATED = "hami.io/dcu-devices-allocated"
USE_TYPE = "hygon.com/use-dcutype"
NOUSE_TYPE = "hygon.com/nouse-dcutype"
USE_UUID = "hygon.com/use-gpuuuid"
NOUSE_UUID = "hygon.com/nouse-gpuuuid"
VGPU_NODE = keys.VGPU_NODE
VGPU_TIME = keys.VGPU_TIME
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY
NODE_LOCK = "hami.io/mutex.lock"

#: The E.2 example card: 65520 MiB, 4 tasks, 100 cores.
K100 = "DCU-K100_AI"


# --------------------------------------------------------------------------------------------- engine
HYGON = kit.VendorKit(hami_hygon.plugin, "hygon", HygonConfig)
#: A plugin manager with the built-ins, hami-hygon and ``*extra`` plugins; an engine on a ``hygon:`` section (the
#: defaults when ``None``) at a fake time; the section validated as the plugin validates it.
plugin_manager, make_engine, parse_config = HYGON.plugin_manager, HYGON.engine, HYGON.parse_config


def make_backend(**hygon: Any) -> DcuBackend:
    """The DCU backend for a ``hygon:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return DcuBackend.from_config(parse_config(hygon))


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given (the tests also feed YAML integers); the kit's pod, named ``p`` with
#: UID ``uid-<name>`` unless given.
container, make_pod = HYGON.container, HYGON.pod


def dcu_container(name: str = "c", num: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None) -> dict[str, Any]:
    """A container with DCU limits (values as strings, as in Kubernetes JSON)."""
    return kit.device_container(DCU_RESOURCES, num, mem, cores, name=name)


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the DCU allocated annotation."""
    return kit.running_pod(name, node, {ALLOCATED: allocated}, uid=f"uid-{name}",
                           containers=[dcu_container(f"c{i}") for i in range(containers)])


# --------------------------------------------------------------------------------------------- nodes
def csv_device(id: str, *, count: int = 4, devmem: int = 65520, devcore: int = 100, type: str = K100,
               numa: int = 0, health: bool = True, index: int = 0, mode: str = "hami-core") -> str:
    """One 9-field legacy segment ``id,count,devmem,devcore,type,numa,health,index,mode:`` (A.3)."""
    return f"{id},{count},{devmem},{devcore},{type},{numa},{str(health).lower()},{index},{mode}:"


def make_node(name: str, register: str | None = None, *, annotations: Mapping[str, str] | None = None,
              allocatable: int | str | None = None) -> dict[str, Any]:
    """A Node with ``hami.io/node-dcu-register`` = ``register`` (left out when ``None``).

    ``allocatable`` sets ``status.allocatable[hygon.com/dcunum]``.
    """
    annos: dict[str, str] = {}
    if register is not None:
        annos[REGISTER] = register
    annos.update(annotations or {})
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
                            "status": {}}
    if allocatable is not None:
        node["status"]["allocatable"] = {DCUNUM: str(allocatable)}
    return node


def dcu_node(name: str, n: int = 2, **device: Any) -> dict[str, Any]:
    """A node with ``n`` DCUs ``<name>-dcu-<i>`` registered in the legacy form (E.2), index = position."""
    register = "".join(csv_device(f"{name}-dcu-{i}", index=i, numa=i % 2, **device) for i in range(n))
    return make_node(name, register, allocatable=n * device.get("count", 4))


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: the upstream test card, 128 MiB / 100 cores, ``hami-core`` mode).
usage = partial(kit.usage, vendor=COMMON_WORD, mode="hami-core")


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = 0,
            type: str = COMMON_WORD) -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: DcuBackend | None = None) -> FitResult:
    """:meth:`DcuBackend.hami_filter_nodes` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    dcu = backend or make_backend()
    return kit.fit_one(dcu.hami_filter_nodes, dcu, devices, req, pod_annotations=pod_annotations, policy=policy)
