"""Builders for the hami-cambricon tests: the Cambricon defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: device memory in MiB, container memory in 256 MiB units, cores in percent of one MLU.
The vendor-neutral pieces (``Clock``, ``FakeNode``, ``chosen``, ``gpu_policy``...) come from the kit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_cambricon.plugin
from hami_cambricon import backend as mlu
from hami_cambricon.config import CambriconConfig, parse_config
from hami_core import testing as kit
from hami_core.engine.facade import Engine
from hami_core.plugins.types import (
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
from hami_core.testing import FakeNode as FakeNode
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.wire import keys

VMLU = "cambricon.com/vmlu"
VMEMORY = "cambricon.com/mlu.smlu.vmemory"
VCORE = "cambricon.com/mlu.smlu.vcore"
#: The count name HAMi's own Cambricon tests configure.
MLU = "cambricon.com/mlu"
TO_ALLOCATE = "hami.io/cambricon-mlu-devices-to-allocate"
ALLOCATED = "hami.io/cambricon-mlu-devices-allocated"
PROFILE = "CAMBRICON_DSMLU_PROFILE"
ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
LOCK = "cambricon.com/dsmlu.lock"
VGPU_NODE = keys.VGPU_NODE
VGPU_TIME = keys.VGPU_TIME
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY

#: Two models, as the README's multi-model example configures them.
MODELS = {"models": [
    {"name": "MLU370", "resourceCountName": "cambricon.com/mlu370.vmlu"},
    {"name": "MLU590", "resourceCountName": "cambricon.com/mlu590.vmlu"},
]}


# --------------------------------------------------------------------------------------------- engine
plugin_manager = partial(kit.plugin_manager, hami_cambricon.plugin)


def make_engine(cambricon: Mapping[str, Any] | None = None, *, clock: Any = None,
                scheduler: Mapping[str, Any] | None = None) -> Engine:
    """An engine with only the built-in plugins and hami-cambricon, at a fake time."""
    section = dict(cambricon) if cambricon is not None else None
    return kit.engine_with(hami_cambricon.plugin, config={"cambricon": section}, scheduler=scheduler, clock=clock)


def config(**section: Any) -> CambriconConfig:
    return parse_config(section)


def backend(name: str = "MLU", **section: Any) -> DeviceBackend:
    """The backend ``name`` for a ``cambricon:`` section given as keyword arguments (HAMi's camelCase keys)."""
    found = [b for b in mlu.make_backends(parse_config(section)) if b.name == name]
    assert len(found) == 1
    return found[0]


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given.
container = partial(kit.container, as_strings=False)


def mlu_container(name: str = "c", count: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, *, count_name: str = VMLU, mem_name: str = VMEMORY,
                  core_name: str = VCORE) -> dict[str, Any]:
    """A container with MLU limits (values as strings, as in Kubernetes JSON); ``mem`` in 256 MiB units."""
    return kit.device_container(ResourceNames(count_name, mem_name, cores=core_name), count, mem, cores, name=name)


def make_pod(*containers: Mapping[str, Any], name: str = "p", uid: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """The kit's pod, named ``p`` with UID ``uid-<name>`` unless given."""
    return kit.pod(*containers, name=name, uid=uid or f"uid-{name}", **kwargs)


def running_pod(name: str, node: str, allocated: str, *, key: str = ALLOCATED, containers: int = 1,
                init: int = 0) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the allocated annotation."""
    return kit.running_pod(name, node, {key: allocated}, uid=f"uid-{name}", containers=containers, init=init)


# --------------------------------------------------------------------------------------------- nodes
def make_node(name: str, cores: int | str | None = None, vmemory: int | str | None = None, *,
              core_name: str = VCORE, mem_name: str = VMEMORY, labels: Mapping[str, str] | None = None,
              annotations: Mapping[str, str] | None = None,
              extra_capacity: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Node as Cambricon's dynamic-smlu device plugin leaves it: MLU cores and memory in ``capacity``."""
    capacity: dict[str, str] = {"cpu": "64", "memory": "256Gi"}
    if cores is not None:
        capacity[core_name] = str(cores)
    if vmemory is not None:
        capacity[mem_name] = str(vmemory)
    capacity.update(extra_capacity or {})
    meta: dict[str, Any] = {"name": name}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "status": {"capacity": capacity, "allocatable": dict(capacity)}}


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: the card of HAMi's Cambricon fit tests, 128 MiB / 100 cores).
usage = partial(kit.usage, vendor="MLU")


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = 0, type: str = "MLU") -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod: Mapping[str, Any] | None = None,
        pod_annotations: Mapping[str, str] | None = None, policy: GpuPolicy | None = None,
        allocated: Mapping[str, Sequence[Sequence[ContainerDevice]]] | None = None,
        quotas: mlu.Quotas | None = None, cfg: CambriconConfig | None = None, name: str = "MLU") -> FitResult:
    """``hami_cambricon.backend.filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    cfg = cfg or parse_config({})
    spec = cfg.spec(name)
    assert spec is not None
    filter_nodes = partial(mlu.filter_nodes, cfg, spec, quotas=quotas)
    return kit.fit_one(filter_nodes, None, devices, req, pod=pod, pod_annotations=pod_annotations, policy=policy,
                       allocated=allocated)
