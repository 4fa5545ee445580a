"""hami-vastai runs the plugin contract suite that hami-core ships (``hami_core.testing``): once on whole cards,
once on a die-mode node."""

from __future__ import annotations

import json

import hami_vastai.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _register(devices: list[dict]) -> dict[str, str]:
    return {"hami.io/node-va-register": json.dumps(devices)}


class TestVastaiConformance(DeviceBackendConformance):
    plugin, config = hami_vastai.plugin, {"vastai": {}}
    node_json = node("va-node", annotations=_register([
        {"id": "VA-0", "count": 2, "devmem": 32768, "type": "Vastai", "health": True},
        {"id": "VA-1", "index": 1, "count": 2, "devmem": 32768, "type": "Vastai", "health": True}]),
        allocatable={"vastaitech.com/va": 4})
    pod_json = pod(container(limits={"vastaitech.com/va": 1}), name="va")


class TestVastaiDieModeConformance(DeviceBackendConformance):
    plugin, config = hami_vastai.plugin, {"vastai": {}}
    node_json = node("va-die-node", annotations=_register([
        {"id": f"VA-{c}-{d}", "count": 1, "devmem": 16384, "type": "Vastai", "health": True,
         "custominfo": {"DeviceStrategy": "die", "AIC": str(c)}} for c in range(2) for d in range(2)]),
        allocatable={"vastaitech.com/va": 4})
    pod_json = pod(container(limits={"vastaitech.com/va": 2}), name="va-dies")
