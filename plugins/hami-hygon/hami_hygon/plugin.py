"""Hook implementations for the Hygon DCU backend: thin adapters over :mod:`hami_hygon.backend`.

Health (the generic handshake rule), allocation annotations, allocation decoding, the node lock and
the node score come from hami-core's built-in plugins, driven by the backend's annotation keys.
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
    Mutation,
)
from hami_hygon import backend as dcu
from hami_hygon.config import parse_config


def _mine(backend: DeviceBackend) -> bool:
    return backend.vendor == dcu.VENDOR and backend.name == dcu.COMMON_WORD


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    """One DCU backend when the ``hygon:`` section is present (``None``/``{}`` = chart defaults)."""
    if "hygon" not in config:
        return []
    return [dcu.make_backend(parse_config(config["hygon"]))]


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    return dcu.node_devices(backend, node) if _mine(backend) else None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, container: dict[str, Any]) -> Mutation | None:
    return Mutation(dcu.mutate_container(backend, container)) if _mine(backend) else None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    return dcu.container_request(backend, container) if _mine(backend) else None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult] | None:
    return dcu.filter_nodes(backend, pod, request, candidates, policy) if _mine(backend) else None
