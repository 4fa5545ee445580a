"""hami-iluvatar runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import hami_iluvatar.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

CHIP = "MR-V100"


def _card(id: str, index: int) -> str:
    """One legacy segment ``id,count,devmem,devcore,type,numa,health,index,mode:``."""
    return f"{id},10,8192,100,{CHIP},0,true,{index},hami-core:"


class TestIluvatarConformance(DeviceBackendConformance):
    plugin, config = hami_iluvatar.plugin, {"iluvatars": {}}  # the chart's chips
    node_json = node("ilu-node", annotations={f"hami.io/node-{CHIP}-register": _card("ilu-0", 0) + _card("ilu-1", 1)})
    pod_json = pod(container(limits={f"iluvatar.ai/{CHIP}-vgpu": 1, f"iluvatar.ai/{CHIP}.vMem": 4,
                                     f"iluvatar.ai/{CHIP}.vCore": 25}), name="corex")
