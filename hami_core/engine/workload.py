"""What a pod asks of each backend, as request shapes, and the plugins that learn from the pods the engine sees.

A :class:`Shape` is one container's request of one backend with the pod's type selections: what a policy that
models the workload counts (``NodeBatch.shapes``, :func:`pod_shapes`). :class:`PodObservers` hands every pod the
engine is asked about to the plugins that implement ``hami_observe_pod`` (a policy's request-mix model, such as
the ``fgd`` policy's in :mod:`hami_core.policies.fgd`), after giving them their configuration once
(``hami_policy_setup``); the engine holds it as ``Engine.workload``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, ContainerRequests, DeviceBackend
from hami_core.wire.common import split_list

__all__ = ["DEVICELESS", "PodObservers", "Shape", "device_share", "pod_shapes", "shape_share"]


@dataclass(frozen=True, slots=True)
class Shape:
    """What one container asks of one backend, as the workload mix counts it.

    ``use_types``/``nouse_types`` are the pod's type selections (upper case substrings of the device
    type, as HAMi's type check matches them). ``nums == 0`` is a pod without devices (:data:`DEVICELESS`): it
    accepts no device, so every free share is a fragment for it (the paper's CPU-only typical pods).
    """

    backend: str
    nums: int
    cores: int = 0
    memreq: int = 0
    mem_percentage: int = MEM_PERCENTAGE_UNSET
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    #: The hash, computed once: shapes key the mix's counters, hashed for every pod the model sees.
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.backend, self.nums, self.cores, self.memreq, self.mem_percentage,
                                                self.use_types, self.nouse_types)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # rebuilt through __init__, so the hash is recomputed (string hashes differ between processes)
        return Shape, (self.backend, self.nums, self.cores, self.memreq, self.mem_percentage, self.use_types,
                       self.nouse_types)

    @property
    def deviceless(self) -> bool:
        return self.nums == 0

    def accepts(self, device_type: str) -> bool:
        if self.deviceless:
            return False
        card = device_type.upper()
        if self.use_types and not any(t in card for t in self.use_types):
            return False
        return not (self.nouse_types and any(t in card for t in self.nouse_types))


#: The shape of a pod without devices: what a mix counts for pods that ask for no managed device.
DEVICELESS = Shape("", 0)


def device_share(cores: int, mem_percentage: int) -> int:
    """The share of one device (milli, 1000 = whole) a request of ``cores`` and ``mem_percentage`` asks: the larger
    of the two; 0 for a request given in MiB alone (``MEM_PERCENTAGE_UNSET``), whose share depends on the card."""
    pct = mem_percentage if mem_percentage != MEM_PERCENTAGE_UNSET else 0
    return max(min(cores, 100), pct) * 10


def shape_share(shape: Shape) -> float:
    """:func:`device_share` of a shape (per device)."""
    return float(device_share(shape.cores, shape.mem_percentage))


def pod_shapes(pod: Mapping[str, Any], requests: ContainerRequests,
               backends: Mapping[str, DeviceBackend]) -> tuple[Shape, ...]:
    """One :class:`Shape` per (container, backend) request of the pod, with the pod's type selections."""
    annos = (pod.get("metadata") or {}).get("annotations") or {}
    out: list[Shape] = []
    for container in requests.containers:
        for name, req in sorted(container.items()):
            backend = backends.get(name)
            use = nouse = ()
            if backend is not None:
                use = tuple(t.upper() for t in split_list(annos.get(backend.use_type_annotation or "")))
                nouse = tuple(t.upper() for t in split_list(annos.get(backend.nouse_type_annotation or "")))
            out.append(Shape(name, req.nums, min(req.coresreq, 100), req.memreq, req.mem_percentage, use, nouse))
    return tuple(out)


class PodObservers:
    """The plugins that learn from the pods the engine is asked about (``hami_observe_pod``), with their state.

    Built once per engine: it gives every plugin its configuration (``hami_policy_setup``), then counts each pod
    :meth:`Engine.schedule` is asked about (:meth:`observe`). The plugins keep what they learn in :attr:`state`
    (one entry per plugin, keyed by its name), which the engine hands to the score hooks as ``NodeBatch.workload``
    and to ``hami_order_devices`` (:meth:`snapshot`).
    """

    def __init__(self, hook: Any, config: Any) -> None:
        #: plugin name → what the plugin keeps for this engine
        self.state: dict[str, Any] = {}
        self._observe = hook.hami_observe_pod
        # no pluggy call per decision when nothing listens (the common case without a modelling policy)
        self._listening = bool(self._observe.get_hookimpls())
        hook.hami_policy_setup(config=config, state=self.state)

    def observe(self, key: str, shapes: Iterable[Shape], host: tuple[int, int] = (0, 0)) -> None:
        """Hand one pod (its key, request shapes, CPU milli and memory MiB) to the observing plugins."""
        if self._listening:
            self._observe(key=key, shapes=tuple(shapes), host=host, state=self.state)

    def snapshot(self) -> Mapping[str, Any]:
        """What the observing plugins know now (:attr:`state`), for one decision."""
        return self.state
