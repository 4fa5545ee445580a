"""``hami monitor``: per-container GPU usage from HAMi-core's shared regions, exported to Prometheus, and the
priority feedback loop (node spec §3). See ``docs/monitor.md``.

The names below are imported on first use, so that ``hami_core.monitor.cli`` (built into every ``hami`` parser)
and the region reader need neither prometheus-client nor the rest of the service.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["LAYOUT_V0", "LAYOUT_V1", "MAGIC", "ContainerStore", "Monitor", "MonitorCollector", "MonitorOptions",
           "PodIndex", "RegionError", "RegionFile", "observe"]

_HOME = {"MonitorCollector": "collector", "observe": "feedback", "LAYOUT_V0": "region", "LAYOUT_V1": "region",
         "MAGIC": "region", "RegionError": "region", "RegionFile": "region", "Monitor": "service",
         "MonitorOptions": "service", "ContainerStore": "store", "PodIndex": "store"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
