"""Hook implementations for the MetaX backends: thin adapters over :mod:`hami_metax.backend`.

Every hook answers ``None`` for backends this plugin did not register.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hami_core import hookimpl
from hami_core.engine.cycle import NEUTRAL_SCORE_FACTOR
from hami_core.engine.pods import annotations as annotations_of
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
from hami_metax import backend as mx
from hami_metax.config import SECTION, parse_config


def _is_gpu(backend: DeviceBackend) -> bool:
    return backend.vendor == mx.VENDOR and backend.name == mx.GPU_WORD


def _is_sgpu(backend: DeviceBackend) -> bool:
    return backend.vendor == mx.VENDOR and backend.name == mx.SGPU_WORD


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DeviceBackend]:
    if SECTION not in config:
        return []
    return mx.make_backends(parse_config(config[SECTION]))


@hookimpl
def hami_node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo] | None:
    if _is_gpu(backend):
        return mx.gpu_node_devices(backend, node)
    if _is_sgpu(backend):
        return mx.sgpu_node_devices(backend, node, backend.config.state)
    return None


@hookimpl
def hami_node_health(backend: DeviceBackend, node: Mapping[str, Any],
                     devices: Sequence[DeviceInfo]) -> HealthReport | None:
    if _is_gpu(backend):
        return mx.gpu_health(backend, node)
    if _is_sgpu(backend):
        return mx.sgpu_health(backend, node, devices)
    return None


@hookimpl
def hami_mutate_container(backend: DeviceBackend, pod: dict[str, Any], container: dict[str, Any]) -> Mutation | None:
    if _is_gpu(backend):
        return Mutation(mx.gpu_mutate(backend, container))
    if _is_sgpu(backend):
        return Mutation(mx.sgpu_mutate(backend, pod, container))
    return None


@hookimpl
def hami_container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    if _is_gpu(backend):
        return mx.gpu_request(backend, container)
    if _is_sgpu(backend):
        return mx.sgpu_request(backend, container)
    return None


@hookimpl
def hami_filter_nodes(backend: DeviceBackend, pod: Mapping[str, Any], request: DeviceRequest,
                      candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult] | None:
    if _is_gpu(backend):
        return mx.gpu_filter_nodes(request, candidates)
    if _is_sgpu(backend):
        return mx.sgpu_filter_nodes(backend, pod, request, candidates, policy)
    return None


@hookimpl
def hami_score_nodes(pod: Mapping[str, Any], candidates: Sequence[ScoreCandidate],
                     policy: GpuPolicy) -> list[NodeScore | None]:
    """MetaX GPU's raw score plus MetaX sGPU's policy-neutral one, per candidate (None without either)."""
    annotations = annotations_of(pod)
    out: list[NodeScore | None] = []
    for cand in candidates:
        gpu = cand.assignment.get(mx.GPU_WORD, ())
        sgpu = cand.assignment.get(mx.SGPU_WORD, ())
        if not any(gpu) and not any(sgpu):
            out.append(None)
            continue
        raw = mx.gpu_score(cand.node.annotations, gpu, policy.node) if any(gpu) else 0.0
        if not any(sgpu):
            out.append(NodeScore(raw))
            continue
        neutral = mx.sgpu_score(annotations, sgpu, cand.previous.get(mx.SGPU_WORD, ()))
        if not any(gpu):
            out.append(NodeScore(neutral, neutral=True))
        else:
            # One answer per node: apply the engine's neutral factor here to combine both backends.
            sign = -NEUTRAL_SCORE_FACTOR if policy.node == "spread" else NEUTRAL_SCORE_FACTOR
            out.append(NodeScore(raw + neutral * sign))
    return out


@hookimpl
def hami_allocation_annotations(backend: DeviceBackend, pod: Mapping[str, Any], devices: PodSingleDevice,
                                now: float) -> dict[str, str] | None:
    if not _is_sgpu(backend):
        return None
    whole = int(now)  # split first: a float cannot hold today's Unix time in nanoseconds exactly
    return mx.sgpu_annotations(backend, pod, devices, now_ns=whole * 1_000_000_000 + round((now - whole) * 1e9))


@hookimpl
def hami_decode_allocation(backend: DeviceBackend, pod: Mapping[str, Any]) -> PodSingleDevice | None:
    return mx.sgpu_decode(backend, pod) if _is_sgpu(backend) else None
