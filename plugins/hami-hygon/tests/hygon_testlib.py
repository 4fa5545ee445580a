"""Builders for the hami-hygon tests: Kubernetes Node/Pod JSON, engines with a fake clock, fit inputs.

Units follow HAMi: memory in MiB, cores in percent of one card.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import hami_hygon.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import (
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
)
from hami_core.wire import keys
from hami_hygon import backend as dcu
from hami_hygon.config import parse_config

#: The fake clock's start (Unix seconds).
T0 = 1_750_000_000.0

DCUNUM = "hygon.com/dcunum"
DCUMEM = "hygon.com/dcumem"
DCUCORES = "hygon.com/dcucores"
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


class Clock:
    """A settable clock for :class:`Engine` (``clock.now += 60``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def requesting(t: float) -> str:
    """The scheduler's handshake mark written at ``t``: ``Requesting_`` + local ``YYYY-MM-DD HH:MM:SS``."""
    return "Requesting_" + datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


# --------------------------------------------------------------------------------------------- engine
def plugin_manager(*extra: Any) -> Any:
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_hygon.plugin, *extra])


def make_engine(hygon: Mapping[str, Any] | None = None, *, scheduler: Mapping[str, Any] | None = None,
                clock: Any = None) -> Engine:
    """An engine with only the built-in plugins and hami-hygon, at a fake time."""
    config: dict[str, Any] = {"hygon": dict(hygon or {})}
    if scheduler is not None:
        config["scheduler"] = dict(scheduler)
    return Engine(config, plugins=plugin_manager(), clock=clock if clock is not None else Clock())


def make_backend(**hygon: Any) -> DeviceBackend:
    """The DCU backend for a ``hygon:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return dcu.make_backend(parse_config(hygon))


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


def dcu_container(name: str = "c", num: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None) -> dict[str, Any]:
    """A container with DCU limits (values as strings, as in Kubernetes JSON)."""
    limits = {DCUNUM: str(num)}
    if mem is not None:
        limits[DCUMEM] = str(mem)
    if cores is not None:
        limits[DCUCORES] = str(cores)
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


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the DCU allocated annotation."""
    pod = make_pod(*(dcu_container(f"c{i}") for i in range(containers)), name=name,
                   annotations={VGPU_NODE: node, ALLOCATED: allocated}, nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


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
@dataclass
class FakeNode:
    """The part of a node that ``filter_nodes`` reads (a NodeView)."""

    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usage(id: str, *, index: int = 0, count: int = 100, totalmem: int = 128, totalcore: int = 100,
          used: int = 0, usedmem: int = 0, usedcores: int = 0, type: str = "DCU", numa: int = 0,
          health: bool = True) -> DeviceUsage:
    """A device with its usage, as HAMi's ``DeviceUsage`` (defaults: the upstream test card, 128 MiB / 100 cores)."""
    info = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore, type=type, numa=numa,
                      mode="hami-core", health=health, vendor=dcu.COMMON_WORD)
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = 0,
            type: str = dcu.COMMON_WORD) -> DeviceRequest:
    return DeviceRequest(type, nums, memreq, pct, coresreq)


def gpu_policy(gpu: str = "spread", *, node: str = "binpack") -> GpuPolicy:
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=tuple(t.strip() for t in gpu.split(",") if t.strip()))


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: DeviceBackend | None = None) -> FitResult:
    """``hami_hygon.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    pod = make_pod(container(), annotations=pod_annotations)
    cand = FitCandidate(FakeNode(), list(devices), {})
    results = dcu.filter_nodes(backend or make_backend(), pod, req, [cand], policy or gpu_policy())
    assert len(results) == 1
    return results[0]


def chosen(result: FitResult) -> list[str]:
    """UUIDs of the devices a successful fit chose, in order."""
    assert result.ok, result.reason
    return [d.uuid for d in result.devices]
