"""``StandardBackend``: HAMi's generic ``Devices`` behaviour, driven by a backend's fields.

A vendor subclasses it and overrides only what differs from HAMi's common rules; every ``hami_*`` method is a
hook implementation for that backend alone (the core's relay, :mod:`hami_core.plugins.relay`, calls it only for
its own backend, so nothing here asks "is this backend mine?"). Overriding a method needs no ``@hookimpl``.

What the base does (vendors.md Part A):

* ``hami_node_devices``: decodes ``register_annotation`` (JSON or HAMi's legacy colon form); absent ⇒ no devices,
  a value with no device ⇒ "no gpu found on node" (the node keeps its previous devices);
* ``hami_node_health``: the generic handshake rule on ``handshake_annotation`` (A.5);
* ``hami_mutate_container``: the container uses the backend iff its count resource is in its limits;
* ``hami_container_request``: count, memory (x ``memory_factor``), memory percentage and cores under HAMi's
  integer limits, in four overridable steps (:attr:`~StandardBackend.fractional_memory` and
  :attr:`~StandardBackend.memory_given_percentage` cover the usual vendor variations);
* ``hami_filter_nodes``: :func:`~hami_core.plugins.fit.standard_fit` with type/UUID selection from the
  ``use_*``/``nouse_*`` annotations, the ``mutex`` GPU policy, when :attr:`enforce_quota` ResourceQuota, and when
  :attr:`same_devices_as_earlier_containers` the rule of :func:`same_devices_rule`; when
  :meth:`vector_fit_options` says the pod's fit is the plain checklist, the core computes the same verdicts for
  all nodes at once from its device arrays instead of calling it (:attr:`vector_fit`, :attr:`exact_fit_annotations`
  tell it when a subclass's override still is);
* ``hami_allocation_annotations`` / ``hami_decode_allocation``: HAMi's pod codec on the to-allocate and
  allocated keys (A.4);
* ``hami_node_lock``: ``lock_annotation`` when an app container uses the backend (A.6);
* ``hami_dra_devices``: :func:`standard_dra_devices` (DRA mode's ResourceSlice devices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from hami_core.plugins.dra import (
    ATTR_REGISTERED_INDEX,
    CAP_CORES,
    CAP_MEMORY,
    CAP_SHARES,
    MIB,
    DraCapacity,
    DraDevice,
)
from hami_core.plugins.fit import CustomRule, DevicePredicate, quota_predicate, standard_fit
from hami_core.plugins.health import standard_health
from hami_core.plugins.helpers import Selection, as_int64, resource
from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.objects import annotations
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    ContainerRequests,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitCandidate,
    FitResult,
    GpuPolicy,
    HealthReport,
    LockSpec,
    Mutation,
    PodSingleDevice,
    QuotaView,
)
from hami_core.wire.common import INT32_MAX, wire_error
from hami_core.wire.nodes import decode_node_devices
from hami_core.wire.pods import decode_pod_single_device, encode_pod_single_device

__all__ = [
    "StandardBackend",
    "same_devices_rule",
    "standard_allocation_annotations",
    "standard_decode_allocation",
    "standard_dra_devices",
    "standard_node_lock",
]


def standard_allocation_annotations(backend: DeviceBackend, devices: PodSingleDevice) -> dict[str, str] | None:
    """The same value under the to-allocate and the allocated key, one entry per container (padded)."""
    keys = [k for k in (backend.to_allocate_annotation, backend.allocated_annotation) if k]
    if not keys:
        return None
    return dict.fromkeys(keys, encode_pod_single_device(devices))


def standard_decode_allocation(backend: DeviceBackend, pod: Mapping[str, Any]) -> PodSingleDevice | None:
    """The devices ``pod`` holds on ``backend`` by its allocated annotation (``None``: none)."""
    key = backend.allocated_annotation
    if not key:
        return None
    value = annotations(pod).get(key)
    if not value:
        return None
    return decode_pod_single_device(value, key=key)


def standard_node_lock(backend: DeviceBackend, requests: ContainerRequests) -> LockSpec | None:
    """``LockSpec(lock_annotation)`` when an **app** container requests the backend."""
    if not backend.lock_annotation:
        return None
    # HAMi checks app containers only: an init-only pod is bound without a lock (quirk §12.1.5).
    app = requests.containers[requests.init_count:]
    if any(backend.name in ctr for ctr in app):
        return LockSpec(backend.lock_annotation)
    return None


def standard_dra_devices(backend: DeviceBackend, devices: Sequence[DeviceInfo], *,
                         default_cores: int = 0) -> list[DraDevice]:
    """HAMi's registration as DRA devices (the default ``hami_dra_devices``), one per device in index order.

    Capacities, consumable when the device is shared: ``memory`` = ``devmem`` MiB in bytes (a claim that names none
    consumes the whole card, as a HAMi request without memory books the card's memory; requests round up to whole
    MiB), ``cores`` = ``devcore`` (a claim that names none consumes ``default_cores``) and, on a shared device,
    ``shares`` = ``count`` with every allocation consuming exactly one (HAMi's split count). ``count <= 1``: one
    claim at a time, not shared. ``health`` False: ``healthy=False`` (the publisher withdraws the device). Devices
    are named by index; when several share one, they are numbered by position and the registered index is the
    ``registeredIndex`` attribute.
    """
    ordered = sorted(devices, key=lambda d: (d.index, d.id))
    # Device names come from the index; a registration where several devices share one (Vastai's dies of one card)
    # is numbered by position instead, the registered index kept as an attribute.
    unique = len({d.index for d in ordered}) == len(ordered)
    out = []
    for position, dev in enumerate(ordered):
        memory = dev.devmem * MIB
        shared = dev.count > 1
        capacity = {
            CAP_MEMORY: DraCapacity(memory, default=memory, minimum=MIB if memory else 0, step=MIB),
            CAP_CORES: DraCapacity(dev.devcore, default=min(max(default_cores, 0), dev.devcore), minimum=0),
        }
        if shared:
            capacity[CAP_SHARES] = DraCapacity(dev.count, default=1, minimum=1, maximum=1)
        out.append(DraDevice(backend=backend.name, index=dev.index if unique else position, uuid=dev.id,
                             type=dev.type, numa=dev.numa, mode=dev.mode, shared=shared, healthy=dev.health,
                             capacity=capacity, attributes={} if unique else {ATTR_REGISTERED_INDEX: dev.index}))
    return out


def same_devices_rule(allocated: Sequence[Sequence[ContainerDevice]]) -> CustomRule | None:
    """HAMi's "same devices as the pod's earlier containers" ``customFilterRule`` (MetaX GPU, Mthreads), for one
    node: ``allocated`` is what earlier containers of the pod got there (``FitCandidate.allocated[name]``).

    ``None`` (no rule) when they got nothing; else a device fits only if it is every device they got, so one
    container may take several devices but a later one then fits nowhere (``CardNotFoundCustomFilterRule``).
    """
    earlier = tuple(d.uuid for ctr in allocated for d in ctr)
    if not earlier:
        return None

    def same_devices(dev: DeviceUsage, mem: int, cores: int, chosen: Sequence[ContainerDevice]) -> bool:
        return all(uuid == dev.id for uuid in earlier)

    return same_devices


def _never(dev: DeviceUsage) -> bool:
    return False


#: :meth:`StandardBackend.fit_options` keys the vectorised fit honours (``custom_reason`` names a rule's reason only).
_VECTOR_OPTIONS = frozenset({"mutex", "custom_reason"})


@dataclass(frozen=True, slots=True)
class StandardBackend(DeviceBackend):
    """A backend with HAMi's generic behaviour; subclass it and override what your vendor does differently.

    Class-level knobs (set them in the subclass body) cover the common variations of the request rules; a
    vendor whose rule differs in another way overrides the step method. State that lives as long as the
    engine belongs in a field declared with ``field(default_factory=..., compare=False)``.
    """

    #: Cores a container books when its core resource is absent (HAMi: 0 for most, 100 for an exclusive card).
    default_cores: ClassVar[int] = 0
    #: ``MemPercentagereq`` of a request that books memory and gives no percentage: unset (HAMi's NVIDIA rule) or,
    #: for vendors whose memory in MiB always wins over a percentage (Hygon, Ascend, Cambricon, MetaX sGPU,
    #: Mthreads), 0.
    memory_given_percentage: ClassVar[int] = MEM_PERCENTAGE_UNSET
    #: A memory quantity Kubernetes' ``AsInt64`` cannot read (fractional, not a quantity, beyond int64): ``"drop"``
    #: drops the request (the generic rule), ``"ignore"`` books 0 MiB, i.e. the whole card (Hygon's rule).
    fractional_memory: ClassVar[Literal["drop", "ignore"]] = "drop"
    #: Fit with :func:`same_devices_rule` (MetaX GPU, Mthreads): on a node where earlier containers of the pod got
    #: devices, a later container may take only the device they all got. It replaces any ``custom_rule`` from
    #: :meth:`fit_options`.
    same_devices_as_earlier_containers: ClassVar[bool] = False
    #: Pass ResourceQuota to the fit (HAMi: NVIDIA and Cambricon enforce it in their fit).
    enforce_quota: ClassVar[bool] = False
    #: Whether the core may fit this backend on every node at once from its numeric device arrays instead of calling
    #: :meth:`hami_filter_nodes` per node, when :meth:`vector_fit_options` allows it for the pod. ``None`` (the
    #: default): exactly when :meth:`hami_filter_nodes` is the base's. A subclass whose override adds only per-node
    #: rules that :attr:`exact_fit_annotations` and MIG-mode devices announce may set True.
    vector_fit: ClassVar[bool | None] = None
    #: Node annotations under which this backend's fit differs from the plain checklist (NVIDIA:
    #: ``hami.io/device-cordon``): a node carrying one (non-empty) is fitted by :meth:`hami_filter_nodes`. Nodes
    #: where the backend has a MIG-mode device always are.
    exact_fit_annotations: ClassVar[frozenset[str]] = frozenset()

    # ----------------------------------------------------------------------------------- inventory
    @hookimpl
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        key = self.register_annotation
        raw = annotations(node).get(key) if key else None
        if raw is None:
            return []
        devices = decode_node_devices(raw, key=key or "")
        if not devices:
            raise wire_error(key or "", "no gpu found on node")
        return devices

    @hookimpl
    def hami_node_health(self, node: Mapping[str, Any], devices: Sequence[DeviceInfo], now: float) -> HealthReport:
        return standard_health(self, node, devices, now)

    # ----------------------------------------------------------------------------------- admission
    @hookimpl
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        limits = (container.get("resources") or {}).get("limits") or {}
        return Mutation(self.resource_names.count in limits)

    # ----------------------------------------------------------------------------------- requests
    @hookimpl
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        """HAMi ``GenerateResourceRequests``: ``None`` when the container does not use the backend or a step
        drops the request."""
        nums = self.request_count(container)
        if nums is None:
            return None
        memreq = self.request_memory(container)
        if memreq is None:
            return None
        cores = self.request_cores(container)
        if cores is None:
            return None
        return DeviceRequest(self.name, nums, memreq, self.request_percentage(container, memreq), cores)

    def request_count(self, container: Mapping[str, Any]) -> int | None:
        """The device count: an integer in 1..MaxInt32 (limits, else requests), else ``None`` (not used)."""
        nums = as_int64(resource(container, self.resource_names.count))
        return nums if nums is not None and 1 <= nums <= INT32_MAX else None

    def request_memory(self, container: Mapping[str, Any]) -> int | None:
        """MiB per device: the memory quantity x ``memory_factor``; 0 when absent; ``None`` drops the request
        (one outside 0..MaxInt32 once multiplied, or a non-integer quantity unless :attr:`fractional_memory` is
        ``"ignore"``, which books 0 for it)."""
        raw = resource(container, self.resource_names.memory)
        if raw is None:
            return 0
        mem = as_int64(raw)
        if mem is None:
            return 0 if self.fractional_memory == "ignore" else None
        factor = max(self.resource_names.memory_factor, 1)
        if not 0 <= mem <= INT32_MAX // factor:
            return None
        return mem * factor

    def request_percentage(self, container: Mapping[str, Any], memreq: int) -> int:
        """``MemPercentagereq``: the percentage resource when given (1..100), else 100 (the whole card's memory)
        when no memory is booked, else :attr:`memory_given_percentage`."""
        raw = resource(container, self.resource_names.memory_percentage)
        if raw is not None:
            value = as_int64(raw)
            if value is not None and value > 0:
                return min(value, 100)
        return 100 if memreq == 0 else self.memory_given_percentage

    def request_cores(self, container: Mapping[str, Any]) -> int | None:
        """Cores per device: the core quantity, :attr:`default_cores` when absent or not an integer; ``None``
        drops the request (outside 0..MaxInt32)."""
        raw = resource(container, self.resource_names.cores)
        if raw is None:
            return self.default_cores
        value = as_int64(raw)
        if value is None:
            return self.default_cores
        return value if 0 <= value <= INT32_MAX else None

    # ----------------------------------------------------------------------------------- filter
    def selection(self, pod: Mapping[str, Any]) -> Selection:
        """The pod's type/UUID selection from this backend's ``use_*``/``nouse_*`` annotation keys."""
        return Selection(annotations(pod), use_type=self.use_type_annotation, nouse_type=self.nouse_type_annotation,
                         use_uuid=self.use_uuid_annotation, nouse_uuid=self.nouse_uuid_annotation)

    def type_predicate(self, pod: Mapping[str, Any], request: DeviceRequest, sel: Selection) -> DevicePredicate | None:
        """The fit's type step: the request must be this backend's, and the card type must pass the selection."""
        if request.backend != self.name:
            return _never
        return (lambda dev: sel.type_ok(dev.type)) if sel.filters_type else None

    def fit_options(self, pod: Mapping[str, Any], request: DeviceRequest, policy: GpuPolicy) -> dict[str, Any]:
        """Extra :func:`standard_fit` keywords (``numa_bind``, ``topology``, ``custom_rule``, ...); the base
        applies the ``mutex`` GPU policy."""
        return {"mutex": policy.has("mutex")}

    def vector_fit_options(self, pod: Mapping[str, Any], request: DeviceRequest, policy: GpuPolicy,
                           quota: QuotaView | None) -> dict[str, Any] | None:
        """The :func:`standard_fit` keywords of this pod's fit when it is the plain checklist, which the core can
        then run on every node at once (``{"mutex": bool}``); ``None`` when it must call :meth:`hami_filter_nodes`.

        Plain: :attr:`vector_fit` holds, the request is this backend's (at least one device), no quota is enforced,
        the pod selects no card type or UUID (:meth:`type_predicate` gives ``None``) and :meth:`fit_options`
        sets nothing but ``mutex`` (no NUMA binding, topology, cordon, custom rule or revisit). The verdicts,
        chosen devices and reason texts are the per-node fit's (``tests/engine/test_vecfit.py``).
        """
        vector = self.vector_fit
        if vector is None:
            # The same-devices rule is per node (what earlier containers got there), which the arrays do not model.
            vector = (type(self).hami_filter_nodes is StandardBackend.hami_filter_nodes
                      and not self.same_devices_as_earlier_containers)
        if not vector or request.backend != self.name or request.nums < 1:
            return None
        if quota is not None and self.enforce_quota:
            return None
        sel = self.selection(pod)
        if sel.filters_uuid or self.type_predicate(pod, request, sel) is not None:
            return None
        options = self.fit_options(pod, request, policy)
        if any(value for key, value in options.items() if key not in _VECTOR_OPTIONS):
            return None
        return {"mutex": bool(options.get("mutex"))}

    @hookimpl
    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        sel = self.selection(pod)
        type_ok = self.type_predicate(pod, request, sel)
        uuid_ok = (lambda dev: sel.uuid_ok(dev.id)) if sel.filters_uuid else None
        options = self.fit_options(pod, request, policy)
        if not self.enforce_quota:
            quota = None
        results = []
        for cand in candidates:
            kwargs = options
            if self.same_devices_as_earlier_containers:
                kwargs = {**options, "custom_rule": same_devices_rule(cand.allocated.get(self.name, ()))}
            results.append(standard_fit(cand.devices, request, type_ok=type_ok, uuid_ok=uuid_ok,
                                        quota=quota_predicate(quota, self, cand), **kwargs))
        return results

    # ----------------------------------------------------------------------------------- reserve / bind
    @hookimpl
    def hami_allocation_annotations(self, devices: PodSingleDevice) -> Mapping[str, str] | None:
        return standard_allocation_annotations(self, devices)

    @hookimpl
    def hami_decode_allocation(self, pod: Mapping[str, Any]) -> PodSingleDevice | None:
        return standard_decode_allocation(self, pod)

    @hookimpl
    def hami_node_lock(self, requests: ContainerRequests) -> LockSpec | None:
        return standard_node_lock(self, requests)

    # ----------------------------------------------------------------------------------- DRA
    @hookimpl
    def hami_dra_devices(self, devices: Sequence[DeviceInfo]) -> Sequence[DraDevice]:
        """:func:`standard_dra_devices` with :attr:`default_cores` as the cores a claim naming none consumes."""
        return standard_dra_devices(self, devices, default_cores=self.default_cores)
