"""hami-metax runs the plugin contract suite that hami-core ships (``hami_core.testing``), for both of its
backends: sGPU (registered by annotation) and GPU (registered by node capacity)."""

from __future__ import annotations

import json
from typing import Any

import hami_metax.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def _sgpu(uuid: str) -> dict[str, Any]:
    return {"uuid": uuid, "bdf": "0000:44:00.0", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100,
            "totalVRam": 32768, "numa": 0, "healthy": True}


class TestMetaxSgpuConformance(DeviceBackendConformance):
    plugin, config = hami_metax.plugin, {"metax": {}}
    node_json = node("sgpu-node", annotations={"metax-tech.com/node-gpu-devices": json.dumps([_sgpu("GPU-0"),
                                                                                             _sgpu("GPU-1")])})
    pod_json = pod(container(limits={"metax-tech.com/sgpu": 1, "metax-tech.com/vmemory": 4,
                                     "metax-tech.com/vcore": 20}), name="maca")


class TestMetaxGpuConformance(DeviceBackendConformance):
    plugin, config = hami_metax.plugin, {"metax": {}}
    node_json = node("gpu-node", allocatable={"metax-tech.com/gpu": 2})
    pod_json = pod(container(limits={"metax-tech.com/gpu": 1}), name="maca-whole")
    malformed = node("gpu-node", allocatable={"metax-tech.com/gpu": "two"}), "metax-tech.com/gpu"
