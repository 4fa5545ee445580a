"""Hook implementations for the ACME NPU: thin adapters over :mod:`hami_acme.backend`.

Every hook except ``hami_device_backends`` is called for every backend of every plugin, so each returns
``None`` for backends it does not own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_acme import backend as acme
from hami_core import hookimpl
from hami_core.plugins.types import (
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    Mutation,
)


def _mine(backend: DeviceBackend) -> bool:
    return backend.vendor == acme.VENDOR and backend.name == acme.COMMON_WORD


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    if acme.VENDOR not in config:
        return []  # not enabled in device-config.yaml
    return [acme.make_backend(acme.parse_config(config[acme.VENDOR]))]


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    return acme.node_devices(backend, node) if _mine(backend) else None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, container: dict[str, Any]) -> Mutation | None:
    return Mutation(acme.requests_card(backend, container)) if _mine(backend) else None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    return acme.container_request(backend, container) if _mine(backend) else None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, request: DeviceRequest, candidates: Sequence[FitCandidate],
                      policy: GpuPolicy) -> list[FitResult] | None:
    return acme.filter_nodes(request, candidates, policy) if _mine(backend) else None
