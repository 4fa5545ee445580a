"""``hami monitor`` as a process: serves a scrape, stops on SIGTERM; flag errors."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml
from monitor_helpers import pod, scrape, write_region

from hami_core.cli import main

U0 = "GPU-00000000-1111-2222-3333-444444444444"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_hami_monitor_serves_and_stops(root: Path, tmp_path: Path) -> None:
    write_region(root, "uid-a", "main", uuids=[U0], limits=[123], priority=1, recent_kernel=2)
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump(pod("a", "uid-a", ["main"], namespace="ns")))
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hami_core.cli", "monitor", "--containers-dir", str(root),
                             "--host", "127.0.0.1", "--port", str(port), "--cluster-file", str(cluster_file),
                             "--node-name", "node-a", "--no-feedback"],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                got = scrape(f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        [(labels, value)] = got["hami_vgpu_memory_limit_bytes"]
        assert value == 123 and (labels["namespace"], labels["pod"], labels["container"]) == ("ns", "a", "main")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "INFO hami.monitor: hami monitor serving" in err  # INFO at the default level, not a warning


def test_source_flags_are_exclusive(capsys) -> None:
    assert main(["monitor", "--in-cluster", "--cluster-file", "x.yaml"]) == 2
    assert "not allowed with" in capsys.readouterr().err
