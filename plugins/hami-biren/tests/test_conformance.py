"""hami-biren runs the plugin contract suite that hami-core ships (``hami_core.testing``)."""

from __future__ import annotations

import json

import hami_biren.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _register() -> str:
    """Two whole cards as the biren-device-plugin registers them (``Count`` 1, no ``devcore``)."""
    return json.dumps([{"id": f"card_{i}", "index": i, "count": 1, "devmem": 65024, "type": "Biren", "health": True}
                       for i in range(2)])


class TestBirenConformance(DeviceBackendConformance):
    plugin, config = hami_biren.plugin, {"biren": {}}
    node_json = node("biren-node", annotations={"hami.io/node-biren-register": _register()},
                     allocatable={"birentech.com/gpu": 2})
    pod_json = pod(container(limits={"birentech.com/gpu": 1}), name="biren")
