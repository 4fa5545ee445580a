"""Builders for the hami-ascend tests: Kubernetes Node/Pod JSON, engines with a fake clock, fit inputs.

Units follow HAMi: memory in MiB; cores are the registered ``devcore`` units (AI cores) in template mode
and percent of a card in hami-core mode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import hami_ascend.plugin
from hami_ascend import backend as npu
from hami_ascend.config import CHART_CONFIGS, ChipConfig, parse_config
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

#: The fake clock's start (Unix seconds).
T0 = 1_750_000_000.0

VGPU_NODE = keys.VGPU_NODE
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY
VNPU_MODE = npu.VNPU_MODE
HAMI_CORE = {npu.VNPU_MODE: npu.VNPU_MODE_HAMI_CORE}


class Clock:
    """A settable clock for :class:`Engine` (``clock.now += 60``)."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def local_time(t: float) -> str:
    """``t`` as HAMi's handshake time: local ``YYYY-MM-DD HH:MM:SS``."""
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def requesting(t: float) -> str:
    """The scheduler's handshake mark written at ``t``."""
    return "Requesting_" + local_time(t)


# --------------------------------------------------------------------------------------------- names
def res(word: str, kind: str = "") -> str:
    """HAMi's chart resource names: ``huawei.com/<cw>``, ``huawei.com/<cw>-memory``, ``huawei.com/<cw>-core``."""
    return f"huawei.com/{word}" + (f"-{kind}" if kind else "")


def register_key(word: str) -> str:
    return f"hami.io/node-register-{word}"


def handshake_key(word: str) -> str:
    return f"hami.io/node-handshake-{word}"


def allocated_key(word: str) -> str:
    return f"hami.io/{word}-devices-allocated"


def to_allocate_key(word: str) -> str:
    return f"hami.io/{word}-devices-to-allocate"


# --------------------------------------------------------------------------------------------- engine
def plugin_manager() -> Any:
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_ascend.plugin])


def make_engine(vnpus: Mapping[str, Any] | None = None, *, scheduler: Mapping[str, Any] | None = None,
                clock: Any = None) -> Engine:
    """An engine with only the built-in plugins and hami-ascend (chart defaults unless ``vnpus`` is given)."""
    config: dict[str, Any] = {"vnpus": dict(vnpus) if vnpus is not None else None}
    if scheduler is not None:
        config["scheduler"] = dict(scheduler)
    return Engine(config, plugins=plugin_manager(), clock=clock if clock is not None else Clock())


def chart_chip(word: str) -> ChipConfig:
    return next(c for c in CHART_CONFIGS if c.common_word == word)


def chip_section(word: str, **overrides: Any) -> dict[str, Any]:
    """One ``configs[]`` entry: the chart's entry for ``word`` with camelCase ``overrides``."""
    entry = chart_chip(word).model_dump(by_alias=True)
    entry.update(overrides)
    return entry


def make_backend(word: str = "Ascend910A", *, hami_vnpu_core: bool = False, **overrides: Any) -> DeviceBackend:
    """The backend of one chip (chart defaults with camelCase ``overrides``)."""
    cfg = parse_config({"hamiVnpuCore": hami_vnpu_core, "configs": [chip_section(word, **overrides)]})
    (backend,) = npu.backends(cfg)
    return backend


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


def npu_container(word: str = "Ascend910A", count: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, name: str = "c") -> dict[str, Any]:
    """A container with Ascend limits for chip ``word`` (values as strings, as in Kubernetes JSON)."""
    limits = {res(word): str(count)}
    if mem is not None:
        limits[res(word, "memory")] = str(mem)
    if cores is not None:
        limits[res(word, "core")] = str(cores)
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


def running_pod(name: str, node: str, word: str, allocated: str, *, containers: int = 1,
                annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the chip's allocated annotation."""
    annos = {VGPU_NODE: node, allocated_key(word): allocated, **(annotations or {})}
    pod = make_pod(*(container(f"c{i}") for i in range(containers)), name=name, annotations=annos, nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


# --------------------------------------------------------------------------------------------- nodes
def reg(id: str, *, index: int = 0, count: int = 4, devmem: int = 32768, devcore: int = 30,
        type: str = "Ascend910A", health: bool = True, network: int | None = None,
        **extra: Any) -> dict[str, Any]:
    """One device as Project-HAMi/ascend-device-plugin registers it (``custominfo.NetworkID`` if given)."""
    out: dict[str, Any] = {"id": id, "index": index, "count": count, "devmem": devmem, "devcore": devcore,
                           "type": type, "health": health}
    if network is not None:
        out["custominfo"] = {"NetworkID": network}
    out.update(extra)
    return out


def chips(word: str, n: int, *, devmem: int, devcore: int, count: int = 4, network: bool = False,
          prefix: str = "npu") -> list[dict[str, Any]]:
    """``n`` chips of one model, indexed 0..n-1; with ``network``, chips 0-3 on NetworkID 0 and 4-7 on 1."""
    return [reg(f"{prefix}-{i}", index=i, count=count, devmem=devmem, devcore=devcore, type=word,
                network=(i // 4) if network else None) for i in range(n)]


def make_node(name: str, registrations: Mapping[str, Sequence[Mapping[str, Any]] | str] | None = None, *,
              annotations: Mapping[str, str] | None = None,
              allocatable: Mapping[str, int | str] | None = None) -> dict[str, Any]:
    """A Node with one registration annotation per common word (a device list, or the raw text)."""
    annos: dict[str, str] = {}
    for word, devices in (registrations or {}).items():
        annos[register_key(word)] = devices if isinstance(devices, str) else json.dumps(list(devices))
        annos[handshake_key(word)] = "Reported_2025.06.15 12:00:00"
    annos.update(annotations or {})
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


def usage(id: str, *, index: int = 0, count: int = 4, totalmem: int = 32000, totalcore: int = 20, used: int = 0,
          usedmem: int = 0, usedcores: int = 0, type: str = "Ascend910A", health: bool = True,
          custom_info: Mapping[str, Any] | None = None, network: int | None = None) -> DeviceUsage:
    """A device with its usage, as HAMi's ``DeviceUsage``."""
    if network is not None:
        custom_info = {"NetworkID": network}
    info = DeviceInfo(id=id, index=index, count=count, devmem=totalmem, devcore=totalcore, type=type,
                      health=health, custom_info=custom_info, vendor=type)
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, *, word: str = "Ascend910A",
            pct: int | None = None) -> DeviceRequest:
    """An Ascend request as ``GenerateResourceRequests`` builds it (pct 100 without memory, else 0)."""
    return DeviceRequest(word, nums, memreq, (100 if memreq == 0 else 0) if pct is None else pct, coresreq)


def gpu_policy(gpu: str = "spread", *, node: str = "binpack") -> GpuPolicy:
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=tuple(t.strip() for t in gpu.split(",") if t.strip()))


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, backend: DeviceBackend | None = None,
        pod_annotations: Mapping[str, str] | None = None, node_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None) -> FitResult:
    """``hami_ascend.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    backend = backend or make_backend(req.backend)
    pod = make_pod(container(), annotations=pod_annotations)
    cand = FitCandidate(FakeNode(annotations=dict(node_annotations or {})), list(devices), {})
    results = npu.filter_nodes(backend, pod, req, [cand], policy or gpu_policy())
    assert len(results) == 1
    return results[0]


def chosen(result: FitResult) -> list[str]:
    """UUIDs of the devices a successful fit chose, in order."""
    assert result.ok, result.reason
    return [d.uuid for d in result.devices]
