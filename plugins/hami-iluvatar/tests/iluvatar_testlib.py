"""Builders for the hami-iluvatar tests: Kubernetes Node/Pod JSON, engines with a fake clock, fit inputs.

Units follow HAMi: memory in MiB (``.vMem`` units are 256 MiB), cores in percent of one card. The default
chip is HAMi's ``MR-V100`` with the chart's resource names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import hami_iluvatar.plugin
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
from hami_iluvatar import backend as ilu
from hami_iluvatar.config import IluvatarChipConfig

#: The fake clock's start (Unix seconds).
T0 = 1_750_000_000.0

CHIP = "MR-V100"
VGPU = "iluvatar.ai/MR-V100-vgpu"
VMEM = "iluvatar.ai/MR-V100.vMem"
VCORE = "iluvatar.ai/MR-V100.vCore"
REGISTER = "hami.io/node-MR-V100-register"
HANDSHAKE = "hami.io/node-handshake-MR-V100"
TO_ALLOCATE = "hami.io/MR-V100-devices-to-allocate"
ALLOCATED = "hami.io/MR-V100-devices-allocated"
USE_UUID = "hami.io/use-MR-V100-uuid"
NOUSE_UUID = "hami.io/no-use-MR-V100-uuid"
VGPU_NODE = keys.VGPU_NODE
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
ENV = "SOL_CONTINER_NAME"


class Clock:
    """A settable clock for :class:`Engine` (``clock.now += 60``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def requesting(t: float) -> str:
    """The scheduler's handshake mark written at ``t`` (local ``YYYY-MM-DD HH:MM:SS``)."""
    return "Requesting_" + datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


# --------------------------------------------------------------------------------------------- engine
def plugin_manager() -> Any:
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_iluvatar.plugin])


def make_engine(iluvatars: Any = None, *, clock: Any = None, scheduler: Mapping[str, Any] | None = None) -> Engine:
    """An engine with only the built-in plugins and hami-iluvatar (chart chips unless ``iluvatars`` is given)."""
    config: dict[str, Any] = {"iluvatars": iluvatars if iluvatars is not None else {}}
    if scheduler is not None:
        config["scheduler"] = dict(scheduler)
    return Engine(config, plugins=plugin_manager(), clock=clock if clock is not None else Clock())


def make_backend(chip: str = CHIP, **entry: Any) -> DeviceBackend:
    """The backend of one ``iluvatars:`` entry given by chip name and HAMi's camelCase keys."""
    return ilu.make_backend(IluvatarChipConfig.model_validate({"chipName": chip, **entry}))


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


def ilu_container(name: str = "c", gpus: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, chip: str = CHIP, **extra: Any) -> dict[str, Any]:
    """A container with Iluvatar limits for ``chip`` (``mem`` in 256 MiB units; values as strings)."""
    limits = {f"iluvatar.ai/{chip}-vgpu": str(gpus)}
    if mem is not None:
        limits[f"iluvatar.ai/{chip}.vMem"] = str(mem)
    if cores is not None:
        limits[f"iluvatar.ai/{chip}.vCore"] = str(cores)
    return container(name, limits=limits, **extra)


def make_pod(*containers: Mapping[str, Any], init: Sequence[Mapping[str, Any]] = (), name: str = "p",
             namespace: str = "default", annotations: Mapping[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if annotations:
        meta["annotations"] = dict(annotations)
    body: dict[str, Any] = {"containers": [dict(c) for c in containers]}
    if init:
        body["initContainers"] = [dict(c) for c in init]
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def running_pod(name: str, node: str, allocated: Mapping[str, str] | str, *, containers: int = 1) -> dict[str, Any]:
    """A pod placed earlier: ``hami.io/vgpu-node`` plus allocated annotations (a string means MR-V100's key)."""
    values = {ALLOCATED: allocated} if isinstance(allocated, str) else dict(allocated)
    pod = make_pod(*(container(f"c{i}") for i in range(containers)), name=name,
                   annotations={VGPU_NODE: node, **values}, nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


# --------------------------------------------------------------------------------------------- nodes
def csv(*devices: str) -> str:
    """A legacy registration value: each device terminated by ``:``."""
    return "".join(d + ":" for d in devices)


def card(id: str, *, count: int = 10, devmem: int = 8192, devcore: int = 100, type: str = CHIP, numa: int = 0,
         health: bool = True, index: int | None = None, mode: str | None = None) -> str:
    """One legacy device: 7 fields, or 9 when ``index``/``mode`` are given."""
    fields = [id, str(count), str(devmem), str(devcore), type, str(numa), "true" if health else "false"]
    if index is not None or mode is not None:
        fields += [str(index or 0), mode or "hami-core"]
    return ",".join(fields)


def make_node(name: str, registers: Mapping[str, str | None] | str | None = None, *,
              annotations: Mapping[str, str | None] | None = None,
              allocatable: Mapping[str, int | str] | None = None) -> dict[str, Any]:
    """A Node with registration annotations (a string means MR-V100's register key).

    Annotations mapped to ``None`` are left out.
    """
    regs = {REGISTER: registers} if isinstance(registers, str) else dict(registers or {})
    annos = {k: v for k, v in {**regs, **(annotations or {})}.items() if v is not None}
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
                            "status": {}}
    if allocatable is not None:
        node["status"]["allocatable"] = {k: str(v) for k, v in allocatable.items()}
    return node


# --------------------------------------------------------------------------------------------- fit
@dataclass
class FakeNode:
    """The part of a node that ``filter_nodes`` reads (a NodeView)."""

    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usage(id: str, *, index: int = 0, count: int = 10, totalmem: int = 8192, totalcore: int = 100, used: int = 0,
          usedmem: int = 0, usedcores: int = 0, type: str = CHIP, health: bool = True) -> DeviceUsage:
    """A device with its usage, as HAMi's ``DeviceUsage``."""
    info = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore, type=type,
                      mode="hami-core", health=health, vendor=CHIP)
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int | None = None,
            type: str = CHIP) -> DeviceRequest:
    """An Iluvatar request; ``pct`` defaults as the backend sets it (100 without memory, else 0)."""
    return DeviceRequest(type, nums, memreq, (100 if memreq == 0 else 0) if pct is None else pct, coresreq)


def gpu_policy(gpu: str = "spread", *, node: str = "binpack") -> GpuPolicy:
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=tuple(t.strip() for t in gpu.split(",") if t.strip()))


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: DeviceBackend | None = None) -> FitResult:
    """``hami_iluvatar.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    pod = make_pod(container(), annotations=pod_annotations)
    cand = FitCandidate(FakeNode(), list(devices), {})
    results = ilu.filter_nodes(backend or make_backend(), pod, req, [cand], policy or gpu_policy())
    assert len(results) == 1
    return results[0]


def chosen(result: FitResult) -> list[str]:
    """UUIDs of the devices a successful fit chose, in order."""
    assert result.ok, result.reason
    return [d.uuid for d in result.devices]
