"""Hook implementations for the Moore Threads backend: thin adapters over :mod:`hami_mthreads.backend`.

Not implemented on purpose (HAMi's defaults are Mthreads' behaviour): ``hami_node_lock`` (no lock: the
backend has no ``lock_annotation``), ``hami_score_nodes`` (``ScoreNode`` is 0), ``hami_node_removed``
(``NodeCleanUp`` does nothing) and ``hami_decode_allocation`` (the core decodes the allocated key).
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
    PodSingleDevice,
)
from hami_mthreads import backend as mt
from hami_mthreads.config import SECTION, parse_config


def _mine(backend: DeviceBackend) -> bool:
    return backend.vendor == mt.VENDOR and backend.name == mt.COMMON_WORD


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    """One ``Mthreads`` backend when the config has an ``mthreads:`` section (``None``/``{}`` = defaults)."""
    if SECTION not in config:
        return []
    return [mt.make_backend(parse_config(config[SECTION]))]


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    return mt.node_devices(backend, node) if _mine(backend) else None


@hookimpl
def hami_node_health(backend: DeviceBackend) -> HealthReport | None:
    """HAMi ``CheckHealth`` for Mthreads is always ``(true, true)``: healthy, refresh every time."""
    return HealthReport(True, True) if _mine(backend) else None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> Mutation | None:
    return Mutation(mt.mutate_container(backend, pod, container)) if _mine(backend) else None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    return mt.container_request(backend, container) if _mine(backend) else None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult] | None:
    return mt.filter_nodes(pod, request, candidates, policy) if _mine(backend) else None


@hookimpl
def hami_allocation_annotations(backend: DeviceBackend, devices: PodSingleDevice, node: str,
                                now: float) -> dict[str, str] | None:
    """``mthreads.com/gpu-index``, ``predicate-time`` and ``predicate-node``; the core's codec adds the
    allocated key (and no to-allocate key, since the backend declares none)."""
    return mt.allocation_annotations(devices, node, now) if _mine(backend) else None
