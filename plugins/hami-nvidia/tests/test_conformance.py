"""hami-nvidia runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import json
from typing import Any

import hami_nvidia.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _gpu(id: str, index: int) -> dict[str, Any]:
    return {"id": id, "index": index, "count": 10, "devmem": 8000, "devcore": 100, "type": "NVIDIA-A100",
            "numa": 0, "mode": "hami-core", "health": True}


class TestNvidiaConformance(DeviceBackendConformance):
    plugin, config = hami_nvidia.plugin, {"nvidia": {}}
    node_json = node("gpu-node", annotations={"hami.io/node-nvidia-register": json.dumps([_gpu("GPU-0", 0),
                                                                                         _gpu("GPU-1", 1)])},
                     allocatable={"nvidia.com/gpu": 20})
    pod_json = pod(container(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpucores": 30}),
                   name="cuda")
