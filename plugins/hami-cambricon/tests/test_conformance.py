"""hami-cambricon runs the plugin contract suite that hami-core ships (``hami_core.testing``).

Cambricon registers through node capacity (``cambricon.com/mlu.smlu.vcore``/``.vmemory``), not an
annotation, so it declares its own malformed node: a core capacity that is not a number.
"""

from __future__ import annotations

from typing import Any

import pytest

import hami_cambricon.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

VCORE = "cambricon.com/mlu.smlu.vcore"
VMEMORY = "cambricon.com/mlu.smlu.vmemory"


class TestCambriconConformance(DeviceBackendConformance):
    @pytest.fixture
    def plugin_module(self) -> Any:
        return hami_cambricon.plugin

    @pytest.fixture
    def device_config(self) -> dict[str, Any]:
        return {"cambricon": None}  # the chart defaults

    @pytest.fixture
    def device_node(self) -> dict[str, Any]:
        return node("mlu-node", allocatable={VCORE: 200, VMEMORY: 384})  # two MLUs

    @pytest.fixture
    def fitting_pod(self) -> dict[str, Any]:
        return pod(container(limits={"cambricon.com/vmlu": 1, VMEMORY: 20, VCORE: 10}), name="neuware")

    @pytest.fixture
    def malformed_node(self) -> tuple[dict[str, Any], str]:
        return node("mlu-node", allocatable={VCORE: "lots", VMEMORY: 384}), VCORE
