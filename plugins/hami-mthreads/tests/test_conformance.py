"""hami-mthreads runs the plugin contract suite that hami-core ships (``hami_core.testing``).

Moore Threads registers through node capacity (``mthreads.com/sgpu-core``/``sgpu-memory``), not an
annotation, so it declares its own malformed node: a core capacity that is not a number.
"""

from __future__ import annotations

import hami_mthreads.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

CORE = "mthreads.com/sgpu-core"
MEM = "mthreads.com/sgpu-memory"


class TestMthreadsConformance(DeviceBackendConformance):
    plugin, config = hami_mthreads.plugin, {"mthreads": {}}
    node_json = node("mt-node", allocatable={CORE: 32, MEM: 192})  # two cards
    pod_json = pod(container(limits={"mthreads.com/vgpu": 1, MEM: 8, CORE: 4}), name="musa")
    malformed = node("mt-node", allocatable={CORE: "lots", MEM: 192}), CORE
