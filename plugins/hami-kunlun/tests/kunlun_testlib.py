"""Builders for the hami-kunlun tests: engines at a fake time, Kunlunxin nodes and pods, fit inputs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hami_kunlun.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import DeviceInfo, DeviceRequest, DeviceUsage, FitCandidate, FitResult, GpuPolicy
from hami_core.testing import container, node, pod
from hami_core.wire import keys
from hami_kunlun import backend as kl

T0 = 1_750_000_000.0
XPU_RES = "kunlunxin.com/xpu"
VXPU = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"

__all__ = ["container", "node", "pod"]


def make_engine(section: Mapping[str, Any] | None = None) -> Engine:
    pm = get_plugin_manager(load_entrypoints=False, plugins=[hami_kunlun.plugin])
    return Engine({"kunlun": dict(section or {})}, plugins=pm, clock=lambda: T0)


def kunlun_node(name: str = "kl-node", cards: int | str = 8) -> dict[str, Any]:
    return node(name, allocatable={XPU_RES: cards})


def xpu_register(*cards: tuple[str, int], count: int = 4, devmem: int = 98304) -> str:
    return json.dumps([{"id": cid, "index": idx, "count": count, "devmem": devmem, "devcore": 100, "type": "XPU",
                        "health": True} for cid, idx in cards])


def xpu_node(name: str = "xpu-node", n: int = 8, **kw: Any) -> dict[str, Any]:
    return node(name, annotations={kl.XPU_REGISTER: xpu_register(*((f"XPU-{i}", i) for i in range(n)), **kw)},
                allocatable={VXPU: n * 4})


def running(name: str, node_name: str, key: str, value: str) -> dict[str, Any]:
    return pod(container(), name=name, node_name=node_name, phase="Running",
               annotations={keys.VGPU_NODE: node_name, key: value})


@dataclass
class FakeNode:
    name: str = "node"
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    devices: Mapping[str, Sequence[DeviceUsage]] = field(default_factory=dict)


def usages(used: Sequence[int] = (), *, n: int = 8, usedmem: Mapping[int, int] | None = None,
           counts: Mapping[int, int] | None = None, typ: str = "kunlun", unhealthy: Sequence[int] = ()
           ) -> list[DeviceUsage]:
    """n devices ``xpu-<i>`` (index i); ``used`` lists busy ones (1 task each unless ``counts`` says)."""
    out = []
    for i in range(n):
        info = DeviceInfo(id=f"xpu-{i}", index=i, count=100, devmem=98304, devcore=100, type=typ,
                          health=i not in unhealthy)
        u = (counts or {}).get(i, 1 if i in used else 0)
        mem = (usedmem or {}).get(i, 98304 if (u and typ == "kunlun") else 0)
        out.append(DeviceUsage(info, used=u, usedmem=mem))
    return out


def fit(devs: Sequence[DeviceUsage], req: DeviceRequest, *, annotations: Mapping[str, str] | None = None,
        gpu: str = "spread") -> FitResult:
    p = pod(container(), annotations=annotations)
    cand = FitCandidate(FakeNode(), list(devs), {})
    policy = GpuPolicy(gpu=gpu, gpu_tokens=tuple(gpu.split(",")))
    filt = kl.kunlun_filter if req.backend == kl.KUNLUN else kl.xpu_filter
    (res,) = filt(p, req, [cand], policy)
    return res


def idx(res: FitResult) -> list[int]:
    assert res.ok, res.reason
    return [d.idx for d in res.devices]
