"""Builders for the hami-biren tests: Biren's defaults over :mod:`hami_core.testing`'s builders.

Biren devices are registered by the biren-device-plugin as a JSON list (``hami.io/node-biren-register``): one entry
per card, or per SVI instance of a card split in 2 or 4, each with split count 1. The vendor-neutral pieces
(``Clock``, ``chosen``, ``requesting``, ``gpu_policy``...) come from the kit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_biren.plugin
from hami_biren.backend import COMMON_WORD, BirenBackend
from hami_biren.config import BirenConfig
from hami_core import testing as kit
from hami_core.plugins.types import DeviceRequest, DeviceUsage, FitResult, GpuPolicy, ResourceNames
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.testing import requesting as requesting
from hami_core.wire import keys

GPU = "birentech.com/gpu"
BIREN_RESOURCES = ResourceNames(GPU)
REGISTER = "hami.io/node-biren-register"
HANDSHAKE = "hami.io/node-handshake-biren"
TO_ALLOCATE = "hami.io/Biren-devices-to-allocate"
ALLOCATED = "hami.io/Biren-devices-allocated"
USE_UUID = "birentech.com/use-gpuuuid"
NOUSE_UUID = "birentech.com/nouse-gpuuuid"
VGPU_NODE = keys.VGPU_NODE
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_LOCK = "hami.io/mutex.lock"
#: The memory the device plugin registers for a whole card (its ``Memory`` constant, MiB).
CARD_MIB = 65024

# --------------------------------------------------------------------------------------------- engine
BIREN = kit.VendorKit(hami_biren.plugin, "biren", BirenConfig)
#: A plugin manager with the built-ins, hami-biren and ``*extra`` plugins; an engine on a ``biren:`` section (the
#: defaults when ``None``) at a fake time; the section validated as the plugin validates it.
plugin_manager, make_engine, parse_config = BIREN.plugin_manager, BIREN.engine, BIREN.parse_config
container, make_pod = BIREN.container, BIREN.pod


def make_backend(**biren: Any) -> BirenBackend:
    """The Biren backend for a ``biren:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return BirenBackend.from_config(parse_config(biren))


def gpu_container(name: str = "c", num: int | str = 1) -> dict[str, Any]:
    """A container with ``birentech.com/gpu: num`` in its limits (as a string, as in Kubernetes JSON)."""
    return kit.device_container(BIREN_RESOURCES, num, name=name)


def running_pod(name: str, node: str, allocated: str) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the Biren allocated annotation."""
    return kit.running_pod(name, node, {ALLOCATED: allocated}, uid=f"uid-{name}", containers=[gpu_container("c0")])


# --------------------------------------------------------------------------------------------- nodes
def device(id: str, *, index: int = 0, count: int = 1, devmem: int = CARD_MIB, type: str = COMMON_WORD,
           health: bool = True, **extra: Any) -> dict[str, Any]:
    """One registered device as the device plugin writes it (no ``devcore``: HAMi reads it as 100)."""
    return {"id": id, "index": index, "count": count, "devmem": devmem, "type": type, "health": health, **extra}


def make_node(name: str, register: str | Sequence[Mapping[str, Any]] | None = None, *,
              annotations: Mapping[str, str] | None = None, allocatable: int | str | None = None) -> dict[str, Any]:
    """A Node with ``hami.io/node-biren-register`` = ``register`` (a list is JSON-encoded; ``None`` leaves it out).

    ``allocatable`` sets ``status.allocatable[birentech.com/gpu]``.
    """
    annos: dict[str, str] = {}
    if register is not None:
        annos[REGISTER] = register if isinstance(register, str) else json.dumps(list(register))
    annos.update(annotations or {})
    return kit.node(name, annotations=annos, allocatable=None if allocatable is None else {GPU: allocatable})


def biren_node(name: str, n: int = 2, **dev: Any) -> dict[str, Any]:
    """A node with ``n`` whole cards ``<name>-card_<i>``, index = position, ``n`` allocatable."""
    return make_node(name, [device(f"{name}-card_{i}", index=i, **dev) for i in range(n)], allocatable=n)


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: an idle healthy ``Biren`` device, split count 1, no memory, no cores: the
#: zero fields of HAMi's Go fit tests).
usage = partial(kit.usage, vendor=COMMON_WORD, count=1, totalmem=0, totalcore=0)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int = 0, type: str = COMMON_WORD) -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: BirenBackend | None = None) -> FitResult:
    """:meth:`BirenBackend.hami_filter_nodes` on one node whose devices are given in HAMi's order (the preferred
    device last: the fit walks from the last one to the first, like HAMi's ``slices.Backward``)."""
    biren = backend or make_backend()
    return kit.fit_one(biren.hami_filter_nodes, biren, devices, req, pod_annotations=pod_annotations, policy=policy)


def policy_from(pod_annotations: Mapping[str, str]) -> GpuPolicy:
    """The GPU policy the engine derives from ``hami.io/gpu-scheduler-policy`` (spread when absent)."""
    return gpu_policy(pod_annotations.get(GPU_POLICY, "spread"))
