"""``hami monitor``: per-container GPU usage from HAMi-core's shared regions, exported to Prometheus, and the
priority feedback loop (node spec §3). See ``docs/monitor.md``."""

from hami_core.monitor.collector import MonitorCollector
from hami_core.monitor.feedback import observe
from hami_core.monitor.region import LAYOUT_V0, LAYOUT_V1, MAGIC, RegionError, RegionFile
from hami_core.monitor.service import Monitor, MonitorOptions
from hami_core.monitor.store import ContainerStore, PodIndex

__all__ = ["LAYOUT_V0", "LAYOUT_V1", "MAGIC", "ContainerStore", "Monitor", "MonitorCollector", "MonitorOptions",
           "PodIndex", "RegionError", "RegionFile", "observe"]
