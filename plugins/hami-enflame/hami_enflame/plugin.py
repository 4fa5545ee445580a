"""Hook implementations for the Enflame backends: thin adapters over :mod:`hami_enflame.backend`.

Every hook answers ``None`` for backends this plugin did not register. Neither backend locks the node
nor scores it (HAMi's ``ScoreNode`` is 0 for both), so the default lock and score plugins apply.
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
from hami_enflame import backend as ef
from hami_enflame.config import SECTION, parse_config


def _is_gcu(backend: DeviceBackend) -> bool:
    return backend.vendor == ef.VENDOR and backend.name == ef.GCU_WORD


def _is_drs(backend: DeviceBackend) -> bool:
    return backend.vendor == ef.VENDOR and backend.name == ef.DRS_WORD


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    if SECTION not in config:
        return []
    return ef.make_backends(parse_config(config[SECTION]))


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    if _is_gcu(backend):
        return ef.gcu_node_devices(backend, node)
    if _is_drs(backend):
        return ef.drs_node_devices(node)
    return None


@hookimpl
def hami_node_health(backend: DeviceBackend, node: Mapping[str, Any]) -> HealthReport | None:
    if _is_gcu(backend):
        return ef.gcu_health(backend, node)
    if _is_drs(backend):
        return ef.drs_health()
    return None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, container: dict[str, Any]) -> Mutation | None:
    if _is_gcu(backend):
        return Mutation(ef.gcu_mutate(backend, container))
    if _is_drs(backend):
        return Mutation(ef.drs_mutate(backend, container))
    return None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    if _is_gcu(backend):
        return ef.gcu_request(backend, container)
    if _is_drs(backend):
        return ef.drs_request(backend, container)
    return None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult] | None:
    if _is_gcu(backend):
        return ef.gcu_filter_nodes(request, candidates)
    if _is_drs(backend):
        return ef.drs_filter_nodes(pod, request, candidates, policy)
    return None


@hookimpl
def hami_allocation_annotations(backend: DeviceBackend, pod: Mapping[str, Any], devices: PodSingleDevice,
                                now: float) -> dict[str, str] | None:
    if not _is_drs(backend) or not any(devices):
        return None
    whole = int(now)  # split first: a float cannot hold today's Unix time in nanoseconds exactly
    return ef.drs_annotations(pod, devices, whole * 1_000_000_000 + round((now - whole) * 1e9))
