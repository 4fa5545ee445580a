"""Shared pieces of the NVIDIA node-side tests: the in-test NVML stand-in and device plugins to start.

``fakedriver/pynvml.py`` stands in for NVIDIA's driver library (no GPU on CI machines); it is imported as
``pynvml`` for the test, and discovery's per-process cache is cleared so each test probes afresh.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from nvidia_testlib import plugin_manager

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.app import DevicePluginApp
from hami_core.node.fake_kubelet import FakeKubelet
from hami_nvidia import detect

FAKEDRIVER = Path(__file__).parent / "fakedriver"
#: The node the device-plugin tests run as.
NODE = "gpu-node"


def load_fake_pynvml(monkeypatch: pytest.MonkeyPatch, gpus: Sequence[Mapping[str, Any]]) -> ModuleType:
    """Import the stand-in driver as ``pynvml`` for this test, with ``gpus`` (``uuid``, ``name``, ``memory_mib``),
    and make it importable in discovery's probe child too (all undone with the monkeypatch)."""
    monkeypatch.setenv("HAMI_FAKE_NVML_GPUS", json.dumps(list(gpus)))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAKEDRIVER), os.environ.get("PYTHONPATH")])))
    spec = importlib.util.spec_from_file_location("pynvml", FAKEDRIVER / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(detect, "_cache", {})  # discovery caches the probe's answer per process
    return module


@contextmanager
def device_plugins(kubelet: FakeKubelet, cluster: MemoryCluster, node: str,
                   nvidia: Mapping[str, Any]) -> Iterator[Callable[[], DevicePluginApp]]:
    """A starter of NVIDIA device plugins for ``node`` (config section ``nvidia``); all are stopped on exit.

    Registration is rewritten once an hour only, so a rewrite a test sees comes from what it did.
    """
    apps: list[DevicePluginApp] = []

    def start() -> DevicePluginApp:
        pm = plugin_manager()
        (backend,) = pm.backends({"nvidia": dict(nvidia)})
        app = DevicePluginApp(pm, backend, cluster, node, plugin_dir=kubelet.plugin_dir, watch_interval_s=0.05,
                              register_interval_s=3600)
        apps.append(app)
        app.start()
        return app

    try:
        yield start
    finally:
        for app in apps:
            app.stop()
