"""Builders for the hami-vastai tests: Vastai's defaults over :mod:`hami_core.testing`'s builders.

A Vastai request is a count of whole devices (cards, or dies in die mode); devices register as a JSON list on
``hami.io/node-va-register``, a die with ``custominfo`` ``{"DeviceStrategy": "die", "AIC": "<card>"}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_vastai.plugin
from hami_core import testing as kit
from hami_core.plugins.types import DeviceRequest, DeviceUsage, FitResult, GpuPolicy
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.testing import requesting as requesting
from hami_core.wire import keys
from hami_vastai.backend import COMMON_WORD, VastaiBackend
from hami_vastai.config import VastaiConfig

VA = "vastaitech.com/va"
REGISTER = "hami.io/node-va-register"
HANDSHAKE = "hami.io/node-handshake-va"
TO_ALLOCATE = "hami.io/Vastai-devices-to-allocate"
ALLOCATED = "hami.io/Vastai-devices-allocated"
USE_UUID = "vastaitech.com/use-gpuuuid"
NOUSE_UUID = "vastaitech.com/nouse-gpuuuid"
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY
NODE_LOCK = "hami.io/mutex.lock"
#: A die's ``custominfo``.
DIE = "die"


# --------------------------------------------------------------------------------------------- engine
VASTAI = kit.VendorKit(hami_vastai.plugin, "vastai", VastaiConfig)
plugin_manager, make_engine, parse_config = VASTAI.plugin_manager, VASTAI.engine, VASTAI.parse_config


def make_backend(**vastai: Any) -> VastaiBackend:
    """The Vastai backend for a ``vastai:`` section given as keyword arguments (HAMi's camelCase keys)."""
    return VastaiBackend.from_config(parse_config(vastai))


# --------------------------------------------------------------------------------------------- pods
container, make_pod = VASTAI.container, VASTAI.pod


def va_container(name: str = "c", num: int | str = 1) -> dict[str, Any]:
    """A container with ``vastaitech.com/va: num`` in its limits (as a string, as in Kubernetes JSON)."""
    return kit.container(name, limits={VA: str(num)})


def running_pod(name: str, node: str, allocated: str, *, containers: int = 1) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the Vastai allocated annotation."""
    return kit.running_pod(name, node, {ALLOCATED: allocated}, uid=f"uid-{name}",
                           containers=[va_container(f"c{i}") for i in range(containers)])


# --------------------------------------------------------------------------------------------- nodes
def device(id: str, *, count: int = 1, devmem: int = 32768, health: bool = True, aic: str | None = None,
           strategy: str | None = None, **extra: Any) -> dict[str, Any]:
    """One registered device as the Vastai device plugin writes it; ``aic`` makes it a die of card ``aic``."""
    out: dict[str, Any] = {"id": id, "count": count, "devmem": devmem, "type": COMMON_WORD, "health": health, **extra}
    if aic is not None:
        out["custominfo"] = {"DeviceStrategy": strategy or DIE, "AIC": aic}
    return out


def make_node(name: str, register: str | Sequence[Mapping[str, Any]] | None = None, *,
              annotations: Mapping[str, str] | None = None, allocatable: int | None = None) -> dict[str, Any]:
    """A Node whose ``hami.io/node-va-register`` is ``register`` (a list is JSON-encoded; ``None`` leaves it out).

    ``allocatable`` sets ``status.allocatable[vastaitech.com/va]``.
    """
    annos: dict[str, str] = {}
    if register is not None:
        annos[REGISTER] = register if isinstance(register, str) else json.dumps(list(register))
    annos.update(annotations or {})
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
                            "status": {}}
    if allocatable is not None:
        node["status"]["allocatable"] = {VA: str(allocatable)}
    return node


def card_node(name: str, n: int = 2, **dev: Any) -> dict[str, Any]:
    """A node with ``n`` whole cards ``<name>-va-<i>``."""
    return make_node(name, [device(f"{name}-va-{i}", **dev) for i in range(n)], allocatable=n)


def die_node(name: str, cards: Sequence[int], **dev: Any) -> dict[str, Any]:
    """A die-mode node: ``cards[c]`` dies on card ``c`` (AIC ``"<c>"``), ids ``<name>-<c>-<d>``."""
    dies = [device(f"{name}-{c}-{d}", aic=str(c), **dev) for c, n in enumerate(cards) for d in range(n)]
    return make_node(name, dies, allocatable=len(dies))


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: HAMi's Go test card, split count 1).
usage = partial(kit.usage, vendor=COMMON_WORD, count=1, totalmem=0, totalcore=0)


def die(id: str, aic: str, *, index: int = 0, used: int = 0, count: int = 1, **kw: Any) -> DeviceUsage:
    """A die of card ``aic`` (``custominfo`` ``{"DeviceStrategy": "die", "AIC": aic}``)."""
    return usage(id, index=index, used=used, count=count, custom_info={"DeviceStrategy": DIE, "AIC": aic}, **kw)


def request(nums: int = 1, type: str = COMMON_WORD, *, memreq: int = 0, coresreq: int = 0,
            pct: int = 0) -> DeviceRequest:
    return kit.request(type, nums, memreq, coresreq, pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: VastaiBackend | None = None) -> FitResult:
    """:meth:`VastaiBackend.hami_filter_nodes` on one node whose devices are in HAMi's sorted order (the policy
    comes from ``hami.io/gpu-scheduler-policy`` in ``pod_annotations`` unless given)."""
    va = backend or make_backend()
    annos = dict(pod_annotations or {})
    if policy is None:
        policy = gpu_policy(annos.get(GPU_POLICY, "spread"))
    return kit.fit_one(va.hami_filter_nodes, va, devices, req, pod_annotations=annos, policy=policy)
