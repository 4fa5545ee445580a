"""The priority feedback loop (spec §3.4) over real region files: blocking, unblocking, contention."""

from __future__ import annotations

from pathlib import Path

from monitor_helpers import read_i32, write_i32, write_region

from hami_core.monitor.feedback import observe
from hami_core.monitor.region import RegionFile

U0 = "GPU-00000000-1111-2222-3333-444444444444"
U1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def _state(path: Path, version: int = 1) -> tuple[int, int]:
    return read_i32(path, version, "recent"), read_i32(path, version, "switch")


def test_lower_priority_is_blocked_while_higher_priority_launches(tmp_path: Path) -> None:
    high = write_region(tmp_path, "h", "c", uuids=[U0], priority=0, recent_kernel=2, utilization_switch=1)
    low = write_region(tmp_path, "l", "c", version=0, uuids=[U0], priority=1, recent_kernel=2, utilization_switch=1)
    other = write_region(tmp_path, "o", "c", uuids=[U1], priority=1, recent_kernel=2, utilization_switch=1)
    regions = [RegionFile(p) for p in (high, low, other)]
    try:
        observe(regions)
        assert _state(high) == (1, 0)        # active, alone at its priority: no core limit
        assert _state(low, 0) == (-1, 1)     # blocked, core limit on
        assert _state(other) == (1, 0)       # another GPU: untouched by the high-priority one
        # the low-priority container launches nothing while blocked; the high one keeps launching
        write_i32(high, 1, "recent", 2)
        observe(regions)
        assert _state(high) == (1, 0) and _state(low, 0) == (-1, 1)
        # the high-priority container stops: one more tick it counts as idle, the low one is released
        observe(regions)
        assert _state(high) == (0, 0)
        assert _state(low, 0) == (0, 0)
        assert _state(other) == (0, 0)
        # a negative priority never counts as active
        write_i32(high, 1, "priority", -1)
        write_i32(high, 1, "recent", 2)
        write_i32(low, 0, "recent", 2)
        observe(regions)
        assert _state(low, 0) == (1, 0)
    finally:
        for r in regions:
            r.close()


def test_same_priority_contention_switches_core_limits_on(tmp_path: Path) -> None:
    a = write_region(tmp_path, "a", "c", uuids=[U0, U1], priority=1, recent_kernel=2, utilization_switch=0)
    b = write_region(tmp_path, "b", "c", uuids=[U1], priority=1, recent_kernel=2, utilization_switch=0)
    idle = write_region(tmp_path, "i", "c", uuids=[U1], priority=1, recent_kernel=0, utilization_switch=0)
    regions = [RegionFile(p) for p in (a, b, idle)]
    try:
        observe(regions)
        assert _state(a) == (1, 1) and _state(b) == (1, 1)
        assert _state(idle) == (0, 1)   # shares U1 with two active containers of its own priority
        observe(regions)
        assert _state(a) == (0, 0) and _state(b) == (0, 0) and _state(idle) == (0, 0)
    finally:
        for r in regions:
            r.close()


def test_monitor_tick_runs_feedback_only_when_enabled(root: Path, start_monitor) -> None:
    high = write_region(root, "h", "c", uuids=[U0], priority=0, recent_kernel=2)
    low = write_region(root, "l", "c", uuids=[U0], priority=1, recent_kernel=2)
    m = start_monitor(None, feedback=True)   # its loop ticks once at start, maybe after these
    m.tick()
    m.tick()
    assert _state(high) == (0, 0) and _state(low) == (0, 0)
    m.options.feedback = False
    write_i32(high, 1, "recent", 3)
    write_i32(low, 1, "recent", 3)
    m.tick()
    assert _state(high) == (3, 0) and _state(low) == (3, 0)
