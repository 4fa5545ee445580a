"""Registration and health: HAMi ``GetNodeDevices`` (JSON only, cores set to 100, ``custominfo`` kept) and the
generic ``CheckHealth`` / ``NodeCleanUp`` on ``hami.io/node-handshake-va``."""

from __future__ import annotations

import pytest
from vastai_testlib import (
    HANDSHAKE,
    REGISTER,
    T0,
    Clock,
    card_node,
    device,
    die_node,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    requesting,
    running_pod,
    va_container,
)

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo

TWO_HOURS = 2 * 3600.0


# ------------------------------------------------------------------------------------ decoding
def test_registered_cores_are_replaced_by_100() -> None:
    node = make_node("n", [device("a", devcore=0), device("b", index=1, devcore=400, numa=1, mode="x")])
    assert make_backend().hami_node_devices(node) == [
        DeviceInfo(id="a", count=1, devmem=32768, devcore=100, type="Vastai", health=True),
        DeviceInfo(id="b", index=1, count=1, devmem=32768, devcore=100, type="Vastai", numa=1, mode="x",
                   health=True)]


def test_die_custominfo_is_kept() -> None:
    (d0, d1) = make_backend().hami_node_devices(die_node("n", [2]))
    assert d0.custom_info == d1.custom_info == {"DeviceStrategy": "die", "AIC": "0"}
    assert [d0.id, d1.id] == ["n-0-0", "n-0-1"]


def test_keys_match_case_insensitively_as_go_json() -> None:
    raw = '[{"ID": "a", "Count": 4, "DevMem": 1024, "Type": "Vastai", "Health": true, "CustomInfo": {"AIC": "7"}}]'
    (dev,) = make_backend().hami_node_devices(make_node("n", raw))
    assert (dev.id, dev.count, dev.devmem, dev.custom_info) == ("a", 4, 1024, {"AIC": "7"})


@pytest.mark.parametrize(("raw", "message"), [
    ("[]", f"{REGISTER}: no gpu found on node"),
    ("null", f"{REGISTER}: no gpu found on node"),
    ("", REGISTER),
    (":", REGISTER),
    # HAMi's legacy colon form is not JSON: Vastai's decoder is json.Unmarshal only.
    ("7-0,1,32768,100,Vastai,0,true:", REGISTER),
    ('{"id": "a"}', f"{REGISTER}: expected a JSON array"),
    ('[{"id": "a", "count": "4"}]', f'{REGISTER}: device 0: field "count"'),
    ('[{"id": "a", "count": -1}]', f"{REGISTER}: device 0"),
    ('[{"id": "a", "health": "yes"}]', f'{REGISTER}: device 0: field "health"'),
    ('[{"id": "a", "custominfo": "die"}]', f'{REGISTER}: device 0: field "custominfo"'),
    ('[{"count": 1}]', f'{REGISTER}: device 0: field "id"'),
])
def test_malformed_registration_names_the_annotation(raw: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        make_backend().hami_node_devices(make_node("n", raw))
    assert str(info.value).startswith(message)


@pytest.mark.parametrize("raw", ["[]", "", "7-0,1,32768,100,Vastai,0,true:"])
def test_engine_keeps_the_previous_devices_on_a_bad_registration(clock: Clock, raw: str) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(card_node("n1"))
    engine.upsert_pod(running_pod("busy", "n1", "n1-va-0,Vastai,0,0:;"))
    status = engine.upsert_node(make_node("n1", raw, allocatable=2))
    assert status.devices == {"Vastai": 2}
    assert status.errors["Vastai"].startswith(f"{REGISTER}: ")
    assert engine.nodes["n1"].by_uuid["n1-va-0"].used == 1
    status = engine.upsert_node(make_node("n1", [device("new")], allocatable=1))
    assert (status.devices, status.errors) == ({"Vastai": 1}, {})


def test_devices_whose_type_lacks_the_common_word_are_ignored(clock: Clock) -> None:
    node = make_node("n1", [device("a"), {**device("b"), "type": "VA16"}])
    status = make_engine(clock=clock).upsert_node(node)
    assert status.devices == {"Vastai": 1}
    assert "does not contain 'Vastai'" in status.errors["Vastai"]


def test_usage_is_rebuilt_from_the_allocated_annotation(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(card_node("n1", count=4))
    pod = running_pod("two", "n1", "n1-va-0,Vastai,0,0:;n1-va-0,Vastai,0,0:n1-va-1,Vastai,0,0:;", containers=2)
    engine.upsert_pod(pod)
    a, b = engine.nodes["n1"].by_uuid["n1-va-0"], engine.nodes["n1"].by_uuid["n1-va-1"]
    assert (a.used, b.used) == (2, 1)
    engine.remove_pod(pod)
    assert (a.used, b.used) == (0, 0)


# ------------------------------------------------------------------------------------ health
def test_fresh_requesting_is_healthy_and_old_one_without_allocatable_is_not(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    backend = engine.backends["Vastai"]
    for mark, allocatable, want in ((requesting(T0 - 59), None, (True, False)),
                                    (requesting(T0 - 61), None, (False, False)),
                                    (requesting(T0 - TWO_HOURS), 2, (True, False))):
        node = make_node("n", [device("a")], annotations={HANDSHAKE: mark}, allocatable=allocatable)
        report = engine.hook.hami_node_health(backend=backend, node=node, devices=backend.hami_node_devices(node),
                                              now=T0, state={})
        assert (report.healthy, report.need_update) == want, mark


def test_stale_node_loses_its_devices_and_its_handshake(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    node = make_node("n1", [device("a")])
    assert engine.upsert_node(node).patch == {HANDSHAKE: requesting(T0)}
    clock.now += 120
    status = engine.upsert_node(make_node("n1", [device("a")], annotations={HANDSHAKE: requesting(T0)}))
    assert status.devices == {}
    assert status.patch == {HANDSHAKE: None}  # NodeCleanUp deletes the handshake
    assert engine.schedule(make_pod(va_container())).failed == {"n1": "node unregistered"}
    status = engine.upsert_node(make_node("n1", [device("a")], annotations={HANDSHAKE: "Reported_now"}))
    assert status.devices == {"Vastai": 1}
