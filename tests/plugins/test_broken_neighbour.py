"""A broken third-party plugin installed next to hami-nvidia must not stop scheduling with hami-nvidia.

Uses the real, installed hami-nvidia entry point plus the fake ``good`` distribution, whose entry points
include plugins that fail to import in every way (ImportError, missing SDK, RuntimeError at import,
an entry point naming a module that does not exist).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager


def test_nvidia_schedules_next_to_broken_plugins(add_dists: Callable[..., None],
                                                installed_entry_points: frozenset[str]) -> None:
    if "nvidia" not in installed_entry_points:
        pytest.skip("hami-nvidia is not installed in this environment (make test installs it)")
    add_dists("good")
    pm = get_plugin_manager()
    status = {r.name: r.status for r in pm.reports}
    assert status["nvidia"] == "loaded"
    assert {status[n] for n in ("importerror", "sdkmissing", "crash", "wrongpath")} == {"failed"}
    engine = Engine({"nvidia": {}}, plugins=pm)
    dev = {"id": "GPU-0", "count": 10, "devmem": 16384, "devcore": 100, "type": "NVIDIA A10", "health": True}
    engine.upsert_node({"metadata": {"name": "gpu-1", "annotations": {
        "hami.io/node-nvidia-register": json.dumps([dev])}}, "status": {"allocatable": {"nvidia.com/gpu": "10"}}})
    pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1",
                                                                          "nvidia.com/gpumem": "4000"}}}]}}
    decision = engine.schedule(engine.admit(pod))
    assert decision.node == "gpu-1"
    assert decision.annotations["hami.io/vgpu-devices-allocated"] == "GPU-0,NVIDIA,4000,0:;"
