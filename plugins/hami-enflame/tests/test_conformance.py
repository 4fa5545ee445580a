"""hami-enflame runs the plugin contract suite that hami-core ships (``hami_core.testing``), per backend."""

from __future__ import annotations

from typing import Any

import pytest

import hami_enflame.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod

DRS_CAPACITY = ('{"devices":[{"index":"0","minor":"0","capacity":6},{"index":"1","minor":"1","capacity":6}],'
                '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}')


class TestEnflameDrsConformance(DeviceBackendConformance):
    @pytest.fixture
    def plugin_module(self) -> Any:
        return hami_enflame.plugin

    @pytest.fixture
    def device_config(self) -> dict[str, Any]:
        return {"enflame": {}}

    @pytest.fixture
    def device_node(self) -> dict[str, Any]:
        return node("drs-node", annotations={"enflame.com/gcu-drs-capacity": DRS_CAPACITY})

    @pytest.fixture
    def fitting_pod(self) -> dict[str, Any]:
        return pod(container(limits={"enflame.com/drs-gcu": 1}), name="drs")


class TestEnflameGcuConformance(DeviceBackendConformance):
    @pytest.fixture
    def plugin_module(self) -> Any:
        return hami_enflame.plugin

    @pytest.fixture
    def device_config(self) -> dict[str, Any]:
        return {"enflame": {}}

    @pytest.fixture
    def device_node(self) -> dict[str, Any]:
        return node("gcu-node", capacity={"enflame.com/gcu": 2}, allocatable={"enflame.com/gcu": 2})

    @pytest.fixture
    def fitting_pod(self) -> dict[str, Any]:
        return pod(container(limits={"enflame.com/gcu": 1}), name="gcu")

    @pytest.fixture
    def malformed_node(self, device_node: dict[str, Any]) -> tuple[dict[str, Any], str]:
        bad = node("gcu-node", capacity={"enflame.com/gcu": "1.5"}, allocatable={"enflame.com/gcu": 2})
        return bad, "status.capacity[enflame.com/gcu]"
