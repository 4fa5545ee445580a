"""Everything a vendor plugin needs, from one import: ``from hami_core.plugins import StandardBackend, hookimpl``.

The contract (hook specifications, the objects plugins exchange, errors), the base class with HAMi's generic
behaviour (:class:`StandardBackend`), the standard fit and the helpers every backend uses (container resources,
integer quantities, node capacity, selection annotations, config sections, times, node context). Names load on
first use, so ``import hami_core`` stays cheap for a plugin that needs only ``hookimpl``.
"""

# No ``from __future__ import annotations`` here: it would bind the name ``annotations`` (a helper below).
import importlib
from typing import TYPE_CHECKING, Any

from hami_core.plugins.errors import (
    AdmissionDenied,
    AdmissionFailed,
    ConfigError,
    HamiError,
    PermanentError,
    PluginError,
    TemporaryError,
    WireFormatError,
)
from hami_core.plugins.hookspecs import hookimpl

_TYPES = ("ContainerAllocation", "ContainerDevice", "ContainerRequests", "DeviceBackend", "DeviceInfo",
          "DeviceRequest", "DeviceSpec", "DeviceUsage", "FilterCode", "FitCandidate", "FitResult", "GpuPolicy",
          "HealthReport", "HealthWatch", "LockSpec", "MEM_PERCENTAGE_UNSET", "MigInstance", "MigProfile", "Mount",
          "Mutation", "NodeBatch", "NodeScore", "NodeView", "Placement", "PodDevices", "PodSingleDevice",
          "PolicyInfo", "QuotaEntry", "QuotaView", "ResourceNames", "ScoreCandidate", "UsageTotals")
#: name → the module that defines it (loaded on first access)
_LAZY: dict[str, str] = {
    **dict.fromkeys(_TYPES, "hami_core.plugins.types"),
    **dict.fromkeys(("StandardBackend", "same_devices_rule", "standard_allocation_annotations",
                     "standard_decode_allocation", "standard_node_lock"), "hami_core.plugins.standard"),
    **dict.fromkeys(("CustomRule", "DevicePredicate", "QuotaCheck", "collapse", "memory_to_book", "quota_predicate",
                     "standard_fit"), "hami_core.plugins.fit"),
    **dict.fromkeys(("Selection", "as_int64", "as_whole", "capacity_count", "capacity_health", "node_capacity",
                     "parse_section", "pydantic_error", "quantity_value", "resource", "set_env", "unix_nanos"),
                    "hami_core.plugins.helpers"),
    **dict.fromkeys(("HANDSHAKE_TIMEOUT_S", "allocatable_count", "generic_health", "standard_health"),
                    "hami_core.plugins.health"),
    **dict.fromkeys(("annotations", "containers", "metadata", "pod_key", "pod_ref"), "hami_core.plugins.objects"),
    "current": "hami_core.plugins.node_context",
}

__all__ = [
    "HANDSHAKE_TIMEOUT_S",
    "MEM_PERCENTAGE_UNSET",
    "AdmissionDenied",
    "AdmissionFailed",
    "ConfigError",
    "ContainerAllocation",
    "ContainerDevice",
    "ContainerRequests",
    "CustomRule",
    "DeviceBackend",
    "DeviceInfo",
    "DevicePredicate",
    "DeviceRequest",
    "DeviceSpec",
    "DeviceUsage",
    "FilterCode",
    "FitCandidate",
    "FitResult",
    "GpuPolicy",
    "HamiError",
    "HealthReport",
    "HealthWatch",
    "LockSpec",
    "MigInstance",
    "MigProfile",
    "Mount",
    "Mutation",
    "NodeBatch",
    "NodeScore",
    "NodeView",
    "PermanentError",
    "Placement",
    "PluginError",
    "PodDevices",
    "PodSingleDevice",
    "PolicyInfo",
    "QuotaCheck",
    "QuotaEntry",
    "QuotaView",
    "ResourceNames",
    "ScoreCandidate",
    "Selection",
    "StandardBackend",
    "TemporaryError",
    "UsageTotals",
    "WireFormatError",
    "allocatable_count",
    "annotations",
    "as_int64",
    "as_whole",
    "capacity_count",
    "capacity_health",
    "collapse",
    "containers",
    "current",
    "generic_health",
    "hookimpl",
    "memory_to_book",
    "metadata",
    "node_capacity",
    "parse_section",
    "pod_key",
    "pod_ref",
    "pydantic_error",
    "quantity_value",
    "quota_predicate",
    "resource",
    "same_devices_rule",
    "set_env",
    "standard_allocation_annotations",
    "standard_decode_allocation",
    "standard_fit",
    "standard_health",
    "standard_node_lock",
    "unix_nanos",
]

if TYPE_CHECKING:
    from hami_core.plugins.fit import (
        CustomRule,
        DevicePredicate,
        QuotaCheck,
        collapse,
        memory_to_book,
        quota_predicate,
        standard_fit,
    )
    from hami_core.plugins.health import HANDSHAKE_TIMEOUT_S, allocatable_count, generic_health, standard_health
    from hami_core.plugins.helpers import (
        Selection,
        as_int64,
        as_whole,
        capacity_count,
        capacity_health,
        node_capacity,
        parse_section,
        pydantic_error,
        quantity_value,
        resource,
        set_env,
        unix_nanos,
    )
    from hami_core.plugins.node_context import current
    from hami_core.plugins.objects import annotations, containers, metadata, pod_key, pod_ref
    from hami_core.plugins.standard import (
        StandardBackend,
        same_devices_rule,
        standard_allocation_annotations,
        standard_decode_allocation,
        standard_node_lock,
    )
    from hami_core.plugins.types import (
        MEM_PERCENTAGE_UNSET,
        ContainerAllocation,
        ContainerDevice,
        ContainerRequests,
        DeviceBackend,
        DeviceInfo,
        DeviceRequest,
        DeviceSpec,
        DeviceUsage,
        FilterCode,
        FitCandidate,
        FitResult,
        GpuPolicy,
        HealthReport,
        HealthWatch,
        LockSpec,
        MigInstance,
        MigProfile,
        Mount,
        Mutation,
        NodeBatch,
        NodeScore,
        NodeView,
        Placement,
        PodDevices,
        PodSingleDevice,
        PolicyInfo,
        QuotaEntry,
        QuotaView,
        ResourceNames,
        ScoreCandidate,
        UsageTotals,
    )


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hami_core.plugins' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
