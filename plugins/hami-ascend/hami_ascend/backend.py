"""HAMi's Ascend backends, scheduler side (vendors.md Part C; A.3-A.9 for the shared contract).

One :class:`NpuBackend` exists per configured chip model (:class:`~hami_ascend.config.ChipConfig`); its common
word (``Ascend910B3``, ...) is the request Type. It is a :class:`~hami_core.plugins.StandardBackend`, so HAMi's
generic rules hold where Ascend follows them: the per-chip handshake health rule on
``hami.io/node-handshake-<commonWord>`` for nodes that register the chip (A.5), the request count, the
allocation codec on ``hami.io/<commonWord>-devices-*`` (A.4), reading them back, and the shared node lock
``hami.io/mutex.lock`` (A.6). What differs is registration (JSON only, blank = none), admission (templates,
910C modules, soft split), the memory and core request steps, the fit and node score
(:mod:`hami_ascend.fit`) and the extra runtime-info annotations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from hami_ascend.config import AscendConfig, ChipConfig
from hami_ascend.fit import ASCEND910_PREFIX, ASCEND910C, fit_node, topology_score
from hami_core.plugins import (
    AdmissionFailed,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    Mutation,
    NodeScore,
    PodSingleDevice,
    ResourceNames,
    ScoreCandidate,
    StandardBackend,
    WireFormatError,
    as_whole,
    resource,
    set_env,
    standard_allocation_annotations,
)

# Not from hami_core.plugins: there the name ``annotations`` is the ``from __future__ import annotations`` feature.
from hami_core.plugins.objects import annotations
from hami_core.wire import gojson as _json
from hami_core.wire.common import INT32_MAX
from hami_core.wire.keys import NODE_LOCK
from hami_core.wire.nodes import decode_node_devices_json
from hami_core.wire.quantity import parse_quantity
from hami_core.wire.times import encode_unix_seconds

VENDOR = "ascend"
#: Pod annotation selecting hami-core soft split (arbitrary memory and cores) instead of templates.
VNPU_MODE = "huawei.com/vnpu-mode"
VNPU_MODE_HAMI_CORE = "hami-core"
#: Node annotation written by the device plugin; overrides the global ``hamiVnpuCore`` for the node.
NODE_VNPU_CORE = "hami-vnpu-core"
#: Pod annotation with the decision time in Unix seconds (no ``hami.io/`` prefix, as in HAMi).
PREDICATE_TIME = "predicate-time"
#: Environment variable blanked by ``overwriteEnv`` in containers that do not request the chip.
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"


def backends(cfg: AscendConfig) -> list[NpuBackend]:
    """One :class:`NpuBackend` per chip of a validated ``vnpus:`` section (C.1)."""
    return [NpuBackend.from_chip(chip, hami_vnpu_core=cfg.hami_vnpu_core) for chip in cfg.chips()]


def is_hami_core_pod(pod: Mapping[str, Any]) -> bool:
    """The pod asks for hami-core soft split: ``huawei.com/vnpu-mode: hami-core`` (C.3)."""
    return annotations(pod).get(VNPU_MODE) == VNPU_MODE_HAMI_CORE


def _value(value: Any, what: str) -> int:
    """Go ``Quantity.Value``: the value rounded up to an integer; malformed quantities reject the pod."""
    try:
        return math.ceil(parse_quantity(value))
    except WireFormatError as exc:
        raise AdmissionFailed(f"{what}: {exc}") from None


@dataclass(frozen=True, slots=True)
class NpuBackend(StandardBackend):
    """One Ascend chip model (C.1-C.9); ``config`` is its :class:`ChipConfig`."""

    # Overrides call the base as ``StandardBackend.<method>(self, ...)``: zero-argument ``super()`` fails in a
    # slots dataclass (the decorator builds a new class).

    #: ``MemPercentagereq``: 100 (the whole chip) without memory, else 0 (``Memreq`` wins) (C.6)
    memory_given_percentage: ClassVar[int] = 0

    #: ``vnpus.hamiVnpuCore``: whether a node without a ``hami-vnpu-core`` annotation runs soft split (C.7.1).
    hami_vnpu_core: bool = False

    @classmethod
    def from_chip(cls, chip: ChipConfig, *, hami_vnpu_core: bool = False) -> NpuBackend:
        """The backend of one chip: HAMi's per-common-word annotation keys and the shared node lock (C.3, C.8).

        ``standard_capacity`` stays off: in hami-core mode a device's core total is taken as 100 whatever
        ``devcore`` it registers, so the engine's numeric prefilter could drop a node that fits.
        """
        word = chip.common_word
        return cls(name=word, vendor=VENDOR,
                   resource_names=ResourceNames(count=chip.resource_name, memory=chip.resource_memory_name,
                                                cores=chip.resource_core_name,
                                                memory_factor=max(chip.memory_factor, 1)),
                   register_annotation=f"hami.io/node-register-{word}",
                   handshake_annotation=f"hami.io/node-handshake-{word}",
                   to_allocate_annotation=f"hami.io/{word}-devices-to-allocate",
                   allocated_annotation=f"hami.io/{word}-devices-allocated",
                   use_uuid_annotation=f"hami.io/use-{word}-uuid", nouse_uuid_annotation=f"hami.io/no-use-{word}-uuid",
                   lock_annotation=NODE_LOCK, standard_capacity=False, config=chip, hami_vnpu_core=hami_vnpu_core)

    @property
    def chip(self) -> ChipConfig:
        chip: ChipConfig = self.config
        return chip

    @property
    def runtime_annotation(self) -> str:
        """``huawei.com/<commonWord>``: the runtime-info JSON the device plugin reads (C.3)."""
        return f"huawei.com/{self.name}"

    def node_supports_hami_core(self, node_annotations: Mapping[str, str]) -> bool:
        """C.7.1: the node's ``hami-vnpu-core`` annotation (``"true"`` or not) when present, else ``hamiVnpuCore``."""
        value = node_annotations.get(NODE_VNPU_CORE)
        return value == "true" if value is not None else self.hami_vnpu_core

    # ------------------------------------------------------------------------------------ inventory
    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        """Devices from ``hami.io/node-register-<commonWord>`` (C.3): a JSON list, keys case-insensitive.

        No annotation, a blank one or ``[]`` means no devices of this chip (not the base's "no gpu found");
        malformed JSON (HAMi's colon form included) raises :class:`WireFormatError` naming the annotation, so
        the engine keeps the node's previous devices.
        """
        key = self.register_annotation or f"hami.io/node-register-{self.name}"
        raw = annotations(node).get(key)
        if raw is None or not raw.strip():
            return []
        return decode_node_devices_json(raw, key=key)

    # ------------------------------------------------------------------------------------ admission
    def hami_mutate_container(self, pod: dict[str, Any], container: dict[str, Any]) -> Mutation:
        """HAMi ``MutateAdmission`` for one Ascend chip (C.5): whether the container requests it.

        Only a count in **limits** counts. 910C super-pod requests of 1 become 2 (odd counts > 1 are refused);
        hard split refuses ``-core`` requests and rounds memory up to a template (or the whole card); memory
        limit and request are then both set to the final value. Raises :class:`AdmissionFailed`.
        """
        chip = self.chip
        names = self.resource_names
        cname = container.get("name", "<unnamed>")
        resources = container.setdefault("resources", {})
        limits = resources.get("limits") or {}
        if names.count not in limits:
            if not resources:
                del container["resources"]
            if chip.overwrite_env:
                set_env(container, VISIBLE_DEVICES_ENV, "")
            return Mutation(False)
        resources["limits"] = limits
        count = _value(limits[names.count], f"container {cname}: {names.count}")
        if chip.common_word == ASCEND910C and chip.super_pod:
            if count == 1:
                # The smallest unit is one module of two NPUs.
                limits[names.count] = "2"
                requests = resources.get("requests")
                if requests is not None and names.count in requests:
                    requests[names.count] = "2"
            elif count % 2 != 0:
                raise AdmissionFailed(f"container {cname}: {ASCEND910C} device request must be 1 or 2*n, got {count}")
        hami_core = is_hami_core_pod(pod)
        if not hami_core and names.cores:
            raw_core = resource(container, names.cores)
            if raw_core is not None and _value(raw_core, f"container {cname}: {names.cores}") > 0:
                raise AdmissionFailed(f"container {cname}: {names.cores} is only supported in hami-core (soft split) "
                                      f"mode; set the pod annotation {VNPU_MODE}: {VNPU_MODE_HAMI_CORE}")
        memory = chip.memory_allocatable
        raw_mem = limits.get(names.memory) if names.memory else None
        if raw_mem is not None:
            value = _value(raw_mem, f"container {cname}: {names.memory}")
            if hami_core:
                memory = value
            else:
                memory, _ = chip.trim(value)
                if memory <= 0:
                    raise AdmissionFailed(f"container {cname}: {names.memory} {value} is invalid "
                                          f"(more than the {chip.memory_capacity} MiB of a {chip.common_word})")
        if not hami_core and count > 1 and memory != chip.memory_allocatable:
            raise AdmissionFailed(f"container {cname}: vNPU not supported for multiple devices "
                                  f"({names.count}={count} with {names.memory}={memory})")
        if names.memory:
            limits[names.memory] = str(memory)
            requests = resources.get("requests")
            if requests is None:
                requests = resources["requests"] = {}
            requests[names.memory] = str(memory)
        spec = pod.setdefault("spec", {})
        if not spec.get("runtimeClassName") and chip.runtime_class_name:
            spec["runtimeClassName"] = chip.runtime_class_name
        return Mutation(True)

    # ------------------------------------------------------------------------------------ requests (C.6)
    def request_memory(self, container: Mapping[str, Any]) -> int | None:
        """MiB (x ``memoryFactor``): a negative quantity drops the request, a whole number or not (``-1m``: HAMi
        #2601 checks the sign before ``AsInt64``, which refuses ``-1m``); any other quantity that is not a whole
        number is ignored (0: the whole chip); otherwise the base rule: a whole number above MaxInt32, or one that
        overflows int32 once multiplied, drops the request (one beyond int64 too)."""
        raw = resource(container, self.resource_names.memory)
        if raw is not None and as_whole(raw) is None:
            try:
                negative = parse_quantity(raw) < 0
            except WireFormatError:
                negative = False
            return None if negative else 0
        return StandardBackend.request_memory(self, container)

    def request_cores(self, container: Mapping[str, Any]) -> int | None:
        """``-core`` as Go's ``Quantity.Value`` (a fraction rounds up), 0 when absent; a malformed quantity or one
        outside 0..MaxInt32 drops the request."""
        raw = resource(container, self.resource_names.cores)
        if raw is None:
            return 0
        try:
            cores = math.ceil(parse_quantity(raw))
        except WireFormatError:
            return None
        return cores if 0 <= cores <= INT32_MAX else None

    # ------------------------------------------------------------------------------------ filter / score
    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Sequence[FitCandidate],
                          policy: GpuPolicy) -> Sequence[FitResult]:
        """:func:`~hami_ascend.fit.fit_node` on every candidate node (C.7); no ResourceQuota check."""
        selection = self.selection(pod)
        hami_core = is_hami_core_pod(pod)
        mutex = policy.has("mutex")
        return [fit_node(self.name, cand.devices, request, hami_core=hami_core,
                         node_hami_core=self.node_supports_hami_core(cand.node.annotations),
                         selection=selection, mutex=mutex)
                for cand in candidates]

    def hami_score_nodes(self, candidates: Sequence[ScoreCandidate]) -> Sequence[NodeScore | None] | None:
        """The HCCS topology score of this chip's devices per candidate (raw, not policy neutral); ``None`` for
        chips without topology (only ``Ascend910*``), so they add nothing."""
        if not self.name.startswith(ASCEND910_PREFIX):
            return None
        name = self.name
        return [NodeScore(topology_score(name, cand.assignment[name])) if name in cand.assignment else None
                for cand in candidates]

    # ------------------------------------------------------------------------------------ annotations
    def runtime_info(self, devices: PodSingleDevice, *, hami_core: bool) -> str:
        """The ``huawei.com/<commonWord>`` JSON (C.3): one ``{"UUID","temp","memory","core"}`` per device.

        ``temp`` is the template the booked memory maps to (left out in hami-core mode and for a whole
        card); ``memory`` and ``core`` are left out when 0 (Go ``omitempty``).
        """
        chip = self.chip
        out: list[dict[str, Any]] = []
        for ctr in devices:
            for dev in ctr:
                info: dict[str, Any] = {}
                if dev.uuid:
                    info["UUID"] = dev.uuid
                if not hami_core:
                    _, temp = chip.trim(dev.usedmem)
                    if temp:
                        info["temp"] = temp
                if dev.usedmem:
                    info["memory"] = dev.usedmem
                if dev.usedcores:
                    info["core"] = dev.usedcores
                out.append(info)
        return _json.dumps(out)

    def hami_allocation_annotations(self, pod: Mapping[str, Any], devices: PodSingleDevice,
                                    now: float) -> Mapping[str, str] | None:
        """HAMi's to-allocate/allocated pair, then the runtime-info JSON and ``predicate-time`` (Unix seconds of
        the decision, the same instant as ``hami.io/vgpu-time``) when a container got devices (C.3)."""
        out = dict(standard_allocation_annotations(self, devices) or {})
        if any(devices):
            out[self.runtime_annotation] = self.runtime_info(devices, hami_core=is_hami_core_pod(pod))
            out[PREDICATE_TIME] = encode_unix_seconds(now)
        return out
