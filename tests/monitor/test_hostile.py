"""The monitor against containers that misbehave: a cache file truncated under the reader (a restarting container
does this; a mapped reader died of SIGBUS), a directory name that is not UTF-8 (every scrape answered 500), a
label value that is not text, and an entry that fails differently on every scan (one log line, not one a scan).

The truncation tests run the collector in a child process, so that a SIGBUS would kill the child, not pytest; they
assert that the child survives and kept exporting the other container."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
from monitor_helpers import pod, region_bytes, scrape, write_region

from hami_core.cluster.memory import MemoryCluster
from hami_core.monitor.store import ContainerStore

U0 = "GPU-00000000-1111-2222-3333-444444444444"
CHILD = Path(__file__).with_name("hostile_child.py")


def _child(root: Path, mode: str, seconds: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get(
        "PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(CHILD), str(root), mode, str(seconds)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _result(proc: subprocess.Popen[str]) -> dict[str, int]:
    out, err = proc.communicate(timeout=120)
    if proc.returncode < 0:
        pytest.fail(f"the monitor died of {signal.Signals(-proc.returncode).name}: {err[-2000:]}")
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def test_truncation_right_after_the_size_check_is_survived(root: Path) -> None:
    write_region(root, "good", "c", uuids=[U0], limits=[7])
    write_region(root, "victim", "c", uuids=[U0], limits=[9])
    got = _result(_child(root, "after-check", 0))
    assert got == {"scrapes": 1, "good": 1}


def test_truncate_and_rewrite_loop_is_survived_and_others_still_exported(root: Path) -> None:
    write_region(root, "good", "c", uuids=[U0], limits=[7])
    victim = write_region(root, "victim", "c", uuids=[U0], limits=[9])
    data = bytes(region_bytes(uuids=[U0], limits=[9]))
    stop = threading.Event()
    rounds = [0]

    def restart_loop() -> None:  # what a container restarting in a loop does to its cache file
        while not stop.is_set():
            fd = os.open(victim, os.O_RDWR)
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
            finally:
                os.close(fd)
            rounds[0] += 1

    proc = _child(root, "race", 4.0)
    truncator = threading.Thread(target=restart_loop, daemon=True)
    truncator.start()
    try:
        got = _result(proc)
    finally:
        stop.set()
        truncator.join(timeout=10)
    assert rounds[0] > 100, rounds  # the file really was truncated over and over meanwhile
    assert got["scrapes"] > 10 and got["good"] == got["scrapes"], got


def test_non_utf8_directory_name_is_skipped_and_the_rest_served(root: Path, start_monitor,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    write_region(root, "good", "c", uuids=[U0], limits=[7])
    bad = os.path.join(os.fsencode(root), b"uid\xff\xfe_c")
    os.mkdir(bad)
    with open(os.path.join(bad, b"1.cache"), "wb") as f:
        f.write(region_bytes(uuids=[U0], limits=[9]))
    caplog.set_level(logging.INFO, logger="hami.monitor")
    m = start_monitor(None, feedback=False)
    for _ in range(3):
        got = scrape(m.url)  # raises on a 500
        assert [(lab["pod"], v) for lab, v in got["hami_vgpu_memory_limit_bytes"]] == [("good", 7)]
    lines = [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert len(lines) == 1 and "uid\\xff\\xfe_c" in lines[0], lines


def test_label_that_is_not_text_costs_only_its_sample(root: Path, start_monitor) -> None:
    write_region(root, "uid-a", "main", uuids=[U0], limits=[7])
    # "\udcff" in JSON decodes to a lone surrogate, which no UTF-8 label can carry.
    mig = ('[{"containerIndex": 0, "deviceIndex": 0, "gpuUUID": "GPU-m", "profile": "1g", '
           '"migUUID": "MIG-\\udcff", "gpuInstanceID": 1, "computeInstanceID": 0}]')
    cluster = MemoryCluster(pods=[pod("a", "uid-a", ["main"], annotations={"hami.io/vgpu-mig-allocations": mig})])
    m = start_monitor(cluster, feedback=False)
    with urllib.request.urlopen(m.url, timeout=10) as resp:
        assert resp.status == 200
    got = scrape(m.url)
    assert [(lab["pod"], v) for lab, v in got["hami_vgpu_memory_limit_bytes"]] == [("a", 7)]
    assert "hami_mig_device_info" not in got


def test_an_entry_failing_differently_every_scan_is_logged_once_per_period(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_region(tmp_path, "good", "c", uuids=[U0], limits=[1])
    path = write_region(tmp_path, "flaky", "c", uuids=[U0], limits=[1])
    now = [0.0]
    store = ContainerStore(tmp_path, log_every_s=600, log_clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="hami.monitor")
    bad = [region_bytes(magic=12345), region_bytes()[:1_000_000], b"\0" * 4, region_bytes(magic=777)]
    for i in range(40):
        path.write_bytes(bad[i % len(bad)] if i % 5 else region_bytes(uuids=[U0], limits=[i]))
        store.refresh()
        assert "good_c" in store.entries
        now[0] += 1
    flaky = [r for r in caplog.records if "flaky_c" in r.getMessage()]
    assert len(flaky) == 1, [r.getMessage() for r in flaky]
    now[0] += 600
    path.write_bytes(bad[0])
    store.refresh()
    flaky = [r.getMessage() for r in caplog.records if "flaky_c" in r.getMessage()]
    assert len(flaky) == 2 and "not logged since the last line" in flaky[1], flaky
    store.close()
