"""hami-acme proves it keeps the plugin contract with the suite hami-core ships."""

from __future__ import annotations

import json
from typing import Any

import pytest

import hami_acme.plugin
from hami_core.testing import DeviceBackendConformance, container, node, pod


def acme_card(id: str, index: int) -> dict[str, Any]:
    """One card as the ACME device plugin registers it (HAMi's JSON device list)."""
    return {"id": id, "index": index, "count": 4, "devmem": 16384, "devcore": 100, "type": "ACME-X1",
            "numa": 0, "mode": "hami-core", "health": True}


class TestAcmeConformance(DeviceBackendConformance):
    @pytest.fixture
    def plugin_module(self) -> Any:
        return hami_acme.plugin

    @pytest.fixture
    def device_config(self) -> dict[str, Any]:
        return {"acme": {}}

    @pytest.fixture
    def device_node(self) -> dict[str, Any]:
        register = json.dumps([acme_card("ACME-0", 0), acme_card("ACME-1", 1)])
        return node("acme-node", annotations={"hami.io/node-acme-register": register})

    @pytest.fixture
    def fitting_pod(self) -> dict[str, Any]:
        return pod(container(limits={"acme.com/npu": 1, "acme.com/npu-mem": 4096, "acme.com/npu-cores": 25}))
