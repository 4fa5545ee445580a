"""Hook implementations for the Kunlunxin backends: thin adapters over :mod:`hami_kunlun.backend`.

Not implemented on purpose (HAMi's defaults are Kunlunxin's behaviour): ``hami_node_lock`` (``kunlun``
declares no lock annotation; ``XPU`` uses the shared ``hami.io/mutex.lock`` for app containers, which the
default lock plugin gives), ``hami_node_removed`` (the engine deletes the XPU handshake on cleanup) and
``hami_decode_allocation`` (the core decodes the allocated keys).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core import hookimpl
from hami_core.plugins.types import (
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    Mutation,
    NodeScore,
    PodSingleDevice,
    ScoreCandidate,
)
from hami_kunlun import backend as kl
from hami_kunlun.config import SECTION, parse_config


def _which(backend: DeviceBackend) -> str | None:
    """``kunlun``/``XPU`` when the backend is one of ours, else ``None``."""
    if backend.vendor != kl.VENDOR or backend.name not in (kl.KUNLUN, kl.XPU):
        return None
    return backend.name


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    """``kunlun`` and ``XPU`` when the config has a ``kunlun:`` section (``None``/``{}`` = defaults)."""
    if SECTION not in config:
        return []
    return kl.make_backends(parse_config(config[SECTION]))


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    which = _which(backend)
    if which == kl.KUNLUN:
        return kl.kunlun_node_devices(backend, node)
    if which == kl.XPU:
        return kl.xpu_node_devices(backend, node)
    return None


@hookimpl
def hami_node_health(backend: DeviceBackend) -> HealthReport | None:
    """HAMi ``KunlunDevices.CheckHealth`` is always ``(true, true)``; ``XPU`` uses the generic handshake."""
    return HealthReport(True, True) if _which(backend) == kl.KUNLUN else None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, container: dict[str, Any]) -> Mutation | None:
    which = _which(backend)
    if which == kl.KUNLUN:
        return Mutation(kl.kunlun_mutate(backend, container))
    if which == kl.XPU:
        return Mutation(kl.xpu_mutate(backend, container))
    return None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    which = _which(backend)
    if which == kl.KUNLUN:
        return kl.kunlun_request(backend, container)
    if which == kl.XPU:
        return kl.xpu_request(backend, container)
    return None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult] | None:
    which = _which(backend)
    if which == kl.KUNLUN:
        return kl.kunlun_filter(pod, request, candidates, policy)
    if which == kl.XPU:
        return kl.xpu_filter(pod, request, candidates, policy)
    return None


@hookimpl
def hami_score_nodes(candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None]:
    """HAMi ``KunlunDevices.ScoreNode`` (raw); ``XPU``'s ``ScoreNode`` is 0, so it adds nothing."""
    return kl.kunlun_score(candidates)


@hookimpl
def hami_allocation_annotations(backend: DeviceBackend, devices: PodSingleDevice) -> dict[str, str] | None:
    """``BAIDU_COM_DEVICE_IDX`` for whole cards; the core's codec writes the allocated keys."""
    return kl.kunlun_annotations(devices) if _which(backend) == kl.KUNLUN else None
