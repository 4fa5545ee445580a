"""Builders for the hami-kunlun tests: the Kunlunxin defaults over :mod:`hami_core.testing`'s builders."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import hami_kunlun.plugin
from hami_core import testing as kit
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceRequest, DeviceUsage, FitResult
from hami_core.testing import T0 as T0
from hami_core.testing import container as container
from hami_core.testing import node as node
from hami_core.testing import pod as pod
from hami_kunlun.config import KunlunConfig
from hami_kunlun.kunlun import KUNLUN, KunlunBackend
from hami_kunlun.xpu import XPU_REGISTER, XpuBackend

XPU_RES = "kunlunxin.com/xpu"
VXPU = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"


def make_engine(section: Mapping[str, Any] | None = None) -> Engine:
    """An engine with only the built-in plugins and hami-kunlun, at :data:`T0`."""
    return kit.engine_with(hami_kunlun.plugin, config={"kunlun": dict(section or {})})


def kunlun_node(name: str = "kl-node", cards: int | str = 8) -> dict[str, Any]:
    return node(name, allocatable={XPU_RES: cards})


def xpu_register(*cards: tuple[str, int], count: int = 4, devmem: int = 98304) -> str:
    return json.dumps([{"id": cid, "index": idx, "count": count, "devmem": devmem, "devcore": 100, "type": "XPU",
                        "health": True} for cid, idx in cards])


def xpu_node(name: str = "xpu-node", n: int = 8, **kw: Any) -> dict[str, Any]:
    return node(name, annotations={XPU_REGISTER: xpu_register(*((f"XPU-{i}", i) for i in range(n)), **kw)},
                allocatable={VXPU: n * 4})


def running(name: str, node_name: str, key: str, value: str) -> dict[str, Any]:
    """A pod placed earlier on ``node_name`` with ``key: value`` (an allocated annotation)."""
    return kit.running_pod(name, node_name, {key: value}, containers=[container()])


def usages(used: Sequence[int] = (), *, n: int = 8, usedmem: Mapping[int, int] | None = None,
           counts: Mapping[int, int] | None = None, typ: str = "kunlun", unhealthy: Sequence[int] = ()
           ) -> list[DeviceUsage]:
    """n devices ``xpu-<i>`` (index i); ``used`` lists busy ones (1 task each unless ``counts`` says)."""
    out = []
    for i in range(n):
        u = (counts or {}).get(i, 1 if i in used else 0)
        mem = (usedmem or {}).get(i, 98304 if (u and typ == "kunlun") else 0)
        out.append(kit.usage(f"xpu-{i}", vendor=typ, index=i, totalmem=98304, health=i not in unhealthy, used=u,
                             usedmem=mem))
    return out


def fit(devs: Sequence[DeviceUsage], req: DeviceRequest, *, annotations: Mapping[str, str] | None = None,
        gpu: str = "spread") -> FitResult:
    """The whole-card or vXPU filter (by ``req.backend``) on one node holding ``devs``."""
    backend = (KunlunBackend if req.backend == KUNLUN else XpuBackend).from_config(KunlunConfig())
    return kit.fit_one(backend.hami_filter_nodes, backend, devs, req, pod_annotations=annotations,
                       policy=kit.gpu_policy(gpu))


def idx(res: FitResult) -> list[int]:
    assert res.ok, res.reason
    return [d.idx for d in res.devices]
