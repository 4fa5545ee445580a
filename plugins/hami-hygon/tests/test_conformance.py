"""hami-hygon runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import hami_hygon.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _dcu(id: str, index: int) -> str:
    """One legacy segment ``id,count,devmem,devcore,type,numa,health,index,mode:``."""
    return f"{id},4,65520,100,DCU-K100_AI,0,true,{index},hami-core:"


class TestHygonConformance(DeviceBackendConformance):
    plugin, config = hami_hygon.plugin, {"hygon": {}}
    node_json = node("dcu-node", annotations={"hami.io/node-dcu-register": _dcu("DCU-0", 0) + _dcu("DCU-1", 1)},
                     allocatable={"hygon.com/dcunum": 8})
    pod_json = pod(container(limits={"hygon.com/dcunum": 1, "hygon.com/dcumem": 16000, "hygon.com/dcucores": 25}),
                   name="rocm")
