"""Node registration: ``hami.io/node-register-<commonWord>`` JSON (vendors A.3, C.3, C.8, J.3)."""

from __future__ import annotations

import json

import pytest
from ascend_testlib import make_backend, make_engine, make_node, make_pod, npu_container, reg, register_key

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo


def test_device_plugin_registration_with_network_id() -> None:
    text = ('[{"id":"NPU-0","count":4,"devmem":32768,"devcore":20,"type":"Ascend910B4","health":true,'
            '"custominfo":{"NetworkID":0}},{"id":"NPU-1","index":1,"count":4,"devmem":32768,"devcore":20,'
            '"type":"Ascend910B4","health":true,"custominfo":{"NetworkID":1}}]')
    devices = make_backend("Ascend910B4").hami_node_devices(make_node("n", {"Ascend910B4": text}))
    assert devices == [
        DeviceInfo(id="NPU-0", count=4, devmem=32768, devcore=20, type="Ascend910B4", health=True,
                   custom_info={"NetworkID": 0}),
        DeviceInfo(id="NPU-1", index=1, count=4, devmem=32768, devcore=20, type="Ascend910B4", health=True,
                   custom_info={"NetworkID": 1}),
    ]


def test_capitalised_keys_parse_like_go() -> None:
    # device_test.go registers {"ID":..,"Count":..,"Devmem":..}: Go matches JSON keys case-insensitively.
    text = '[{"ID":"GPU-0","Count":4,"Devmem":8738,"Devcore":8,"Type":"Ascend910A","Numa":0,"Health":true}]'
    devices = make_backend("Ascend910A").hami_node_devices(make_node("n", {"Ascend910A": text}))
    assert devices == [DeviceInfo(id="GPU-0", count=4, devmem=8738, devcore=8, type="Ascend910A", health=True)]


def test_engine_registers_each_chip_from_its_own_annotation(clock) -> None:
    engine = make_engine(clock=clock)
    node = make_node("n", {"Ascend910B3": [reg("b3-0", type="Ascend910B3", devmem=65536, devcore=20)],
                           "Ascend310P": [reg("p-0", type="Ascend310P", devmem=21527, devcore=8),
                                          reg("p-1", index=1, type="Ascend310P", devmem=21527, devcore=8)]})
    status = engine.upsert_node(node)
    assert status.devices == {"Ascend910B3": 1, "Ascend310P": 2}
    assert status.errors == {}
    assert [d.info.vendor for d in engine.nodes["n"].devices["Ascend310P"]] == ["Ascend310P", "Ascend310P"]


def test_no_annotation_means_no_devices(clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("n"))
    assert status.devices == {}
    assert status.errors == {}
    assert make_backend().hami_node_devices(make_node("n", {"Ascend910A": "  "})) == []
    assert engine.schedule(make_pod(npu_container())).failed == {"n": "node unregistered"}


@pytest.mark.parametrize("text", ["not json", '{"id":"x"}', '[{"id":"x","count":"4"}]', '[{"count":4}]',
                                  ":NPU-0,4,32768,30,Ascend910A,0,true:"])
def test_malformed_registration_names_the_annotation(text: str) -> None:
    with pytest.raises(WireFormatError, match=r"^hami\.io/node-register-Ascend910A: "):
        make_backend().hami_node_devices(make_node("n", {"Ascend910A": text}))


def test_engine_keeps_previous_devices_when_registration_breaks(clock) -> None:
    engine = make_engine(clock=clock)
    good = make_node("n", {"Ascend910A": [reg("a-0"), reg("a-1", index=1)]})
    assert engine.upsert_node(good).devices == {"Ascend910A": 2}
    bad = make_node("n", {"Ascend910A": '[{"id":"a-0",'})
    status = engine.upsert_node(bad)
    assert status.devices == {"Ascend910A": 2}
    assert status.errors["Ascend910A"].startswith("hami.io/node-register-Ascend910A: invalid JSON")
    assert engine.schedule(make_pod(npu_container("Ascend910A", 2))).node == "n"


def test_devices_whose_type_lacks_the_common_word_are_dropped(clock) -> None:
    # HAMi hands a backend only devices whose type contains its common word (A.3).
    engine = make_engine(clock=clock)
    node = make_node("n", {"Ascend910A": [reg("a-0"), reg("x-1", index=1, type="huawei.com/Ascend910")]})
    status = engine.upsert_node(node)
    assert status.devices == {"Ascend910A": 1}
    assert "does not contain 'Ascend910A'" in status.errors["Ascend910A"]


def test_b4_requests_never_take_b4_1_chips(clock) -> None:
    # J.3: in HAMi an Ascend910B4 request also receives Ascend910B4-1 devices (their type contains
    # "Ascend910B4") and its Fit only compares the request Type. Here each backend sees only the devices
    # of its own registration, so the two chips stay apart.
    engine = make_engine(clock=clock)
    only_b4_1 = make_node("b4-1", {"Ascend910B4-1": [reg("x-0", type="Ascend910B4-1", devmem=65536, devcore=20)]})
    both = make_node("both", {"Ascend910B4-1": [reg("y-0", type="Ascend910B4-1", devmem=65536, devcore=20)],
                              "Ascend910B4": [reg("z-0", type="Ascend910B4", devmem=32768, devcore=20)]})
    engine.upsert_node(only_b4_1)
    engine.upsert_node(both)
    decision = engine.schedule(make_pod(npu_container("Ascend910B4", 1, 8192)))
    assert decision.node == "both"
    assert decision.failed == {"b4-1": "NodeInsufficientDevice"}
    assert [d.uuid for d in decision.devices["Ascend910B4"][0]] == ["z-0"]
    two = engine.schedule(make_pod(npu_container("Ascend910B4", 2, 32768)))
    assert two.node is None
    assert two.failed == {"b4-1": "NodeInsufficientDevice", "both": "NodeInsufficientDevice"}


def test_registration_round_trips_through_json() -> None:
    devices = [reg("npu-0", network=0), reg("npu-1", index=1, network=1)]
    parsed = make_backend().hami_node_devices({"metadata": {"annotations": {
        register_key("Ascend910A"): json.dumps(devices)}}})
    assert [(d.id, d.index, d.custom_info) for d in parsed] == [("npu-0", 0, {"NetworkID": 0}),
                                                                 ("npu-1", 1, {"NetworkID": 1})]
