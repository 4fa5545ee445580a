"""The reader against files written from the spec's tables: both layouts, version selection, bad files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from monitor_helpers import V0_SIZE, V1_SIZE, Proc, region_bytes, write_region

from hami_core.monitor.region import LAYOUT_V0, LAYOUT_V1, RegionError, RegionFile, select_layout
from hami_core.monitor.store import ContainerStore, split_dir_name

U0 = "GPU-00000000-1111-2222-3333-444444444444"
U1 = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def test_layout_sizes_match_the_spec() -> None:
    assert LAYOUT_V1.size == 2_008_952 and LAYOUT_V1.slot.itemsize == 1960
    assert LAYOUT_V0.size == 1_197_896 and LAYOUT_V0.slot.itemsize == 1168
    assert LAYOUT_V1.procs + 1024 * 1960 == LAYOUT_V1.proc_num
    assert LAYOUT_V0.procs + 1024 * 1168 == LAYOUT_V0.proc_num


@pytest.mark.parametrize(("size", "major", "expected"), [
    (V0_SIZE, 0, "v0"), (V0_SIZE + 1, 1, "v0"), (V1_SIZE - 1, 1, "v0"), (V1_SIZE, 1, "v1"), (V1_SIZE + 1, 1, "v1"),
    (V1_SIZE + 1, 2, None), (V0_SIZE - 1, 1, None), (V1_SIZE + 1, 0, None)])
def test_layout_chosen_by_size_then_version(size: int, major: int, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(RegionError, match="unknown cache file size"):
            select_layout(size, major)
    else:
        assert select_layout(size, major).name == expected


@pytest.mark.parametrize("version", [0, 1])
def test_snapshot_sums_live_slots(tmp_path: Path, version: int) -> None:
    procs = [Proc(used={0: (10, 20, 30, 5, 65), 1: (1, 2, 3, 0, 6)}, util={0: (1, 2, 40), 1: (0, 0, 7)}),
             Proc(pid=101, used={0: (100, 200, 300, 0, 600)}, util={0: (0, 0, 25)}),
             Proc(pid=102, status=0, used={0: (9, 9, 9, 9, 999)}, util={0: (0, 0, 99)}),  # dead slot
             Proc(pid=103, used={0: (7, 7, 7, 7, 777)})]                                   # beyond proc_num
    path = write_region(tmp_path, "uid", "c", version=version, uuids=[U0, U1], limits=[1 << 30, 2 << 30],
                        sm_limits=[50, 30], procs=procs, proc_num=3, utilization_switch=1, recent_kernel=2,
                        priority=0, last_kernel_time=1_700_000_000)
    with RegionFile(path) as region:
        assert region.layout.name == f"v{version}"
        assert (region.major, region.minor) == ((1, 2) if version else (0, 0))
        snap = region.snapshot()
    assert snap.proc_num == 3 and snap.utilization_switch == 1 and snap.recent_kernel == 2 and snap.priority == 0
    assert snap.last_kernel_time == (1_700_000_000 if version else 0)
    d0, d1 = snap.devices
    assert (d0.index, d0.uuid, d0.limit, d0.sm_limit) == (0, U0, 1 << 30, 50)
    assert (d0.context, d0.module, d0.data, d0.used, d0.sm_util) == (110, 220, 330, 665, 65)
    assert (d1.index, d1.uuid, d1.limit, d1.sm_limit) == (1, U1, 2 << 30, 30)
    assert (d1.context, d1.module, d1.data, d1.used, d1.sm_util) == (1, 2, 3, 6, 7)


def test_invalid_device_uuids_are_skipped_and_counts_clamped(tmp_path: Path) -> None:
    path = write_region(tmp_path, "uid", "c", uuids=[U0, "", b"\xff\xfe" + b"x" * 38, U1], limits=[1, 2, 3, 4],
                        device_num=99, proc_num=5000)
    with RegionFile(path) as region:
        assert region.device_num == 16 and region.proc_num == 1024
        assert [(d.index, d.uuid, d.limit) for d in region.snapshot().devices] == [(0, U0, 1), (3, U1, 4)]


def test_bad_files_raise_region_errors(tmp_path: Path) -> None:
    small = tmp_path / "small.cache"
    small.write_bytes(b"\0" * 8)
    with pytest.raises(RegionError, match="shorter than a header"):
        RegionFile(small)
    half = tmp_path / "half.cache"
    half.write_bytes(region_bytes(magic=0))
    with pytest.raises(RegionError, match="not initialised") as exc:
        RegionFile(half)
    assert exc.value.retry
    foreign = tmp_path / "foreign.cache"
    foreign.write_bytes(region_bytes(magic=12345))
    with pytest.raises(RegionError, match="bad magic 12345"):
        RegionFile(foreign)
    odd = tmp_path / "odd.cache"
    odd.write_bytes(region_bytes()[:1_000_000])
    with pytest.raises(RegionError, match="unknown cache file size 1000000"):
        RegionFile(odd)


def test_shrunk_file_is_detected_before_reading(tmp_path: Path) -> None:
    path = write_region(tmp_path, "uid", "c", uuids=[U0], limits=[1])
    with RegionFile(path) as region:
        with open(path, "r+b") as f:
            f.truncate(4096)
        with pytest.raises(RegionError, match="shrank"):
            region.snapshot()


def test_dir_names_split_at_first_underscore() -> None:
    assert split_dir_name("uid_ctr_x") == ("uid", "ctr_x")
    assert split_dir_name("uid") is None and split_dir_name("_c") is None and split_dir_name("u_") is None


def test_store_logs_each_bad_file_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_region(tmp_path, "good", "c", uuids=[U0], limits=[1])
    (tmp_path / "garbage_c").mkdir()
    (tmp_path / "garbage_c" / "x.cache").write_bytes(b"garbage!" * 1000)
    (tmp_path / "many_c").mkdir()
    for f in ("a.cache", "b.cache", "libvgpu.so"):
        (tmp_path / "many_c" / f).write_bytes(b"")
    (tmp_path / "empty_c").mkdir()
    (tmp_path / "noseparator").mkdir()
    store = ContainerStore(tmp_path)
    caplog.set_level(logging.INFO, logger="hami.monitor")
    for _ in range(3):
        store.refresh()
    assert sorted(store.entries) == ["good_c"]
    lines = [r.getMessage() for r in caplog.records]
    assert sum("garbage_c" in m for m in lines) == 1 and sum("many_c" in m for m in lines) == 1
    assert not any("empty_c" in m for m in lines)
    assert any("bad magic" in m for m in lines) and any("cache num not matched" in m for m in lines)
    # a file that shrinks under the mapping is dropped, logged once, and picked up again when rewritten
    caplog.clear()
    good = tmp_path / "good_c" / "1234.cache"
    with open(good, "r+b") as f:
        f.truncate(100)
    store.refresh()
    store.refresh()
    assert "good_c" not in store.entries
    assert sum("good_c" in r.getMessage() for r in caplog.records) == 1
    write_region(tmp_path, "good", "c", uuids=[U0], limits=[7])
    store.refresh()
    assert store.entries["good_c"].region.snapshot().devices[0].limit == 7
    # a half-written file (magic still 0) loads once HAMi-core initialises it
    write_region(tmp_path, "late", "c", magic=0, uuids=[U0], limits=[3])
    store.refresh()
    assert "late_c" not in store.entries
    write_region(tmp_path, "late", "c", uuids=[U0], limits=[3])
    store.refresh()
    assert "late_c" in store.entries
    store.close()
