"""Hook implementations for the Ascend backends: thin adapters over :mod:`hami_ascend.backend`.

The pod allocation codec (to-allocate/allocated keys), the node lock
(``hami.io/mutex.lock`` when an app container requests the chip) and NodeCleanUp come from hami-core's
built-in plugins, driven by the annotation keys each backend declares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_ascend import backend as npu
from hami_ascend.config import SECTION, BackendConfig, parse_config
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


def _mine(backend: DeviceBackend) -> bool:
    return backend.vendor == npu.VENDOR and isinstance(backend.config, BackendConfig)


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    if SECTION not in config:
        return []
    return npu.backends(parse_config(config[SECTION]))


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    return npu.node_devices(backend, node) if _mine(backend) else None


@hookimpl
def hami_node_health(backend: DeviceBackend, node: Mapping[str, Any], devices: Sequence[DeviceInfo],
                     now: float) -> HealthReport | None:
    return npu.node_health(backend, node, devices, now) if _mine(backend) else None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> Mutation | None:
    return Mutation(npu.mutate_container(backend, pod, container)) if _mine(backend) else None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    return npu.container_request(backend, container) if _mine(backend) else None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult] | None:
    return npu.filter_nodes(backend, pod, request, candidates, policy) if _mine(backend) else None


@hookimpl
def hami_score_nodes(candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None] | None:
    scores = npu.score_nodes(candidates)
    return scores if any(s is not None for s in scores) else None


@hookimpl
def hami_allocation_annotations(backend: DeviceBackend, pod: Mapping[str, Any], devices: PodSingleDevice,
                                now: float) -> dict[str, str] | None:
    return npu.allocation_annotations(backend, pod, devices, now) if _mine(backend) else None
