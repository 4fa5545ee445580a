"""hami-mthreads runs the plugin contract suite that hami-core ships (``hami_core.testing``).

Moore Threads registers through node capacity (``mthreads.com/sgpu-core``/``sgpu-memory``), not an
annotation, so it declares its own malformed node: a core capacity that is not a number.
"""

from __future__ import annotations

from typing import Any

import pytest

import hami_mthreads.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

CORE = "mthreads.com/sgpu-core"
MEM = "mthreads.com/sgpu-memory"


class TestMthreadsConformance(DeviceBackendConformance):
    @pytest.fixture
    def plugin_module(self) -> Any:
        return hami_mthreads.plugin

    @pytest.fixture
    def device_config(self) -> dict[str, Any]:
        return {"mthreads": {}}

    @pytest.fixture
    def device_node(self) -> dict[str, Any]:
        return node("mt-node", allocatable={CORE: 32, MEM: 192})  # two cards

    @pytest.fixture
    def fitting_pod(self) -> dict[str, Any]:
        return pod(container(limits={"mthreads.com/vgpu": 1, MEM: 8, CORE: 4}), name="musa")

    @pytest.fixture
    def malformed_node(self) -> tuple[dict[str, Any], str]:
        return node("mt-node", allocatable={CORE: "lots", MEM: 192}), CORE
