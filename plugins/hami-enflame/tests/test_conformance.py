"""hami-enflame runs the plugin contract suite that hami-core ships (``hami_core.testing``), per backend."""

from __future__ import annotations

import hami_enflame.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

DRS_CAPACITY = ('{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"1","capacity":6}],'
                '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}')


class TestEnflameDrsConformance(DeviceBackendConformance):
    plugin, config = hami_enflame.plugin, {"enflame": {}}
    node_json = node("drs-node", annotations={"enflame.com/gcu-drs-capacity": DRS_CAPACITY})
    pod_json = pod(container(limits={"enflame.com/drs-gcu": 1}), name="drs")


class TestEnflameGcuConformance(DeviceBackendConformance):
    plugin, config = hami_enflame.plugin, {"enflame": {}}
    node_json = node("gcu-node", capacity={"enflame.com/gcu": 2}, allocatable={"enflame.com/gcu": 2})
    pod_json = pod(container(limits={"enflame.com/gcu": 1}), name="gcu")
    malformed = (node("gcu-node", capacity={"enflame.com/gcu": "1.5"}, allocatable={"enflame.com/gcu": 2}),
                 "status.capacity[enflame.com/gcu]")
