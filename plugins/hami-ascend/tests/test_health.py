"""The generic handshake on ``hami.io/node-handshake-<commonWord>`` (vendors A.5, C.3, C.8)."""

from __future__ import annotations

from ascend_testlib import T0, handshake_key, local_time, make_engine, make_node, reg, requesting

HS = handshake_key("Ascend910B3")
DEVICES = {"Ascend910B3": [reg("b3-0", type="Ascend910B3", devmem=65536, devcore=20)]}


def node(handshake: str | None, allocatable: int | None = None) -> dict:
    n = make_node("n", DEVICES, allocatable={"huawei.com/Ascend910B3": allocatable} if allocatable is not None
                  else None)
    if handshake is None:
        del n["metadata"]["annotations"][HS]
    else:
        n["metadata"]["annotations"][HS] = handshake
    return n


def test_reported_handshake_is_answered_with_requesting(clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(node("Reported_2025.06.15 12:00:00"))
    assert status.devices == {"Ascend910B3": 1}
    assert status.patch == {HS: "Requesting_" + local_time(T0)}


def test_absent_handshake_is_requested_too(clock) -> None:
    engine = make_engine(clock=clock)
    assert engine.upsert_node(node(None)).patch == {HS: requesting(T0)}


def test_fresh_requesting_mark_waits(clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(node(requesting(T0 - 59)))
    assert status.devices == {"Ascend910B3": 1}
    assert status.unhealthy == {}
    assert status.patch == {}


def test_stale_requesting_without_allocatable_drops_the_chip(clock) -> None:
    engine = make_engine(clock=clock)
    assert engine.upsert_node(node("Reported_2025.06.15 12:00:00")).devices == {"Ascend910B3": 1}
    clock.now += 120
    status = engine.upsert_node(node(requesting(T0), allocatable=0))
    assert status.devices == {}
    assert "Ascend910B3" in status.unhealthy
    # NodeCleanUp deletes the chip's handshake annotation.
    assert status.patch == {HS: None}


def test_stale_requesting_with_allocatable_chips_stays_healthy(clock) -> None:
    engine = make_engine(clock=clock)
    clock.now += 120
    status = engine.upsert_node(node(requesting(T0), allocatable=8))
    assert status.devices == {"Ascend910B3": 1}
    assert status.unhealthy == {}
    assert status.patch == {}


def test_each_chip_has_its_own_handshake(clock) -> None:
    engine = make_engine(clock=clock)
    n = make_node("n", {**DEVICES, "Ascend310P": [reg("p-0", type="Ascend310P", devmem=21527, devcore=8)]})
    n["metadata"]["annotations"][handshake_key("Ascend310P")] = requesting(T0 - 3600)
    status = engine.upsert_node(n)
    assert status.devices == {"Ascend910B3": 1}
    assert set(status.unhealthy) == {"Ascend310P"}
    assert status.patch == {HS: requesting(T0)}


def test_nodes_without_the_chip_get_no_handshake(clock) -> None:
    # HAMi checks a vendor's handshake only once GetNodeDevices found its registration.
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("plain", allocatable={"cpu": 8}))
    assert status.patch == {}
    assert status.unhealthy == {}
