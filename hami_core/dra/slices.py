"""ResourceSlices (resource.k8s.io/v1) for one node and one backend, as pure functions: build, compare, plan.

One pool per node and driver, named after the node (``spec.pool.name``), in as few slices as the API allows
(:data:`MAX_DEVICES_PER_SLICE` devices each; one slice for any real node). Every slice of the pool carries the
pool's ``generation`` and ``resourceSliceCount``, ``nodeName`` and the driver name. Each healthy device becomes a
``spec.devices[]`` entry: its attributes qualified by the driver name (``<driver>/uuid``), its capacities
(``memory`` as a byte quantity, ``cores``, ``shares``) and, when the device is shared, ``allowMultipleAllocations``
with a ``requestPolicy`` on every capacity (KEP-5075 consumable capacity). Unhealthy devices are withdrawn: left
out of the pool, so kube-scheduler's allocator stops placing claims on them (claims already allocated keep them).

:func:`plan` compares what is published with what should be and says what to write. The generation is bumped
only when the content changed; quantities are compared by value, since the API server rewrites ``81920Mi`` as
``80Gi``, so a resync against an unchanged node writes nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hami_core.dra.model import (
    ATTR_INDEX,
    ATTR_MODE,
    ATTR_NUMA,
    ATTR_TYPE,
    ATTR_UUID,
    ATTR_VENDOR,
    DOMAIN,
    MIB,
    AttributeValue,
    DraCapacity,
    DraDevice,
    driver_name,
)
from hami_core.plugins.errors import HamiError, WireFormatError
from hami_core.wire.quantity import parse_quantity

__all__ = [
    "API_VERSION",
    "KIND",
    "MANAGED_BY_LABEL",
    "MAX_DEVICES_PER_SLICE",
    "Plan",
    "SliceError",
    "build_slices",
    "canonical",
    "device_entry",
    "plan",
    "pool_generation",
    "quantity",
    "slice_name",
]

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceSlice"
#: Label on every slice hami publishes (the value is the node name), so an operator can list them all.
MANAGED_BY_LABEL = f"dra.{DOMAIN}/node"
#: ``ResourceSliceMaxDevices`` of resource.k8s.io/v1 (the limit for slices without taints or counters).
MAX_DEVICES_PER_SLICE = 128
#: ``ResourceSliceMaxAttributesAndCapacitiesPerDevice``.
MAX_ATTRIBUTES_AND_CAPACITIES = 32
#: ``DeviceAttributeMaxValueLength``: a string attribute's longest value.
MAX_STRING_VALUE = 64
#: ``DriverNameMaxLength``; an attribute name's domain is the driver name and is bounded the same.
MAX_DRIVER_NAME = 63
#: ``DeviceMaxIDLength``: the identifier after the domain of an attribute or capacity name.
MAX_ID = 32
#: DNS subdomain (object names; the pool name is the node name, itself one).
MAX_NAME = 253

_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_STANDARD_ATTRIBUTES = frozenset({ATTR_UUID, ATTR_INDEX, ATTR_TYPE, ATTR_VENDOR, ATTR_NUMA, ATTR_MODE})


class SliceError(HamiError):
    """The devices of a backend cannot be published as they are; the message names the node, device and field."""


# ------------------------------------------------------------------------------------------ names and values

def _driver_word(driver: str) -> str:
    """``gpu`` for ``hami-core-gpu.project-hami.io``: the part of the driver name that tells backends apart."""
    return driver.split(".", 1)[0].removeprefix("hami-core-") or "dev"


def slice_name(node: str, driver: str, index: int = 0) -> str:
    """The name of slice ``index`` of ``node``'s pool of ``driver``: ``<node>-<word>`` (``-<index>`` after the
    first), at most 253 characters: a node name too long for that is cut and given a hash of itself, so two long
    node names never share a slice name."""
    suffix = f"-{_driver_word(driver)}" + (f"-{index}" if index else "")
    if len(node) + len(suffix) <= MAX_NAME:
        return node + suffix
    digest = hashlib.sha256(node.encode()).hexdigest()[:10]
    head = node[: MAX_NAME - len(suffix) - len(digest) - 1].rstrip(".-")
    return f"{head}-{digest}{suffix}"


def quantity(value: int, unit: int = 1) -> str:
    """A quantity string: ``81920Mi`` for a byte count of whole MiB (``unit=MIB``), else the plain integer."""
    if unit == MIB and value % MIB == 0 and value:
        return f"{value // MIB}Mi"
    return str(value)


def _attribute(value: AttributeValue) -> dict[str, Any]:
    if isinstance(value, bool):  # before int: bool is an int in Python
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": value}


def _check_name(node: str, dev: DraDevice, kind: str, name: str) -> None:
    if not _C_IDENTIFIER.match(name) or len(name) > MAX_ID:
        raise SliceError(f"node {node}: device {dev.name} ({dev.uuid}): {kind} name {name!r} must be a C identifier "
                         f"of at most {MAX_ID} characters")


def _capacity(node: str, dev: DraDevice, name: str, cap: DraCapacity, unit: int) -> dict[str, Any]:
    _check_name(node, dev, "capacity", name)
    if cap.value < 0:
        raise SliceError(f"node {node}: device {dev.name} ({dev.uuid}): capacity {name} is negative ({cap.value})")
    out: dict[str, Any] = {"value": quantity(cap.value, unit)}
    if not dev.shared:
        return out  # a request policy needs allowMultipleAllocations
    step = max(cap.step, 1)
    minimum = min(max(cap.minimum, 0), cap.value)
    if cap.value < minimum + step:
        return out  # the API requires min + step <= value: too small a capacity is consumed unconstrained
    default = min(max(cap.default, minimum), cap.value)
    default -= (default - minimum) % step  # default, like max, must be reachable in steps from min
    span: dict[str, Any] = {"min": quantity(minimum, unit), "step": quantity(step, unit)}
    if cap.maximum is not None and cap.maximum < cap.value:
        top = max(cap.maximum, minimum)
        span["max"] = quantity(top - (top - minimum) % step, unit)
        default = min(default, top)
    out["requestPolicy"] = {"default": quantity(default, unit), "validRange": span}
    return out


def device_entry(node: str, dev: DraDevice, vendor: str) -> dict[str, Any]:
    """One ``spec.devices[]`` entry for ``dev``; :class:`SliceError` for what the API server would refuse."""
    driver = dev.driver
    if not _DNS_LABEL.match(dev.name) or len(dev.name) > 63:
        raise SliceError(f"node {node}: device {dev.name!r} ({dev.uuid}): the name must be a DNS label")
    values: dict[str, AttributeValue] = {ATTR_UUID: dev.uuid, ATTR_INDEX: dev.index, ATTR_TYPE: dev.type,
                                         ATTR_VENDOR: vendor, ATTR_NUMA: dev.numa}
    if dev.mode:
        values[ATTR_MODE] = dev.mode
    for name, value in dev.attributes.items():
        if name in _STANDARD_ATTRIBUTES:
            raise SliceError(f"node {node}: device {dev.name} ({dev.uuid}): attribute {name!r} is a standard "
                             "attribute; set the DraDevice field instead")
        if not isinstance(value, int | str):
            raise SliceError(f"node {node}: device {dev.name} ({dev.uuid}): attribute {name}: {value!r} is not an "
                             "int, bool or string")
        values[name] = value
    attributes: dict[str, Any] = {}
    for name, value in values.items():
        _check_name(node, dev, "attribute", name)
        if isinstance(value, str) and len(value) > MAX_STRING_VALUE:
            raise SliceError(f"node {node}: device {dev.name} ({dev.uuid}): attribute {name}: the value has "
                             f"{len(value)} characters, more than {MAX_STRING_VALUE}")
        attributes[f"{driver}/{name}"] = _attribute(value)
    capacity = {name: _capacity(node, dev, name, cap, MIB if cap.step % MIB == 0 and cap.step else 1)
                for name, cap in dev.capacity.items()}
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise SliceError(f"node {node}: device {dev.name} ({dev.uuid}): {len(attributes)} attributes and "
                         f"{len(capacity)} capacities, more than {MAX_ATTRIBUTES_AND_CAPACITIES}")
    entry: dict[str, Any] = {"name": dev.name, "attributes": attributes}
    if capacity:
        entry["capacity"] = capacity
    if dev.shared:
        entry["allowMultipleAllocations"] = True
    return entry


# ------------------------------------------------------------------------------------------ building

def build_slices(node: str, backend: str, devices: Iterable[DraDevice], *, generation: int = 1,
                 vendor: str = "") -> list[dict[str, Any]]:
    """The ResourceSlices of ``node``'s pool of ``backend``'s driver at ``generation``: the healthy ``devices``
    (sorted by index), :data:`MAX_DEVICES_PER_SLICE` a slice; one slice with no devices when none is healthy (the
    pool then exists and says so, at a new generation). ``vendor`` is the ``vendor`` attribute (the backend's
    vendor key). Raises :class:`SliceError` naming the node, the device and the field for what the API server
    would refuse (a device of another backend, two devices of one name, an attribute too long ...)."""
    driver = driver_name(backend)
    if len(driver) > MAX_DRIVER_NAME or not _DNS_SUBDOMAIN.match(driver):
        raise SliceError(f"backend {backend}: driver name {driver!r} is not a DNS subdomain of at most "
                         f"{MAX_DRIVER_NAME} characters")
    if not node or len(node) > MAX_NAME or not _DNS_SUBDOMAIN.match(node):
        raise SliceError(f"node name {node!r}: not a DNS subdomain of at most {MAX_NAME} characters")
    if generation < 1:
        raise SliceError(f"node {node}: pool generation {generation} must be 1 or more")
    entries: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for dev in sorted(devices, key=lambda d: (d.index, d.uuid)):
        if dev.backend != backend:
            raise SliceError(f"node {node}: device {dev.uuid} belongs to backend {dev.backend}, not {backend}")
        if dev.name in seen:
            raise SliceError(f"node {node}: devices {seen[dev.name]} and {dev.uuid} have the same name {dev.name} "
                             f"(index {dev.index})")
        seen[dev.name] = dev.uuid
        if dev.healthy:
            entries.append(device_entry(node, dev, vendor))
    chunks = [entries[i:i + MAX_DEVICES_PER_SLICE] for i in range(0, len(entries), MAX_DEVICES_PER_SLICE)] or [[]]
    out = []
    for i, chunk in enumerate(chunks):
        spec: dict[str, Any] = {"driver": driver, "nodeName": node,
                                "pool": {"name": node, "generation": generation, "resourceSliceCount": len(chunks)}}
        if chunk:
            spec["devices"] = chunk
        out.append({"apiVersion": API_VERSION, "kind": KIND,
                    "metadata": {"name": slice_name(node, driver, i), "labels": {MANAGED_BY_LABEL: node}},
                    "spec": spec})
    return out


# ------------------------------------------------------------------------------------------ comparing

def _value(raw: Any) -> Fraction | Any:
    try:
        return parse_quantity(raw)
    except WireFormatError:
        return raw  # compared as it is: a value we did not write differs, and the slice is rewritten


def _policy(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        return raw
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "validRange" and isinstance(value, Mapping):
            out[key] = {k: _value(v) for k, v in value.items() if v is not None}
        elif key == "validValues" and isinstance(value, list):
            out[key] = [_value(v) for v in value]
        elif value is not None:
            out[key] = _value(value)
    return out


def _device(raw: Any) -> Any:
    if not isinstance(raw, Mapping):
        return raw
    capacity = {name: {"value": _value((cap or {}).get("value")),
                       "requestPolicy": _policy((cap or {}).get("requestPolicy"))}
                for name, cap in (raw.get("capacity") or {}).items()}
    return {"name": raw.get("name"), "attributes": raw.get("attributes") or {}, "capacity": capacity,
            "allowMultipleAllocations": bool(raw.get("allowMultipleAllocations")),
            "taints": raw.get("taints") or []}


def canonical(resource_slice: Mapping[str, Any]) -> dict[str, Any]:
    """What a slice publishes, comparable across writes: name, driver, node, pool name and count, labels we set,
    devices with quantities as exact values. Not the generation (that is what a change bumps)."""
    meta = resource_slice.get("metadata") or {}
    spec = resource_slice.get("spec") or {}
    pool = spec.get("pool") or {}
    return {"name": meta.get("name"), "label": (meta.get("labels") or {}).get(MANAGED_BY_LABEL),
            "driver": spec.get("driver"), "nodeName": spec.get("nodeName"), "pool": pool.get("name"),
            "count": pool.get("resourceSliceCount"), "devices": [_device(d) for d in spec.get("devices") or []]}


def pool_generation(slices: Iterable[Mapping[str, Any]]) -> int:
    """The highest ``spec.pool.generation`` among ``slices`` (0 for none or none readable)."""
    best = 0
    for item in slices:
        raw = ((item.get("spec") or {}).get("pool") or {}).get("generation")
        if isinstance(raw, int) and not isinstance(raw, bool):
            best = max(best, raw)
    return best


@dataclass(frozen=True)
class Plan:
    """What to write so that the published pool is the wanted one: ``create`` and ``update`` slices (an update
    carries the existing ``metadata.resourceVersion``, a compare-and-swap) and the names to ``delete``;
    ``generation`` is the pool's generation afterwards. ``changed`` False: nothing to write."""

    generation: int
    create: list[dict[str, Any]] = field(default_factory=list)
    update: list[dict[str, Any]] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.create or self.update or self.delete)


def plan(node: str, backend: str, devices: Iterable[DraDevice], existing: Sequence[Mapping[str, Any]], *,
         vendor: str = "") -> Plan:
    """Compare ``existing`` (the slices of ``backend``'s driver on ``node``, as listed) with what ``devices``
    should publish. Unchanged (same slices, same content, one generation throughout): an empty plan at the current
    generation. Else every wanted slice is written at the current generation + 1 (consumers use only the highest
    generation of a pool, so a pool is never seen half old, half new) and the slices no longer wanted go."""
    devices = list(devices)
    current = pool_generation(existing)
    same_generation = len({((s.get("spec") or {}).get("pool") or {}).get("generation") for s in existing}) <= 1
    wanted = build_slices(node, backend, devices, generation=max(current, 1), vendor=vendor)
    have = {str((s.get("metadata") or {}).get("name")): s for s in existing}
    if current >= 1 and same_generation and len(have) == len(existing) and \
            sorted((canonical(s) for s in existing), key=lambda c: str(c["name"])) == \
            sorted((canonical(s) for s in wanted), key=lambda c: str(c["name"])):
        return Plan(current)
    generation = current + 1
    wanted = build_slices(node, backend, devices, generation=generation, vendor=vendor)
    result = Plan(generation)
    for item in wanted:
        old = have.get(item["metadata"]["name"])
        if old is None:
            result.create.append(item)
        else:
            version = (old.get("metadata") or {}).get("resourceVersion")
            if version:
                item["metadata"]["resourceVersion"] = version
            result.update.append(item)
    names = {item["metadata"]["name"] for item in wanted}
    result.delete.extend(sorted(name for name in have if name not in names))
    return result
