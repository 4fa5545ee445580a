"""Enflame DRS registration: ``enflame.com/gcu-drs-capacity`` JSON → devices (device.go GetNodeDevices)."""

from __future__ import annotations

import pytest
from enflame_testlib import T0, backends, drs_capacity, drs_node, make_engine

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import HealthReport
from hami_enflame.drs import parse_profile

SPEC_EXAMPLE = ('{"devices":[{"index":"0","minor":"0","capacity":6}],'
                '"profiles":{"1g.6gb":"0","3g.20gb":"1","6g.40gb":"2"}}')


def test_spec_example_registers_one_card() -> None:
    engine = make_engine()
    status = engine.upsert_node(drs_node("e1", SPEC_EXAMPLE))
    assert status.devices == {"Enflame": 1} and status.errors == {}
    info = engine.nodes["e1"].devices["Enflame"][0].info
    assert (info.id, info.index, info.count, info.devmem, info.devcore, info.type, info.health) == (
        "e1-enflame-drs-0", 0, 6, 40960, 100, "Enflame", True)
    assert info.custom_info == {"minor": "0", "index": "0", "maxSlice": 6,
                                "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}}


def test_index_minor_and_capacity_forms() -> None:
    raw = drs_capacity([("x", "", "4"), ("3", " 7 ", 4.9)])
    devs = backends()[1].hami_node_devices(drs_node("e1", raw))
    # An unparsable index falls back to the position; an empty minor to the index; 4.9 truncates.
    assert [(d.id, d.index, d.count, d.custom_info["minor"]) for d in devs] == [
        ("e1-enflame-drs-0", 0, 4, "0"), ("e1-enflame-drs-3", 3, 4, "7")]


def test_keys_are_case_insensitive_and_memory_falls_back_to_slices() -> None:
    raw = '{"Devices":[{"Index":"1","Capacity":2}],"Profiles":{"2g.x":"9"}}'
    (dev,) = backends()[1].hami_node_devices(drs_node("e1", raw))
    # "2g.x" has no readable memory: the largest memory GB is then the largest slice count.
    assert (dev.index, dev.count, dev.devmem, dev.custom_info["maxSlice"]) == (1, 2, 2048, 2)


def test_node_without_annotation_has_no_device() -> None:
    assert backends()[1].hami_node_devices({"metadata": {"name": "plain"}}) == []


@pytest.mark.parametrize(("raw", "message"), [
    ("{not json", "invalid JSON"),
    ("[]", "must be a JSON object"),
    (drs_capacity(profiles={}), "no valid drs profiles found on node e1"),
    (drs_capacity(profiles={"big": "0"}), "no valid drs profiles found on node e1"),
    (drs_capacity(profiles={"1g.6gb": 0}), 'profile "1g.6gb" must map to a string'),
    (drs_capacity([("0", "0", 0)]), "invalid drs capacity 0 on node e1"),
    (drs_capacity([("0", "0", "six")]), 'invalid drs capacity "six"'),
    (drs_capacity([("0", "0", True)]), "invalid drs capacity true"),
    (drs_capacity([("-1", "0", 6)]), "index must not be negative"),
    (drs_capacity([]), "no drs devices found on node e1"),
    ('{"devices":{},"profiles":{"1g.6gb":"0"}}', 'field "devices" must be an array'),
])
def test_malformed_registration_names_the_annotation(raw: str, message: str) -> None:
    with pytest.raises(WireFormatError) as exc:
        backends()[1].hami_node_devices(drs_node("e1", raw))
    assert str(exc.value).startswith("enflame.com/gcu-drs-capacity")
    assert message in str(exc.value)


def test_engine_keeps_previous_devices_on_malformed_registration() -> None:
    engine = make_engine()
    engine.upsert_node(drs_node("e1", SPEC_EXAMPLE))
    status = engine.upsert_node(drs_node("e1", "{not json"))
    assert status.devices == {"Enflame": 1}
    assert status.errors["Enflame"].startswith("enflame.com/gcu-drs-capacity: invalid JSON")


def test_always_healthy() -> None:
    engine = make_engine()
    status = engine.upsert_node(drs_node("e1", SPEC_EXAMPLE))
    assert status.unhealthy == {} and status.patch == {}
    assert backends()[1].hami_node_health(drs_node("e1", SPEC_EXAMPLE), [], T0) == HealthReport(True, True)


def test_profile_names() -> None:
    assert parse_profile("3g.20gb") == (3, 20)
    assert parse_profile(" 6G.40GB ") == (6, 40)
    assert parse_profile("1g.big") == (1, 0)
    assert parse_profile("x.6gb") == (0, 0)
    assert parse_profile("6g") == (0, 0)
