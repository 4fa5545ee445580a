"""Hook implementations for the Iluvatar backends: thin adapters over :mod:`hami_iluvatar.backend`.

Health (the generic handshake rule on ``hami.io/node-handshake-<commonWord>``), the allocation
annotations, their decoding and the shared node lock come from hami-core's built-in plugins; HAMi's
Iluvatar ``ScoreNode`` is 0, so no score hook is needed.
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
from hami_iluvatar import backend as ilu
from hami_iluvatar.config import SECTION, IluvatarChipConfig, parse_config


def _mine(backend: DeviceBackend) -> bool:
    return backend.vendor == ilu.VENDOR and isinstance(backend.config, IluvatarChipConfig)


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    if SECTION not in config:
        return []
    return ilu.make_backends(parse_config(config[SECTION]))


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    return ilu.node_devices(backend, node) if _mine(backend) else None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> Mutation | None:
    return Mutation(ilu.mutate_container(backend, pod, container)) if _mine(backend) else None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    return ilu.container_request(backend, container) if _mine(backend) else None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult] | None:
    return ilu.filter_nodes(backend, pod, request, candidates, policy) if _mine(backend) else None
