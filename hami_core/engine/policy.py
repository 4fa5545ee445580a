"""Scheduling policies: the effective per-pod policy, device scores and device ordering (spec §7.1-§7.2)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence

from hami_core.plugins.errors import ConfigError
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, DeviceRequest, DeviceUsage, GpuPolicy
from hami_core.wire import keys
from hami_core.wire.weights import DEFAULT_WEIGHTS, parse_scoring_weights

#: HAMi's own GPU policy tokens; the built-in policy packages add theirs (:func:`gpu_policy_tokens`).
HAMI_GPU_POLICY_TOKENS = frozenset({"binpack", "spread", "numa", "mutex", "topology-aware"})
_CHAIN_TOKENS = ("binpack", "spread", "numa")


@functools.cache
def package_gpu_policies() -> Mapping[str, str]:
    """The built-in policy packages' GPU policy tokens, each with the HAMi device order it starts from
    (:func:`hami_core.policies.gpu_policies`; imported on first use: the packages import this module)."""
    from hami_core.policies import gpu_policies

    return gpu_policies()


def gpu_policy_tokens() -> frozenset[str]:
    """Every GPU policy token a configuration may name: HAMi's and the built-in policy packages'."""
    return HAMI_GPU_POLICY_TOKENS | frozenset(package_gpu_policies())


def split_gpu_policy(value: str) -> tuple[str, ...]:
    """Tokens of a GPU policy string such as ``binpack,numa`` (blank items dropped)."""
    return tuple(t.strip() for t in value.split(",") if t.strip())


def validate_gpu_policy(value: str, *, field: str) -> str:
    """Check a configured GPU policy; raise :class:`ConfigError` naming ``field`` on an unknown token."""
    tokens = split_gpu_policy(value)
    known = gpu_policy_tokens()
    unknown = [t for t in tokens if t not in known]
    if not tokens or unknown:
        raise ConfigError(f"{field}: unknown GPU scheduler policy {value!r} "
                          f"(expected a comma list of {', '.join(sorted(known))})")
    return value


def effective_policy(annotations: Mapping[str, str], *, node_default: str, gpu_default: str,
                     numa_bind: bool = False) -> GpuPolicy:
    """The pod's policy: its annotations over the scheduler defaults.

    Raises :class:`~hami_core.plugins.errors.WireFormatError` for an invalid
    ``hami.io/device-scoring-weights`` (HAMi fails the Filter call for the pod).
    """
    node = annotations.get(keys.NODE_SCHEDULER_POLICY) or node_default
    gpu = annotations.get(keys.GPU_SCHEDULER_POLICY) or gpu_default
    raw_weights = annotations.get(keys.DEVICE_SCORING_WEIGHTS)
    # present but empty is an error, as in HAMi (``GetDeviceScoringWeights`` parses whatever the key holds)
    weights = parse_scoring_weights(raw_weights) if raw_weights is not None else DEFAULT_WEIGHTS
    return GpuPolicy(node=node, gpu=gpu, gpu_tokens=split_gpu_policy(gpu), weights=weights, numa_bind=numa_bind)


def device_score(dev: DeviceUsage, requests: Iterable[DeviceRequest], weights: tuple[int, int, int]) -> float:
    """HAMi's device score (spec §7.1): 10 x weighted slot, core and memory occupancy including the request.

    Only requests whose backend name *equals* the device type count (HAMi quirk §12.1.2: for NVIDIA the
    device type is the model, so only existing usage counts).
    """
    if not dev.count or not dev.totalcore or not dev.totalmem:
        return 0.0
    req = core = mem = 0
    for r in requests:
        if r.backend == dev.type:
            req += 1
            core += r.coresreq
            pct = r.mem_percentage
            mem += dev.totalmem * pct // 100 if pct not in (0, MEM_PERCENTAGE_UNSET) else r.memreq
    ws, wc, wm = weights
    return 10.0 * (ws * (req + dev.used) / dev.count + wc * (core + dev.usedcores) / dev.totalcore
                   + wm * (mem + dev.usedmem) / dev.totalmem)


def sort_devices(devices: Sequence[DeviceUsage], requests: Sequence[DeviceRequest],
                 policy: GpuPolicy) -> list[DeviceUsage]:
    """Order devices by the GPU policy so that the preferred device is **last** (Fit walks backwards).

    Spec §7.2. Python's sort is stable, so remaining ties keep registration order, which makes
    decisions deterministic where Go's are not. A built-in policy package's token (alone) starts from the HAMi
    order it names (:func:`package_gpu_policies`); the package's ``hami_order_devices`` refines that order.
    """
    tokens = policy.gpu_tokens
    weights = policy.weights
    scored = [(device_score(d, requests, weights), d) for d in devices]
    if "," in policy.gpu or policy.gpu == "numa":
        chain = [t for t in dict.fromkeys(tokens) if t in _CHAIN_TOKENS] or ["spread"]
        if policy.numa_bind and chain[0] != "numa":
            chain = ["numa", *(t for t in chain if t != "numa")]

        def chain_key(item: tuple[float, DeviceUsage]) -> tuple[float, ...]:
            score, d = item
            parts: list[float] = []
            for t in chain:
                parts.append(score if t == "binpack" else -score if t == "spread" else d.numa)
            parts.append(d.index)
            return tuple(parts)

        scored.sort(key=chain_key)
    elif policy.gpu == "mutex":
        scored.sort(key=lambda it: (-it[1].used, it[1].numa))
    elif policy.numa_bind:
        if policy.gpu == "binpack":
            scored.sort(key=lambda it: (-it[1].numa, it[0]))
        else:
            scored.sort(key=lambda it: (it[1].numa, -it[0]))
    elif policy.gpu == "binpack" or package_gpu_policies().get(policy.gpu) == "binpack":
        scored.sort(key=lambda it: (it[0], it[1].numa))
    else:
        scored.sort(key=lambda it: (-it[0], it[1].numa))
    return [d for _, d in scored]
