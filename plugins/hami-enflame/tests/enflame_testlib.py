"""Builders for the hami-enflame tests: Kubernetes Node/Pod JSON, engines with a fake clock, fit inputs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import hami_enflame.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import DeviceBackend, DeviceInfo, DeviceUsage
from hami_core.wire import keys
from hami_enflame import backend as ef
from hami_enflame.config import parse_config

#: The fake clock (Unix seconds).
T0 = 1_750_000_000.0

GCU = "enflame.com/gcu"
DRS = "enflame.com/drs-gcu"
MEM = "enflame.com/gcu-memory"
CORE = "enflame.com/gcu-core"
VGPU_NODE = keys.VGPU_NODE
#: The registration of the spec's example (one card of 6 slices, three profiles).
PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}


def plugin_manager() -> Any:
    return get_plugin_manager(load_entrypoints=False, plugins=[hami_enflame.plugin])


def make_engine(enflame: Mapping[str, Any] | None = None) -> Engine:
    """An engine with only the built-in plugins and hami-enflame, at :data:`T0`."""
    return Engine({"enflame": dict(enflame or {})}, plugins=plugin_manager(), clock=lambda: T0)


def backends(**enflame: Any) -> tuple[DeviceBackend, DeviceBackend]:
    """(GCU, Enflame) backends of one ``enflame:`` section given as keyword arguments."""
    gcu, drs = ef.make_backends(parse_config(enflame))
    return gcu, drs


def container(name: str = "c", *, limits: Mapping[str, Any] | None = None,
              requests: Mapping[str, Any] | None = None) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = dict(limits)
    if requests is not None:
        resources["requests"] = dict(requests)
    if resources:
        ctr["resources"] = resources
    return ctr


def make_pod(*containers: Mapping[str, Any], init: Sequence[Mapping[str, Any]] = (), name: str = "p",
             annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    spec: dict[str, Any] = {"containers": [dict(c) for c in containers]}
    if init:
        spec["initContainers"] = [dict(c) for c in init]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def running_pod(name: str, node: str, key: str, allocated: str, containers: int = 1) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus an allocated annotation."""
    pod = make_pod(*(container(f"c{i}") for i in range(containers)), name=name,
                   annotations={VGPU_NODE: node, key: allocated})
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    return pod


def drs_capacity(devices: Sequence[tuple[str, str, Any]] = (("0", "0", 6),),
                 profiles: Mapping[str, str] | None = None) -> str:
    """``enflame.com/gcu-drs-capacity`` JSON from ``(index, minor, capacity)`` triples."""
    return json.dumps({"devices": [{"index": i, "minor": m, "capacity": c} for i, m, c in devices],
                       "profiles": dict(PROFILES if profiles is None else profiles)})


def drs_node(name: str, raw: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """A Node registered by the Enflame DRS device plugin (``raw`` replaces the JSON text)."""
    annos = {ef.DRS_CAPACITY: raw if raw is not None else drs_capacity(**kwargs)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos}, "status": {}}


def gcu_node(name: str, capacity: int | str | None = 4) -> dict[str, Any]:
    """A Node whose Enflame GCU device plugin advertises ``capacity`` cards."""
    status: dict[str, Any] = {}
    if capacity is not None:
        status = {"capacity": {GCU: str(capacity)}, "allocatable": {GCU: str(capacity)}}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": {}}, "status": status}


def drs_usage(id: str, *, index: int = 0, count: int = 6, max_gb: int = 40, used: int = 0, usedmem: int = 0,
              usedcores: int = 0, health: bool = True, profiles: Mapping[str, str] | None = None) -> DeviceUsage:
    """A DRS device with its usage (the spec's card: 6 slices, 40 GB, profiles 1g/3g/6g)."""
    info = DeviceInfo(id=id, index=index, count=count, devmem=max_gb * 1024, devcore=100, type=ef.DRS_WORD,
                      health=health, vendor=ef.DRS_WORD,
                      custom_info={"minor": str(index), "index": str(index),
                                   "profiles": dict(PROFILES if profiles is None else profiles), "maxSlice": 6})
    return DeviceUsage(info, used=used, usedmem=usedmem, usedcores=usedcores)


def gcu_usage(id: str, *, index: int = 0, used: int = 0, health: bool = True) -> DeviceUsage:
    info = DeviceInfo(id=id, index=index, count=1, devmem=100, devcore=100, type=ef.GCU_WORD, health=health,
                      vendor=ef.GCU_WORD)
    return DeviceUsage(info, used=used, usedmem=100 * used, usedcores=100 * used)
