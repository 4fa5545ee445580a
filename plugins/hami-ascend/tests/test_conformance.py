"""hami-ascend runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import hami_ascend.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _npu(id: str, index: int) -> dict[str, Any]:
    return {"id": id, "index": index, "count": 4, "devmem": 32768, "devcore": 30, "type": "Ascend910A",
            "health": True}


class TestAscendConformance(DeviceBackendConformance):
    @pytest.fixture
    def plugin_module(self) -> Any:
        return hami_ascend.plugin

    @pytest.fixture
    def device_config(self) -> dict[str, Any]:
        return {"vnpus": None}  # the chart's chips

    @pytest.fixture
    def device_node(self) -> dict[str, Any]:
        register = json.dumps([_npu("npu-0", 0), _npu("npu-1", 1)])
        return node("npu-node", annotations={"hami.io/node-register-Ascend910A": register,
                                             "hami.io/node-handshake-Ascend910A": "Reported_2025.06.15 12:00:00"})

    @pytest.fixture
    def fitting_pod(self) -> dict[str, Any]:
        return pod(container(limits={"huawei.com/Ascend910A": 1, "huawei.com/Ascend910A-memory": 2048}),
                   name="cann")
