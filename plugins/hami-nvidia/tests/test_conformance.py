"""hami-nvidia runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import hami_nvidia.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _gpu(id: str, index: int) -> dict[str, Any]:
    return {"id": id, "index": index, "count": 10, "devmem": 8000, "devcore": 100, "type": "NVIDIA-A100",
            "numa": 0, "mode": "hami-core", "health": True}


class TestNvidiaConformance(DeviceBackendConformance):
    @pytest.fixture
    def plugin_module(self) -> Any:
        return hami_nvidia.plugin

    @pytest.fixture
    def device_config(self) -> dict[str, Any]:
        return {"nvidia": {}}

    @pytest.fixture
    def device_node(self) -> dict[str, Any]:
        register = json.dumps([_gpu("GPU-0", 0), _gpu("GPU-1", 1)])
        return node("gpu-node", annotations={"hami.io/node-nvidia-register": register},
                    allocatable={"nvidia.com/gpu": 20})

    @pytest.fixture
    def fitting_pod(self) -> dict[str, Any]:
        return pod(container(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}),
                   name="cuda")
