"""The ``fgd`` policy's hooks: the whole policy reaches the engine through these generic extension points.

* ``hami_policy_setup``: reads its own section, ``scheduler.fgd`` (:class:`~.config.FgdConfig`), and keeps its
  per-engine state (:class:`FgdEngineState`: the request-mix model) in the engine's plugin state;
* ``hami_observe_pod``: counts every pod the engine is asked about in the mix (:class:`~.mix.WorkloadModel`);
* ``hami_order_devices``: under GPU policy ``fgd``, orders a node's devices so that the fit takes the one whose use
  grows fragmentation least (:func:`~.fragmentation.fgd_device_order`);
* ``hami_prescore_nodes``: under node policy ``fgd``, scores every node by its fragmentation growth
  (:func:`~.score.node_scores`), with its own tie-break;
* ``hami_score_defaults``: under node policy ``fgd``, HAMi's node score weighs nothing (fgd's tie-break packs);
* ``hami_scheduling_policies``: declares the node and the GPU policy.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hami_core.engine.scoring import ScorerDefaults
from hami_core.engine.workload import Shape
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import DeviceRequest, DeviceUsage, GpuPolicy, NodeBatch, PolicyInfo
from hami_core.policies.fgd.config import SECTION, FgdConfig
from hami_core.policies.fgd.fragmentation import fgd_device_order
from hami_core.policies.fgd.growth import FgdState
from hami_core.policies.fgd.mix import Workload, WorkloadModel
from hami_core.policies.fgd.score import CACHE_KEY, node_scores, score_scale

__all__ = ["NAME", "FgdEngineState", "engine_state", "hami_observe_pod", "hami_order_devices", "hami_policy_setup",
           "hami_prescore_nodes", "hami_scheduling_policies", "hami_score_defaults"]

#: The policy's name: node policy, GPU policy token, scorer, config section and state key.
NAME = SECTION
#: The scorer whose weight the node policy sets to 0 (HAMi's node score; see hami_core.default_plugins.score).
_HAMI_SCORER = "hami"


@dataclass(slots=True)
class FgdEngineState:
    """What the policy keeps for one engine: its configuration, the mix model and the mix snapshot of the
    current decision (taken once per pod, when the pod is observed)."""

    config: FgdConfig
    model: WorkloadModel
    current: Workload
    #: the ``hami_score_defaults`` answer and the snapshot it was made for
    defaults: tuple[Workload, dict[str, ScorerDefaults]] | None = None
    #: the engine's plugin cache (``NodeBatch.cache``) the node policy's growth is kept in, once it scored: the
    #: device order reads the growth's row stores and device memos from it
    cache: dict[str, Any] | None = None

    @classmethod
    def of(cls, config: FgdConfig) -> FgdEngineState:
        model = WorkloadModel(config.window, tolerance=config.tolerance, coverage=config.coverage,
                              fixed=config.fixed_mix(), score_steps=config.score_steps, cache_mib=config.cache_mib,
                              ties=config.ties, reserve=config.reserve)
        return cls(config, model, model.snapshot())


def engine_state(engine: Any) -> FgdEngineState:
    """The policy's state in ``engine`` (an :class:`~hami_core.engine.facade.Engine`): its mix model and config."""
    state = engine.workload.state.get(NAME)
    if not isinstance(state, FgdEngineState):
        raise LookupError("the engine holds no fgd policy state (is the built-in plugin hami.default.fgd blocked?)")
    return state


def _state(state: Any) -> FgdEngineState | None:
    own = state.get(NAME) if isinstance(state, Mapping) else None
    return own if isinstance(own, FgdEngineState) else None


@hookimpl
def hami_scheduling_policies() -> list[PolicyInfo]:
    return [PolicyInfo(NAME, "node", "fragmentation gradient descent: the node whose expected fragmentation "
                                     "under the recent workload mix grows least (ties: binpack)",
                       ranks_all_pods=True),
            PolicyInfo(NAME, "gpu", "the device whose use grows fragmentation under the workload mix least "
                                    "(ties: binpack)")]


@hookimpl
def hami_policy_setup(config: Any, state: MutableMapping[str, Any]) -> None:
    section = getattr(config, SECTION, None)
    state[NAME] = FgdEngineState.of(section if isinstance(section, FgdConfig) else FgdConfig())


@hookimpl
def hami_observe_pod(key: str, shapes: Sequence[Shape], host: tuple[int, int], state: Mapping[str, Any]) -> None:
    own = _state(state)
    if own is not None:
        own.model.observe(key, shapes, host)
        own.current = own.model.snapshot()  # one snapshot per decision: every hook of this pod reads the same mix


@hookimpl
def hami_order_devices(node: Any, request: DeviceRequest, shape: Shape | None, host: tuple[int, int],
                       devices: Sequence[DeviceUsage], ordered: list[DeviceUsage], policy: GpuPolicy,
                       state: Mapping[str, Any]) -> list[DeviceUsage] | None:
    own = _state(state) if policy.has(NAME) else None
    if own is None or shape is None or not own.current.classes:
        return None  # nothing learned yet: the GPU policy's own order (binpack)
    workload = own.current
    backend = request.backend
    classes = workload.for_backend(backend)
    if not classes:
        return None
    free = (node.host_total[0] - node.host_used[0], node.host_total[1] - node.host_used[1])
    # cached per node state, unless the devices carry this pod's earlier containers (then they are a copy)
    unchanged = devices is node.devices.get(backend)
    key = (NAME, backend, shape, host, workload.version, policy.weights)
    cached = node.order_cache.get(key) if unchanged else None
    if cached is not None and cached[0] == node.generation:
        return cached[1]  # type: ignore[no-any-return]
    growth = own.cache.get(CACHE_KEY) if unchanged and own.cache is not None else None
    result = growth.device_order(node, backend, shape, host, policy.weights, workload, ordered) \
        if isinstance(growth, FgdState) else None
    if result is None:
        result = fgd_device_order(ordered, shape, classes, free, host, policy.weights)
    if unchanged:
        node.order_cache[key] = (node.generation, result)
    return result


@hookimpl
def hami_prescore_nodes(pod: Mapping[str, Any], batch: NodeBatch, policy: GpuPolicy) -> np.ndarray | None:
    if policy.node != NAME:
        return None
    own = _state(batch.workload)
    if own is not None and batch.cache is not None:
        own.cache = batch.cache
    return node_scores(pod, batch, policy, _workload(batch.workload))


@hookimpl
def hami_score_defaults(policy: GpuPolicy, state: Mapping[str, Any]) -> dict[str, ScorerDefaults] | None:
    if policy.node != NAME:
        return None
    own = _state(state)
    if own is None:
        return {_HAMI_SCORER: ScorerDefaults(weight=0.0), NAME: ScorerDefaults(scale=score_scale(None))}
    if own.defaults is None or own.defaults[0] is not own.current:  # the same answer while the mix stands
        own.defaults = (own.current, {_HAMI_SCORER: ScorerDefaults(weight=0.0),  # fgd's tie-break packs already
                                      NAME: ScorerDefaults(scale=score_scale(own.current))})
    return own.defaults[1]


def _workload(observed: Any) -> Workload | None:
    """The mix of one decision: the engine's (its plugin state), or the one a hand-built batch names."""
    if isinstance(observed, Workload):
        return observed
    own = _state(observed)
    return own.current if own is not None else None
