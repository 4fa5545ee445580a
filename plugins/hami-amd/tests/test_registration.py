"""Registration (HAMi ``GetNodeDevices``) and health (``CheckHealth``, ``NodeCleanUp``)."""

from __future__ import annotations

import json

import pytest
from amd_testlib import MI300X, REGISTER, Clock, amd_node, device_json, make_backend, make_engine, make_node

from hami_core.plugins import WireFormatError


def test_json_registration_of_the_design_doc() -> None:
    register = json.dumps([device_json("amd-node-0~0000%3A05%3A00.0", count=1)])
    (dev,) = make_backend().hami_node_devices(make_node("n", register))
    assert (dev.id, dev.index, dev.count, dev.devmem, dev.devcore, dev.type, dev.mode, dev.health) == (
        "amd-node-0~0000%3A05%3A00.0", 0, 1, 196608, 304, MI300X, "hami-core", True)


@pytest.mark.parametrize(("value", "message"), [
    pytest.param("[]", "no gpu found on node", id="empty list"),
    pytest.param("null", "no gpu found on node", id="null"),
    pytest.param("GPU-0,4,196608,304,AMD,0,true,0,hami-core:", REGISTER, id="legacy colon form is not read"),
    pytest.param("[{\"id\": \"GPU-0\", \"count\": \"x\"}]", "count", id="field of the wrong type"),
    pytest.param("{\"id\": \"GPU-0\"}", "JSON array", id="not a list"),
    pytest.param("[{\"id\":", REGISTER, id="truncated JSON"),
])
def test_malformed_registration_names_the_annotation(value: str, message: str) -> None:
    with pytest.raises(WireFormatError, match=message):
        make_backend().hami_node_devices(make_node("n", value))


def test_malformed_registration_keeps_the_previous_devices(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(amd_node("n", 2))
    status = engine.upsert_node(make_node("n", "[]", capacity=8))
    assert status.devices == {"AMD": 2}
    assert "no gpu found on node" in status.errors["AMD"]


def test_devices_whose_type_lacks_amd_are_ignored(clock: Clock) -> None:
    register = json.dumps([device_json("g0", type="Instinct MI300X"), device_json("g1", index=1)])
    status = make_engine(clock=clock).upsert_node(make_node("n", register, capacity=8))
    assert status.devices == {"AMD": 1}
    assert "does not contain 'AMD'" in status.errors["AMD"]


# --------------------------------------------------------------------------------------- health
@pytest.mark.parametrize("capacity", [None, 0, "0", "1.5", "many"])
def test_no_usable_capacity_is_unhealthy(capacity: object) -> None:
    node = make_node("n", json.dumps([device_json("g0")]), capacity=capacity)
    report = make_backend().hami_node_health(node, make_backend().hami_node_devices(node), {})
    assert (report.healthy, report.need_update) == (False, False)
    assert "amd.com/gpu" in report.reason
    assert report.annotations == {}  # never cached healthy: HAMi skips NodeCleanUp


def test_capacity_above_zero_is_healthy_and_nodes_without_gpus_are_left_alone() -> None:
    amd, state = make_backend(), {}
    node = amd_node("n", 1)
    report = amd.hami_node_health(node, amd.hami_node_devices(node), state)
    assert (report.healthy, report.need_update, report.annotations) == (True, True, {})
    bare = make_node("bare")
    assert amd.hami_node_health(bare, [], state).healthy


def test_unhealthy_after_healthy_deletes_the_registration(clock: Clock) -> None:
    # HAMi NodeCleanUp: MarkAnnotationsToDelete(hami.io/node-amd-register) on a node whose GPUs were cached.
    engine = make_engine(clock=clock)
    node = amd_node("n", 2)
    assert engine.upsert_node(node).devices == {"AMD": 2}
    node["status"]["capacity"]["amd.com/gpu"] = "0"
    status = engine.upsert_node(node)
    assert status.devices == {}
    assert "AMD" in status.unhealthy
    assert status.patch == {REGISTER: None}
