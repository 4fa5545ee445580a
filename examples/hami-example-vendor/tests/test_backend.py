"""hami-acme's own behaviour, with the fixtures of the hami_core.testing pytest plugin."""

from __future__ import annotations

import json

import pytest

import hami_acme.plugin
from hami_core import Engine
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.types import DeviceRequest


@pytest.fixture
def engine(hami_plugin_manager, register_plugin):
    register_plugin(hami_acme.plugin)
    return Engine({"acme": {}}, plugins=hami_plugin_manager)


def test_request_reads_the_acme_resources(engine, make_pod):
    pod = make_pod(make_pod.container(limits={"acme.com/npu": 2, "acme.com/npu-mem": 1000}))
    assert engine.requests(pod).containers[0] == {"ACME": DeviceRequest("ACME", 2, 1000, 101, 0)}


def test_a_card_without_memory_asks_for_the_whole_card(engine, make_pod):
    pod = make_pod(make_pod.container(limits={"acme.com/npu": 1}))
    assert engine.requests(pod).containers[0]["ACME"].mem_percentage == 100


def test_filter_is_called_once_per_container(engine, make_node, make_pod, hami_hook_recorder):
    card = {"id": "A0", "count": 4, "devmem": 1024, "devcore": 100, "type": "ACME-X1", "health": True}
    engine.upsert_node(make_node(annotations={"hami.io/node-acme-register": json.dumps([card])}))
    decision = engine.schedule(make_pod(make_pod.container(limits={"acme.com/npu": 1, "acme.com/npu-mem": 512})))
    assert decision.ok
    call = hami_hook_recorder.assert_called("hami_filter_nodes", times=1)[0]
    assert call.request.memreq == 512


def test_unknown_config_key_is_named():
    with pytest.raises(ConfigError, match=r"acme\.resourceCount"):
        hami_acme.plugin.hami_device_backends({"acme": {"resourceCount": "acme.com/npu"}})


def test_cores_are_rounded_up_to_a_quarter(engine, make_pod):
    pod = make_pod(make_pod.container(limits={"acme.com/npu": 1, "acme.com/npu-cores": 30}))
    assert engine.requests(pod).containers[0]["ACME"].coresreq == 50


def test_a_bad_config_value_is_named():
    with pytest.raises(ConfigError, match=r"acme\.resourceCountName"):
        hami_acme.plugin.hami_device_backends({"acme": {"resourceCountName": ""}})
