"""``hami scheduler --cluster-file`` as an operator runs it (a subprocess), with each ``--http-server``: it serves
/healthz and /filter on the given port, logs where it listens, and exits 0 on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from sched_helpers import get, gpu_pod, nvidia_node, post

from hami_core.cli import main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("server", ["asyncio", "uvicorn"])
def test_scheduler_serves_with_either_http_server(tmp_path: Path, server: str) -> None:
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump_all([nvidia_node("node-a"), gpu_pod("p")]))
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hami_core.cli", "scheduler", "--cluster-file", str(cluster_file),
                             "--http-bind", f"127.0.0.1:{port}", "--metrics-bind", "", "--http-server", server],
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert get(url + "/healthz")[0] == 200
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        status, _, result = post(url + "/filter", {"Pod": gpu_pod("p"), "NodeNames": ["node-a"]})
        assert status == 200 and result["NodeNames"] == ["node-a"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"serving {url}/filter" in err


def test_unknown_http_server_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scheduler", "--http-server", "twisted"]) == 2
    assert "invalid choice: 'twisted'" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "nan"])
def test_bad_lock_wait_is_a_usage_error_naming_the_flag(capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert main(["scheduler", "--node-lock-wait", value]) == 2
    err = capsys.readouterr().err
    assert "argument --node-lock-wait:" in err and repr(value) in err


def test_lock_flags_reach_the_bind_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--node-lock-wait`` and ``--node-lock-retry-timeout`` end up on the extender's node locker, and
    ``--write-allocation bind`` makes it keep decisions for bind."""
    import hami_core.scheduler.app as app

    seen: list[app.Scheduler] = []

    class Built(app.Scheduler):
        def start(self) -> None:
            seen.append(self)
            raise OSError("stopped by the test before serving")

    monkeypatch.setattr(app, "Scheduler", Built)
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump_all([nvidia_node("node-a")]))
    assert main(["scheduler", "--cluster-file", str(cluster_file), "--http-bind", "127.0.0.1:0", "--metrics-bind",
                 "", "--node-lock-wait", "2.5", "--node-lock-retry-timeout", "7", "--write-allocation", "bind"]) != 0
    locker = seen[0].extender.locker
    assert (locker.wait_s, locker.retry_timeout_s) == (2.5, 7.0)
    assert seen[0].sync.node_listeners == [locker.on_node_event]
    assert seen[0].sync.pod_listeners == [seen[0].extender.on_pod_event]
    assert seen[0].extender.decided is not None and seen[0].options.write_allocation == "bind"


def test_unknown_write_allocation_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scheduler", "--write-allocation", "later"]) == 2
    assert "argument --write-allocation: invalid choice: 'later'" in capsys.readouterr().err
