"""hami-ascend runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import json
from typing import Any

import hami_ascend.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _npu(id: str, index: int) -> dict[str, Any]:
    return {"id": id, "index": index, "count": 4, "devmem": 32768, "devcore": 30, "type": "Ascend910A",
            "health": True}


class TestAscendConformance(DeviceBackendConformance):
    plugin, config = hami_ascend.plugin, {"vnpus": None}  # the chart's chips
    node_json = node("npu-node", annotations={"hami.io/node-register-Ascend910A": json.dumps([_npu("npu-0", 0),
                                                                                             _npu("npu-1", 1)]),
                                              "hami.io/node-handshake-Ascend910A": "Reported_2025.06.15 12:00:00"})
    pod_json = pod(container(limits={"huawei.com/Ascend910A": 1, "huawei.com/Ascend910A-memory": 2048}), name="cann")
