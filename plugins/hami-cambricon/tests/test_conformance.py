"""hami-cambricon runs the plugin contract suite that hami-core ships (``hami_core.testing``).

Cambricon registers through node capacity (``cambricon.com/mlu.smlu.vcore``/``.vmemory``), not an
annotation, so it declares its own malformed node: a core capacity that is not a number.
"""

from __future__ import annotations

import hami_cambricon.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

VCORE = "cambricon.com/mlu.smlu.vcore"
VMEMORY = "cambricon.com/mlu.smlu.vmemory"


class TestCambriconConformance(DeviceBackendConformance):
    plugin, config = hami_cambricon.plugin, {"cambricon": None}  # the chart defaults
    node_json = node("mlu-node", allocatable={VCORE: 200, VMEMORY: 384})  # two MLUs
    pod_json = pod(container(limits={"cambricon.com/vmlu": 1, VMEMORY: 20, VCORE: 10}), name="neuware")
    malformed = node("mlu-node", allocatable={VCORE: "lots", VMEMORY: 384}), VCORE
