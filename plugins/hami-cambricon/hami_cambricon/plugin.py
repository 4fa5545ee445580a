"""Hook implementations for the Cambricon MLU backends: thin adapters over :mod:`hami_cambricon.backend`.

Every hook returns ``None`` for backends this plugin does not own. HAMi's Cambricon ``ScoreNode`` is 0,
so there is no ``hami_score_nodes`` implementation (which keeps best-first evaluation possible).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_cambricon import backend as mlu
from hami_cambricon.config import SECTION, parse_config
from hami_core import hookimpl
from hami_core.plugins.types import (
    ContainerRequests,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    LockSpec,
    Mutation,
    PodSingleDevice,
    QuotaView,
)


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    if SECTION not in config:
        return []
    return mlu.make_backends(parse_config(config[SECTION]))


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    spec = mlu.spec_of(backend)
    return None if spec is None else mlu.node_devices(spec, node)


@hookimpl
def hami_node_health(backend: DeviceBackend) -> HealthReport | None:
    return None if mlu.spec_of(backend) is None else mlu.node_health()


@hookimpl
def hami_mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> Mutation | None:
    spec = mlu.spec_of(backend)
    return None if spec is None else Mutation(mlu.mutate_container(backend.config, spec, pod, container))


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    spec = mlu.spec_of(backend)
    return None if spec is None else mlu.container_request(spec, container)


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy,
                      quota: QuotaView | None) -> list[FitResult] | None:
    spec = mlu.spec_of(backend)
    if spec is None:
        return None
    return mlu.filter_nodes(backend.config, spec, pod, request, candidates, policy, quotas=mlu.quotas_of(quota))


@hookimpl
def hami_allocation_annotations(backend: DeviceBackend, devices: PodSingleDevice) -> dict[str, str] | None:
    return None if mlu.spec_of(backend) is None else mlu.allocation_annotations(backend.config, devices)


@hookimpl
def hami_node_lock(backend: DeviceBackend, requests: ContainerRequests) -> LockSpec | None:
    spec = mlu.spec_of(backend)
    return None if spec is None else mlu.node_lock(spec, requests)
