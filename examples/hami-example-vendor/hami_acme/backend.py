"""The ACME NPU backend: plain functions over Kubernetes JSON; :mod:`hami_acme.plugin` wires them to hooks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_core.plugins.errors import ConfigError, WireFormatError
from hami_core.plugins.fit import standard_fit
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    FitCandidate,
    FitResult,
    GpuPolicy,
    ResourceNames,
)
from hami_core.wire import keys
from hami_core.wire.nodes import decode_node_devices
from hami_core.wire.quantity import quantity_to_int

#: HAMi's "common word": the request type, and a word every registered device type contains.
COMMON_WORD = "ACME"
#: The plugin's short name: its entry point name and its section in device-config.yaml.
VENDOR = "acme"
REGISTER = "hami.io/node-acme-register"


@dataclass(frozen=True)
class AcmeConfig:
    """The ``acme:`` section of device-config.yaml."""

    resource_count_name: str = "acme.com/npu"
    resource_memory_name: str = "acme.com/npu-mem"
    resource_core_name: str = "acme.com/npu-cores"


_FIELDS = {"resourceCountName": "resource_count_name", "resourceMemoryName": "resource_memory_name",
           "resourceCoreName": "resource_core_name"}


def parse_config(section: Mapping[str, Any] | None) -> AcmeConfig:
    """Validate the ``acme:`` section; a wrong key or value raises :class:`ConfigError` naming it."""
    values = {}
    for key, value in (section or {}).items():
        if key not in _FIELDS:
            raise ConfigError(f"acme.{key}: unknown key (expected one of {', '.join(_FIELDS)})")
        if not isinstance(value, str) or not value:
            raise ConfigError(f"acme.{key}: must be a non-empty string, got {value!r}")
        values[_FIELDS[key]] = value
    return AcmeConfig(**values)


def make_backend(cfg: AcmeConfig) -> DeviceBackend:
    return DeviceBackend(
        name=COMMON_WORD,
        vendor=VENDOR,
        resource_names=ResourceNames(count=cfg.resource_count_name, memory=cfg.resource_memory_name,
                                     cores=cfg.resource_core_name),
        register_annotation=REGISTER,
        handshake_annotation="hami.io/node-handshake-acme",
        to_allocate_annotation="hami.io/acme-devices-to-allocate",
        allocated_annotation="hami.io/acme-devices-allocated",
        lock_annotation=keys.NODE_LOCK,
        standard_capacity=True,  # we use standard_fit
        config=cfg,
    )


def node_devices(backend: DeviceBackend, node: Mapping[str, Any]) -> list[DeviceInfo]:
    """The cards of ``hami.io/node-acme-register``; none when the node has no such annotation."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(REGISTER)
    if raw is None or not raw.strip():
        return []
    return decode_node_devices(raw, key=REGISTER)  # raises WireFormatError naming the key


def _limit(container: Mapping[str, Any], name: str) -> int | None:
    """A resource quantity (limits first, then requests); ``None`` when absent or unreadable."""
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(name)
    if value is None:
        value = (resources.get("requests") or {}).get(name)
    if value is None:
        return None
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


def container_request(backend: DeviceBackend, container: Mapping[str, Any]) -> DeviceRequest | None:
    """What one container asks of the ACME backend; ``None`` when it asks for no card."""
    names = backend.resource_names
    nums = _limit(container, names.count)
    if not nums or nums <= 0:
        return None
    mem = _limit(container, names.memory) or 0
    cores = _limit(container, names.cores) or 0
    # No memory asked: the whole card (HAMi's 100 %).
    pct = 100 if mem <= 0 else MEM_PERCENTAGE_UNSET
    return DeviceRequest(COMMON_WORD, nums, max(mem, 0), pct, max(cores, 0))


def requests_card(backend: DeviceBackend, container: Mapping[str, Any]) -> bool:
    """Admission: whether the container asks for ACME cards (ACME sets no defaults, so this is idempotent)."""
    return container_request(backend, container) is not None


def filter_nodes(request: DeviceRequest, candidates: Sequence[FitCandidate], policy: GpuPolicy) -> list[FitResult]:
    """HAMi's standard fit on every candidate node, with the ``mutex`` GPU policy."""
    if request.backend != COMMON_WORD:
        return [FitResult.unschedulable(f"{len(c.devices)}/{len(c.devices)} CardTypeMismatch") for c in candidates]
    return [standard_fit(c.devices, request, mutex=policy.has("mutex")) for c in candidates]
