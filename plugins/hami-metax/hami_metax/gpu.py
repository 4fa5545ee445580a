"""HAMi's MetaX GPU backend, scheduler side (vendors.md G.1; Part A for the shared contract).

Whole cards (common word ``Metax-GPU``) synthesised from node capacity, HAMi's standard fit plus "one pod, one
card set", and a node score from the device plugin's topology loss/score tables.

:class:`GpuBackend` is a :class:`~hami_core.plugins.StandardBackend`: admission (the count in limits), the
request (``{n, 0 MiB, 100 %, 100 cores}``: no memory or core resource, a whole card's cores by default), the
allocation annotations ``hami.io/metax-gpu-devices-to-allocate`` / ``-allocated`` and their decoding are HAMi's
generic ones; no handshake, no lock. Registration, health, fit and score are MetaX's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hami_core.plugins import (
    ContainerDevice,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    NodeScore,
    PodSingleDevice,
    ResourceNames,
    ScoreCandidate,
    StandardBackend,
    WireFormatError,
    capacity_count,
    capacity_health,
    metadata,
    same_devices_rule,
    standard_fit,
)

# `from hami_core.plugins import annotations` yields __future__.annotations (the package's own future import
# binds the name before its lazy export can): take the accessor from its module until hami-core fixes that.
from hami_core.plugins.objects import annotations
from hami_core.wire import gojson as _json
from hami_core.wire.common import INT64_MAX, INT64_MIN, parse_go_int
from hami_metax.common import GPU_WORD, SGPU_WORD, VENDOR, combined_score
from hami_metax.config import MetaxConfig
from hami_metax.sgpu import sgpu_score

__all__ = ["GPU_WORD", "GpuBackend", "gpu_fit", "gpu_score", "topology_value"]

GPU_TO_ALLOCATE = "hami.io/metax-gpu-devices-to-allocate"
GPU_ALLOCATED = "hami.io/metax-gpu-devices-allocated"
#: Node annotations of the MetaX GPU device plugin: JSON objects "number of GPUs" → integer.
TOPOLOGY_LOSSES = "metax-tech.com/gpu.topology.losses"
TOPOLOGY_SCORES = "metax-tech.com/gpu.topology.scores"
#: Every synthesised card has 64 GiB and 100 % compute, and takes one task (G.1).
GPU_DEVMEM = 65536
GPU_DEVCORE = 100
#: ``ScoreNode`` base: ``2000 - losses[k]`` (binpack) or ``2000 - scores[k]`` (spread).
GPU_SCORE_BASE = 2000


@dataclass(frozen=True, slots=True)
class GpuBackend(StandardBackend):
    """The MetaX GPU backend (G.1): count resource only, no lock, no registration annotation."""

    #: a whole card: the request books 100 cores (there is no core resource)
    default_cores: ClassVar[int] = 100

    @classmethod
    def from_config(cls, cfg: MetaxConfig) -> GpuBackend:
        return cls(name=GPU_WORD, vendor=VENDOR, resource_names=ResourceNames(count=cfg.resource_count_name),
                   to_allocate_annotation=GPU_TO_ALLOCATE, allocated_annotation=GPU_ALLOCATED, standard_capacity=True,
                   config=cfg)

    def hami_node_devices(self, node: Mapping[str, Any]) -> list[DeviceInfo]:
        """Whole cards from ``status.capacity[<resourceCountName>]``: ``<node>-metax-<i>``, 64 GiB, 100 cores.

        No capacity (or 0) means no MetaX GPU on the node. A capacity that is not a whole number raises
        :class:`WireFormatError` naming the field (the engine keeps the node's previous cards).
        """
        count = capacity_count(node, self.resource_names.count)
        if count is None:
            return []
        name = metadata(node).get("name", "")
        return [DeviceInfo(id=f"{name}-metax-{i}", index=i, count=1, devmem=GPU_DEVMEM, devcore=GPU_DEVCORE,
                           type=GPU_WORD, numa=0, health=True) for i in range(max(count, 0))]

    def hami_node_health(self, node: Mapping[str, Any]) -> HealthReport:
        """HAMi ``CheckHealth`` for MetaX GPU: healthy iff the node's capacity is > 0; always refresh.

        An absent or 0 capacity is unhealthy, as in HAMi: the node's cached cards are cleaned up.
        """
        return capacity_health(node, self.resource_names.count)

    def hami_filter_nodes(self, request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy) -> list[FitResult]:
        """:func:`gpu_fit` on every candidate node, with the cards the pod's earlier containers got there.

        The ``mutex`` GPU policy (a token of the chain) refuses a busy card, as in every HAMi v2.10 backend; no UUID
        selection and no quota: HAMi's MetaX GPU fit has neither.
        """
        mutex = policy.has("mutex")
        return [gpu_fit(c.devices, request, c.allocated.get(self.name, ()), mutex=mutex) for c in candidates]

    def hami_score_nodes(self, pod: Mapping[str, Any], candidates: Sequence[ScoreCandidate],
                         policy: GpuPolicy) -> list[NodeScore | None]:
        """:func:`gpu_score` on every node where the pod got MetaX GPU cards (``None`` elsewhere); where it got
        MetaX sGPU devices too, this answer carries the sGPU's score as well (:mod:`hami_metax.common`)."""
        out: list[NodeScore | None] = []
        for cand in candidates:
            cards = cand.assignment.get(self.name, ())
            if not any(cards):
                out.append(None)
                continue
            raw = gpu_score(cand.node.annotations, cards, policy.node)
            shared = cand.assignment.get(SGPU_WORD, ())
            if not any(shared):
                out.append(NodeScore(raw))
                continue
            neutral = sgpu_score(annotations(pod), shared, cand.previous.get(SGPU_WORD, ()))
            out.append(combined_score(raw, neutral, policy))
        return out


def _never(dev: DeviceUsage) -> bool:
    return False


def gpu_fit(devices: Sequence[DeviceUsage], request: DeviceRequest,
            allocated: Iterable[Sequence[ContainerDevice]] = (), *, mutex: bool = False) -> FitResult:
    """HAMi's standard fit without UUID selection, plus MetaX's custom rule (G.1).

    ``allocated`` are the cards earlier containers of the pod received: once there are any, a card
    whose ID differs from one of them is refused with ``CardNotFoundCustomFilterRule``
    (:func:`~hami_core.plugins.same_devices_rule`).
    """
    return standard_fit(devices, request, type_ok=None if request.backend == GPU_WORD else _never,
                        custom_rule=same_devices_rule(tuple(allocated)), mutex=mutex)


def topology_value(raw: str, count: int) -> int:
    """``losses[count]`` / ``scores[count]`` from a topology annotation; 0 when missing or unreadable.

    Format: a JSON object whose keys are decimal integers and values integers, e.g.
    ``{"1":0,"2":110,"3":270}``. Like Go's ``json.Unmarshal`` into ``map[int]int``, one bad key or value
    makes the whole table unreadable.
    """
    try:
        data = _json.loads(raw, TOPOLOGY_LOSSES)
    except WireFormatError:
        return 0
    if not isinstance(data, dict):
        return 0
    table: dict[int, int] = {}
    for key, value in data.items():
        try:
            number = parse_go_int(key)
        except WireFormatError:
            return 0
        if type(value) is not int or not INT64_MIN <= value <= INT64_MAX:
            return 0
        table[number] = value
    return table.get(count, 0)


def gpu_score(node_annotations: Mapping[str, str], devices: PodSingleDevice, node_policy: str) -> float:
    """HAMi ``ScoreNode`` for MetaX GPU (not policy neutral): reads the node policy itself.

    With ``k`` the number of cards given to the pod: binpack → ``2000 - losses[k]`` from
    ``metax-tech.com/gpu.topology.losses``; spread → ``2000 - scores[k]`` from
    ``metax-tech.com/gpu.topology.scores``. No annotation or another policy → 0.
    """
    k = sum(len(ctr) for ctr in devices)
    if node_policy == "binpack":
        key = TOPOLOGY_LOSSES
    elif node_policy == "spread":
        key = TOPOLOGY_SCORES
    else:
        return 0.0
    raw = node_annotations.get(key)
    if raw is None:
        return 0.0
    return float(GPU_SCORE_BASE - topology_value(raw, k))
