"""HAMi's AWS Neuron backend, scheduler side (``pkg/device/awsneuron/device.go``).

:class:`NeuronBackend` is a :class:`~hami_core.plugins.StandardBackend`. HAMi's generic rules that are Neuron's
too: health with no handshake (HAMi's ``CheckHealth`` is always healthy), the ``hami.io/aws-neuron-devices-allocated``
codec, no node lock and no node score. What is its own: devices synthesised from ``status.capacity`` (HAMi
``GetNodeDevices``), admission and requests over devices or NeuronCores (``MutateAdmission``,
``GenerateResourceRequests``), the fit (:mod:`hami_awsneuron.fit`) and the annotations the AWS Neuron device plugin
reads (``PatchAnnotations``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hami_awsneuron.config import AWSNeuronConfig
from hami_awsneuron.fit import fit_group, fit_single
from hami_awsneuron.requests import (
    MAX_CORE_COUNT,
    MAX_DEVICE_COUNT,
    CoreLayout,
    RequestError,
    split_core_request,
    validate_quantity,
)
from hami_awsneuron.topology import NODE_TYPE_KEY
from hami_core.plugins import (
    AdmissionFailed,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    Mutation,
    PodSingleDevice,
    QuotaView,
    ResourceNames,
    StandardBackend,
    as_int64,
    capacity_count,
    containers,
    metadata,
    node_capacity,
    resource,
    standard_allocation_annotations,
    unix_nanos,
)
from hami_core.wire.common import wire_error

#: HAMi's common word and device type: the request ``Type``, the pod-devices key, every registered device's type.
COMMON_WORD = "AWSNeuron"
VENDOR = "awsneuron"

ALLOCATED_ANNOTATION = "hami.io/aws-neuron-devices-allocated"
USE_UUID_ANNOTATION = "aws.amazon.com/use-neuron-uuid"
NOUSE_UUID_ANNOTATION = "aws.amazon.com/nouse-neuron-uuid"
#: Pod annotations for the AWS Neuron device plugin (HAMi's names, upper case as HAMi writes them).
ASSIGNED_INDEX = "AWS_NEURON_IDS"
ASSIGNED_NODE = "aws.amazon.com/predicate-node"
PREDICATE_TIME = "NEURON_ALLOC_TIME"
RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
ALLOCATED_FLAG = "NEURON_ALLOCATED"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: More cores per device would not fit HAMi's int32 core mask (``Devcore``).
MAX_MASK_BITS = 31


@dataclass(frozen=True, slots=True)
class NeuronBackend(StandardBackend):
    """AWS Neuron devices (Inferentia, Trainium) and their NeuronCores (HAMi ``AWSNeuronDevices``)."""

    #: HAMi's ``coresPerAWSNeuron``, learned from the first node with devices (see :class:`CoreLayout`).
    layout: CoreLayout = field(default_factory=CoreLayout, compare=False, repr=False)

    @classmethod
    def from_config(cls, cfg: AWSNeuronConfig) -> NeuronBackend:
        """The backend for a validated ``awsneuron:`` section: count and core resources, the allocated key and the
        UUID selection keys; no registration annotation, handshake, to-allocate key or lock. ``standard_capacity``
        is off: a group books devices whatever their slots, and free cores are mask bits, not a difference."""
        return cls(name=COMMON_WORD, vendor=VENDOR,
                   resource_names=ResourceNames(count=cfg.resource_count_name, cores=cfg.resource_core_name),
                   allocated_annotation=ALLOCATED_ANNOTATION, use_uuid_annotation=USE_UUID_ANNOTATION,
                   nouse_uuid_annotation=NOUSE_UUID_ANNOTATION, standard_capacity=False, config=cfg)

    # ----------------------------------------------------------------------------------- inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """HAMi ``GetNodeDevices``: one device per ``status.capacity[<count>]``, ``<node>-AWSNeuron-<i>``.

        Each device has ``Count`` = cores per device (one task per core), ``Devcore`` = the mask of those cores
        (3 for two), no memory, and the node's ``node.kubernetes.io/instance-type`` label under ``AWSNodeType``
        (the fit's topology rule). Cores per device come from the first node registered (core capacity / device
        capacity, :class:`CoreLayout`). No count key: no devices. A count of 0 is HAMi's ``device not found``
        error, and so is an unreadable quantity (the node keeps its previous devices).
        """
        names = self.resource_names
        name = str(metadata(node).get("name", ""))
        count = capacity_count(node, names.count)
        if count is None or count < 0:
            return []
        if count == 0:
            raise wire_error(f"node {name}: status.capacity[{names.count}]", f"device not found {names.count}")
        if self.layout.cores_per_device == 0:
            self.layout.cores_per_device = self._cores_per_device(node, name, count)
        cores = self.layout.cores_per_device
        mask = (1 << cores) - 1
        labels = metadata(node).get("labels") or {}
        custom = {NODE_TYPE_KEY: str(labels.get(INSTANCE_TYPE_LABEL, ""))}
        return [DeviceInfo(id=f"{name}-{COMMON_WORD}-{i}", index=i, count=cores, devmem=0, devcore=mask,
                           type=COMMON_WORD, numa=0, health=True, custom_info=custom) for i in range(count)]

    def _cores_per_device(self, node: Mapping[str, Any], name: str, count: int) -> int:
        """Core capacity // device capacity (0 without a readable core capacity, as Go ignores the error)."""
        key = self.resource_names.cores
        total = (as_int64(node_capacity(node, key)) if key else None) or 0
        where = f"node {name}: status.capacity[{key}]"
        if total < 0:
            raise wire_error(where, f"{total} NeuronCores is negative")
        if total // count > MAX_MASK_BITS:
            raise wire_error(where, f"{total // count} NeuronCores per device is more than HAMi's core mask holds "
                                    f"({MAX_MASK_BITS})")
        return total // count

    # ----------------------------------------------------------------------------------- admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission``: the container uses Neuron when it names the count or the core resource (limits,
        else requests); a quantity HAMi refuses fails admission (HAMi: an errored review, HTTP 500). Nothing is
        changed."""
        try:
            return Mutation(self._request_shape(container) is not None)
        except RequestError as exc:
            raise AdmissionFailed(f"container {container.get('name', '<unnamed>')}: {exc}") from None

    # ----------------------------------------------------------------------------------- requests
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        """HAMi ``GenerateResourceRequests``: the count resource wins and asks for that many whole devices with
        ``Coresreq`` = cores per device; else the core resource is split by :func:`split_core_request`. Memory and
        its percentage are 0. A quantity HAMi refuses means no request (HAMi logs it)."""
        try:
            shape = self._request_shape(container)
        except RequestError:
            return None
        return None if shape is None else DeviceRequest(self.name, shape[0], 0, 0, shape[1])

    def _request_shape(self, container: Mapping[str, Any]) -> tuple[int, int] | None:
        """``(Nums, Coresreq)`` of a container, ``None`` when it names neither resource."""
        names = self.resource_names
        raw = resource(container, names.count)
        if raw is not None:
            return validate_quantity(raw, names.count, MAX_DEVICE_COUNT), self.layout.cores_per_device
        raw = resource(container, names.cores)
        if raw is None:
            return None
        cores = validate_quantity(raw, names.cores, MAX_CORE_COUNT)
        return split_core_request(cores, self.layout, names.cores)

    # ----------------------------------------------------------------------------------- fit
    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy, quota: QuotaView | None) -> Sequence[FitResult]:
        """HAMi ``Fit`` on every node: a group (:func:`fit_group`) for several devices, else :func:`fit_single` with
        the ``aws.amazon.com/use-neuron-uuid`` selection and the ``mutex`` GPU policy. No quota (HAMi has none)."""
        if request.nums > 1:
            return [fit_group(c.devices, request) for c in candidates]
        sel = self.selection(pod)
        uuid_ok = (lambda dev: sel.uuid_ok(dev.id)) if sel.filters_uuid else None
        mutex = policy.has("mutex")
        return [fit_single(c.devices, request, name=self.name, uuid_ok=uuid_ok, mutex=mutex) for c in candidates]

    # ----------------------------------------------------------------------------------- reserve / bind
    def hami_allocation_annotations(self, pod: Mapping[str, Any], devices: PodSingleDevice, node: str,
                                    now: float) -> Mapping[str, str] | None:
        """HAMi ``PatchAnnotations``: the allocated key, and for the AWS Neuron device plugin ``AWS_NEURON_IDS``.

        A container with the count resource in its **limits** (> 0) lists device indexes; any other lists the
        NeuronCores its core masks give (``cores per device x index``, ``+1`` for the second core) and sets
        ``NEURON_RESOURCE_TYPE`` to the core resource. The list grows over the pod's containers (init first), so
        it ends as every container's ids in order. With any id: ``NEURON_ALLOC_TIME`` (Unix nanoseconds of the
        decision), ``NEURON_ALLOCATED=false`` and ``aws.amazon.com/predicate-node`` (the chosen node).
        """
        out = dict(standard_allocation_annotations(self, devices) or {})
        init, app = containers(pod)
        ordered = [*init, *app]
        per_device = self.layout.cores_per_device
        ids: list[str] = []
        for position, devs in enumerate(devices):
            if not devs or position >= len(ordered):
                continue
            limits = (ordered[position].get("resources") or {}).get("limits") or {}
            by_count = self.resource_names.count in limits
            whole = by_count and (as_int64(limits[self.resource_names.count]) or 0) > 0
            for d in devs:
                if by_count:
                    if whole:
                        ids.append(str(d.idx))
                    continue
                for bit, offset in ((1, 0), (2, 1)):
                    if d.usedcores & bit:
                        ids.append(str(per_device * d.idx + offset))
                        out[RESOURCE_TYPE] = self.resource_names.cores
            if ids:
                out.update({ASSIGNED_INDEX: ",".join(ids), PREDICATE_TIME: str(unix_nanos(now)),
                            ALLOCATED_FLAG: "false", ASSIGNED_NODE: node})
        return out
