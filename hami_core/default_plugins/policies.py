"""HAMi's built-in scheduling policies, declared so tools can list and validate them (spec §7)."""

from __future__ import annotations

from hami_core.plugins.hookspecs import hookimpl
from hami_core.plugins.types import PolicyInfo


@hookimpl
def hami_scheduling_policies() -> list[PolicyInfo]:
    return [
        PolicyInfo("binpack", "node", "prefer the fullest node (highest default score)"),
        PolicyInfo("spread", "node", "prefer the emptiest node (lowest default score)"),
        PolicyInfo("binpack", "gpu", "prefer the most used device on the node"),
        PolicyInfo("spread", "gpu", "prefer the least used device on the node"),
        PolicyInfo("mutex", "gpu", "only idle devices; busiest sorted first"),
        PolicyInfo("numa", "gpu", "order devices by NUMA node (chain with binpack/spread: 'binpack,numa')"),
        PolicyInfo("topology-aware", "gpu", "choose multi-device sets by NVLink/PCIe pair scores"),
    ]
