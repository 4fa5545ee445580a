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
    # the startup line shows at the default level, as INFO: a healthy start is not a warning
    assert "INFO hami.scheduler: hami scheduler hami-scheduler serving" in err
    assert "WARNING hami.scheduler: hami scheduler" not in err


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


def test_a_bare_port_binds_every_interface(tmp_path: Path) -> None:
    """``--http-bind 9543`` is port 9543 on all interfaces (it used to be a host named "9543" on port 9443)."""
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump_all([nvidia_node("node-a")]))
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hami_core.cli", "scheduler", "--cluster-file", str(cluster_file),
                             "--http-bind", str(port), "--metrics-bind", ""], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                assert get(f"http://127.0.0.1:{port}/healthz")[0] == 200
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"serving http://0.0.0.0:{port}/filter" in err


@pytest.mark.parametrize(("flag", "value"), [("--http-bind", "99999"), ("--http-bind", ""),
                                             ("--webhook-bind", "::1:80"), ("--metrics-bind", "h:x")])
def test_malformed_addresses_are_one_line_usage_errors_naming_the_flag(
        capsys: pytest.CaptureFixture[str], flag: str, value: str) -> None:
    assert main(["scheduler", flag, value]) == 2
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if "error:" in x]
    assert f"argument {flag}: invalid address" in line and "Traceback" not in err, err


def test_the_extender_and_webhook_listen_on_loopback_by_default() -> None:
    """Safe by default: kube-scheduler reaches the extender on localhost; serving other hosts is asked for."""
    from hami_core.cli import _build_parser
    from hami_core.scheduler.app import Options

    args = _build_parser().parse_args(["scheduler"])
    assert (args.http_bind, args.webhook_bind) == ("127.0.0.1:9443", None)
    assert Options().host == "127.0.0.1"
