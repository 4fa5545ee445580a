"""``hami dra-driver`` as the node component runs it: a process that publishes and serves the kubelet plugin
(registration and DRA sockets), and on SIGTERM stops serving and removes the sockets it bound."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from hami_core.dra import cdi
from hami_core.dra import cli as dra_cli
from hami_core.dra.kubelet import plugin
from hami_core.dra.model import driver_name
from hami_core.testing.fake_kubelet import DraKubelet

NODE = "gpu-dra-1"
DRIVER = driver_name("NVIDIA")
DEADLINE_S = 30.0  # bounds a broken test; never an expectation of speed


def test_the_cli_defaults_are_the_plugins() -> None:
    assert dra_cli.DEFAULT_REGISTRY_DIR == plugin.DEFAULT_REGISTRY_DIR
    assert dra_cli.DEFAULT_PLUGINS_DIR == plugin.DEFAULT_PLUGINS_DIR
    assert dra_cli.DEFAULT_CDI_DIR == cdi.DEFAULT_CDI_DIR


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        assert proc.poll() is None, f"hami dra-driver exited {proc.returncode}: {proc.communicate()[1]}"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_the_live_driver_serves_the_kubelet_plugin_and_cleans_up(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": NODE, "labels": {"hami.io/device-mode": "dra"}}}))
    devices = tmp_path / "devices.yaml"
    devices.write_text("devices:\n  - {uuid: GPU-11111111-0000-4000-8000-000000000000, model: NVIDIA A100, "
                       "memory: 40960}\n")
    sockets = Path(tempfile.mkdtemp(prefix="hdra", dir="/tmp"))  # unix socket paths must stay short
    registry, plugins, cdi_dir = sockets / "registry", sockets / "plugins", tmp_path / "cdi"
    registry.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hami_core.cli", "dra-driver", "--node-name", NODE, "--cluster-file", str(cluster),
         "--devices-file", str(devices), "--vendor", "nvidia", "--kubelet-registry-dir", str(registry),
         "--kubelet-plugins-dir", str(plugins), "--cdi-dir", str(cdi_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    reg_socket = registry / f"{DRIVER}-reg.sock"
    try:
        _wait_for(reg_socket, proc)
        with DraKubelet(reg_socket) as kubelet:
            info = kubelet.register(DRIVER)
            assert info.endpoint == str((plugins / DRIVER / "dra.sock").absolute())
            # an unknown claim unprepares cleanly: the DRA service answers, not only the registration one
            assert kubelet.unprepare(("default", "nothing", "0b4c8a7e-0000-4000-8000-000000000000")).claims[
                "0b4c8a7e-0000-4000-8000-000000000000"].error == ""
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE_S)
    try:
        assert proc.returncode == 0, err
        assert (plugins / DRIVER).is_dir() and not reg_socket.exists() and not (plugins / DRIVER / "dra.sock").exists()
        assert "kubelet registered DRA driver" in err and "Traceback" not in err
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
