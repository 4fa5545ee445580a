"""Fuzz the shared-region reader (hami_core/monitor/region.py) with damaged HAMi-core cache files: random
bytes, valid files with random header and slot fields, truncated files, and files that are not regular files
(a container can plant anything in its cache directory). Each yields a snapshot or a RegionError."""

from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from monitor_helpers import Proc, region_bytes

from hami_core.monitor.region import LAYOUT_V0, LAYOUT_V1, MAX_DEVICES, MAX_PROCS, RegionError, RegionFile
from hami_core.monitor.store import ContainerStore

_SETTINGS = settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _fields(version: int) -> list[int]:
    lay = LAYOUT_V1 if version else LAYOUT_V0
    return [0, 4, 8, lay.device_num, lay.uuids, lay.uuids + 96, lay.limit, lay.sm_limit, lay.procs,
            lay.procs + lay.slot.fields["status"][1], lay.proc_num, lay.utilization_switch, lay.recent_kernel,
            lay.priority, lay.size - 8]


def _read(data: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".cache") as f:
        f.write(data)
        f.flush()
        try:
            region = RegionFile(f.name)
        except RegionError as exc:
            assert exc.reason
            return
        with region:
            snap = region.snapshot()
            assert 0 <= snap.proc_num <= MAX_PROCS and len(snap.devices) <= MAX_DEVICES
            assert all(0 <= d.index < MAX_DEVICES for d in snap.devices)


@_SETTINGS
@given(data=st.binary(max_size=64) | st.binary(min_size=12, max_size=64).map(
    lambda b: struct.pack("<ii", 19920718, 1) + b))
def test_short_or_random_files(data: bytes) -> None:
    _read(data)


@_SETTINGS
@given(version=st.sampled_from([0, 1]), data=st.data())
def test_valid_files_with_random_fields_and_lengths(version: int, data: st.DataObject) -> None:
    buf = region_bytes(version=version, uuids=["GPU-0", "GPU-1"], limits=[1 << 30, 2 << 30],
                       procs=[Proc(used={0: (1, 2, 3, 4, 10)}, util={0: (0, 0, 5)})])
    for _ in range(data.draw(st.integers(1, 6))):
        offset = data.draw(st.sampled_from(_fields(version)) | st.integers(0, len(buf) - 8))
        value = data.draw(st.binary(min_size=1, max_size=8) | st.sampled_from(
            [struct.pack("<q", v) for v in (-1, 0, 1, 16, 17, 1024, 1025, 2**31 - 1, -(2**63), 2**63 - 1)]))
        buf[offset:offset + len(value)] = value
    cut = data.draw(st.none() | st.integers(0, len(buf)))
    _read(bytes(buf[:cut] if cut is not None else buf))


@pytest.fixture
def cache_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="hrg", dir="/tmp"))  # short: unix socket paths are limited
    yield path
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def test_symlinked_cache_file_is_not_followed(cache_dir: Path) -> None:
    target = cache_dir / "victim"
    target.write_bytes(region_bytes())
    before = target.read_bytes()
    link = cache_dir / "x.cache"
    link.symlink_to(target)
    with pytest.raises(RegionError, match="symbolic link"):
        RegionFile(link)
    assert target.read_bytes() == before


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory"])
def test_special_files_are_refused_without_blocking(cache_dir: Path, kind: str) -> None:
    path = cache_dir / "x.cache"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    else:
        path.mkdir()
    with pytest.raises(RegionError, match="not a regular file"):
        RegionFile(path)


def test_store_skips_a_planted_symlink_and_keeps_serving_others(cache_dir: Path) -> None:
    victim = cache_dir / "host-file"
    victim.write_bytes(region_bytes())
    bad = cache_dir / "uid1_c"
    bad.mkdir()
    (bad / "x.cache").symlink_to(victim)
    good = cache_dir / "uid2_c"
    good.mkdir()
    (good / "y.cache").write_bytes(region_bytes(uuids=["GPU-0"], limits=[1]))
    store = ContainerStore(cache_dir)
    store.refresh()
    assert [e.name for e in store] == ["uid2_c"]
    store.close()


_TRUNCATION_CHILD = r"""
import os, random, sys, tempfile
sys.path.insert(0, sys.argv[1])
from monitor_helpers import Proc, region_bytes
from hami_core.monitor.region import RegionError, RegionFile

rng = random.Random(int(sys.argv[2]))
ok = refused = 0
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "x.cache")
    for _ in range(int(sys.argv[3])):
        version = rng.choice([0, 1])
        data = bytes(region_bytes(version=version, uuids=["GPU-0", "GPU-1"], limits=[1, 2],
                                  procs=[Proc(used={0: (1, 2, 3, 4, 10)}, util={0: (0, 0, 5)})] * rng.randint(0, 5)))
        with open(path, "wb") as f:
            f.write(data)
        region = RegionFile(path)
        cut = rng.choice([0, 12, 4096, rng.randrange(len(data)), len(data) - 1, region.layout.proc_num])
        os.truncate(path, cut)
        if rng.random() < 0.3:  # a restarted container writes the file again, maybe only partly
            with open(path, "r+b") as f:
                f.write(data[:rng.randrange(len(data))])
        for read in (region.snapshot, region.device_uuids, lambda: region.priority,
                     lambda: setattr(region, "recent_kernel", -1), lambda: region.last_kernel_time):
            try:
                read()
                ok += 1
            except RegionError as exc:
                assert "shrank" in exc.reason, exc.reason
                refused += 1
        region.close()
print(ok, refused)
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_files_truncated_under_an_open_reader_give_values_or_region_errors(seed: int) -> None:
    # In a child process: a reader that faults (SIGBUS from a mapping) kills the child, not pytest.
    import subprocess

    helpers = str(Path(__file__).parents[1] / "monitor")
    proc = subprocess.run([sys.executable, "-c", _TRUNCATION_CHILD, helpers, str(seed), "150"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    ok, refused = map(int, proc.stdout.split())
    assert ok + refused == 150 * 5 and refused > 100, (ok, refused)
