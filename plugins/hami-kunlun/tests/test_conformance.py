"""hami-kunlun runs the plugin contract suite that hami-core ships (``hami_core.testing``), once per backend.

The whole-card ``kunlun`` backend registers through node capacity, so it declares its own malformed node
(a card count that is not a number); ``XPU`` uses the default (a corrupted ``hami.io/node-register-xpu``).
"""

from __future__ import annotations

import json

import hami_kunlun.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

XPU_RES = "kunlunxin.com/xpu"


class TestKunlunConformance(DeviceBackendConformance):
    plugin, config = hami_kunlun.plugin, {"kunlun": {}}
    node_json = node("kl-node", allocatable={XPU_RES: 8})
    pod_json = pod(container(limits={XPU_RES: 1}), name="xpu")
    malformed = node("kl-node", allocatable={XPU_RES: "eight"}), XPU_RES


def _register() -> str:
    return json.dumps([{"id": f"XPU-{i}", "index": i, "count": 4, "devmem": 98304, "devcore": 100, "type": "XPU",
                        "health": True} for i in range(2)])


class TestXpuConformance(DeviceBackendConformance):
    plugin, config = hami_kunlun.plugin, {"kunlun": {}}
    node_json = node("xpu-node", annotations={"hami.io/node-register-xpu": _register()},
                     allocatable={"kunlunxin.com/vxpu": 8})
    pod_json = pod(container(limits={"kunlunxin.com/vxpu": 1, "kunlunxin.com/vxpu-memory": 24576}), name="vxpu")
