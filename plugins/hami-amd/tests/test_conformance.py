"""hami-amd runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import json

import hami_amd.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _gpu(id: str, index: int) -> dict:
    return {"id": id, "index": index, "count": 4, "devmem": 196608, "devcore": 304,
            "type": "AMD Instinct MI300X VF", "numa": 0, "mode": "hami-core", "health": True}


class TestAmdConformance(DeviceBackendConformance):
    plugin, config = hami_amd.plugin, {"amd": {}}
    node_json = node("amd-node", annotations={"hami.io/node-amd-register": json.dumps([_gpu("GPU-0", 0),
                                                                                      _gpu("GPU-1", 1)])},
                     allocatable={"amd.com/gpu": 8})
    pod_json = pod(container(limits={"amd.com/gpu": 1, "amd.com/gpumem": 16384, "amd.com/gpucores": 25}),
                   name="rocm")
