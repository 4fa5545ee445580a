"""HAMi's priority feedback (node spec §3.4, ``cmd/vGPUmonitor/feedback.go``), run every 5 s.

While a higher-priority container (lower number) launches kernels on a GPU, lower-priority containers on that GPU
are blocked (``recent_kernel = -1``: HAMi-core's pre-launch hook sleeps while it is negative), and core-limit
enforcement (``utilization_switch``) is on only where there is contention.

HAMi's Go code has two indexing slips in ``CheckBlocking`` (it returns after the first device it finds and indexes
UUIDs by the priority loop variable); this follows the specified intent: *any* device, *any* lower number.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable

from hami_core.monitor.region import RegionError, RegionFile

__all__ = ["observe"]

log = logging.getLogger("hami.monitor.feedback")


def observe(regions: Iterable[RegionFile]) -> None:
    """One feedback tick over the mapped regions of this node (read-only regions are only read)."""
    active: dict[bytes, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    rows: list[tuple[RegionFile, int, list[bytes]]] = []
    # 1. who launched a kernel recently: decrement recent_kernel; still > 0 means active on its devices.
    for region in regions:
        try:
            region.check()
            keys = [raw for _i, raw, _label in region.device_uuids()]
            priority = region.priority
            recent = region.recent_kernel
            if recent > 0:
                recent -= 1
                if recent > 0 and priority >= 0:
                    for key in keys:
                        active[key][priority] += 1
                if region.writable:
                    region.recent_kernel = recent
        except (RegionError, OSError, ValueError) as exc:  # closed or shrunk meanwhile: the store logs it
            log.debug("feedback skips %s: %s", region.path, exc)
            continue
        rows.append((region, priority, keys))
    # 2. block lower priorities on busy GPUs, switch core limiting on where there is contention.
    for region, p, keys in rows:
        if not region.writable:
            continue
        blocked = any(n > 0 and q < p for key in keys for q, n in active.get(key, {}).items())
        contended = any(active.get(key, {}).get(p, 0) > 1 for key in keys)
        try:
            recent = region.recent_kernel
            if blocked:
                if recent >= 0:
                    region.recent_kernel = -1
            elif recent < 0:
                region.recent_kernel = 0
            switch = 1 if blocked or contended else 0
            if region.utilization_switch != switch:
                region.utilization_switch = switch
        except (RegionError, OSError, ValueError) as exc:
            log.debug("feedback skips %s: %s", region.path, exc)
