"""Registration: whole cards from capacity, vXPU cards from JSON; health (vendors.md Part I, A.3, A.5)."""

from __future__ import annotations

import re

import pytest
from kunlun_testlib import T0, VXPU, XPU_RES, kunlun_node, make_engine, node, xpu_node

from hami_core.plugins.errors import WireFormatError
from hami_kunlun.xpu import XPU_HANDSHAKE, XPU_REGISTER


def test_capacity_gives_cards_with_numa_for_upper_half() -> None:
    engine = make_engine()
    status = engine.upsert_node(kunlun_node("n1", 8))
    assert status.devices == {"kunlun": 8} and not status.errors
    devs = engine.nodes["n1"].devices["kunlun"]
    assert [(d.id, d.index, d.numa, d.count, d.totalmem, d.totalcore, d.type) for d in devs] == [
        (f"n1-kunlun-{i}", i, 0 if i < 4 else 1, 100, 98304, 100, "kunlun") for i in range(8)]


def test_odd_card_count_numa_split() -> None:
    devs = make_engine().backends["kunlun"].hami_node_devices(kunlun_node("n", 3))
    assert [d.numa for d in devs] == [0, 1, 1]


def test_bad_capacity_is_an_error_and_devices_are_kept() -> None:
    engine = make_engine()
    engine.upsert_node(kunlun_node("n1", 8))
    with pytest.raises(WireFormatError, match=XPU_RES):
        engine.backends["kunlun"].hami_node_devices(kunlun_node("n1", "1.5"))
    status = engine.upsert_node(kunlun_node("n1", "lots"))
    assert status.errors
    assert len(engine.nodes["n1"].devices["kunlun"]) == 8


def test_zero_or_absent_capacity_gives_no_cards() -> None:
    backend = make_engine().backends["kunlun"]
    assert backend.hami_node_devices(kunlun_node("n", 0)) == []
    assert backend.hami_node_devices(node("n", allocatable={"cpu": 4})) == []


def test_xpu_json_registration_and_malformed_json() -> None:
    engine = make_engine()
    status = engine.upsert_node(xpu_node("x1", 2))
    assert status.devices == {"XPU": 2}
    d = engine.nodes["x1"].devices["XPU"][1]
    assert (d.id, d.index, d.count, d.totalmem, d.totalcore, d.type) == ("XPU-1", 1, 4, 98304, 100, "XPU")
    bad = xpu_node("x1", 2)
    bad["metadata"]["annotations"][XPU_REGISTER] = "[{"
    with pytest.raises(WireFormatError, match=re.escape("hami.io/node-register-xpu")):
        engine.backends["XPU"].hami_node_devices(bad)
    assert engine.upsert_node(bad).errors
    assert [d.id for d in engine.nodes["x1"].devices["XPU"]] == ["XPU-0", "XPU-1"]


def test_kunlun_always_healthy_and_xpu_uses_the_handshake() -> None:
    engine = make_engine()
    kb, xb = engine.backends["kunlun"], engine.backends["XPU"]
    n = xpu_node("x1", 2)
    devs = xb.hami_node_devices(n)
    report = engine.hook.hami_node_health(backend=kb, node=kunlun_node(), devices=[], now=T0, state={})
    assert (report.healthy, report.need_update) == (True, True)
    report = engine.hook.hami_node_health(backend=xb, node=n, devices=devs, now=T0, state={})
    assert report.healthy and report.annotations[XPU_HANDSHAKE].startswith("Requesting_")
    stale = xpu_node("x1", 2)
    stale["metadata"]["annotations"][XPU_HANDSHAKE] = "Requesting_2025-06-15 00:00:00"
    stale["status"]["allocatable"][VXPU] = "0"
    report = engine.hook.hami_node_health(backend=xb, node=stale, devices=devs, now=T0 + 86400 * 30, state={})
    assert report.healthy is False


@pytest.mark.parametrize("raw", ["[]", "null"])
def test_xpu_registration_listing_no_card_keeps_the_cached_cards_while_the_handshake_is_fresh(raw: str) -> None:
    # HAMi KunlunVDevices.GetNodeDevices: "no device found on node" is an error, so its scheduler keeps the node's
    # cached vXPU cards while CheckHealth passes (before: [] was "no cards" and the node lost them).
    engine = make_engine()
    engine.upsert_node(xpu_node("x1", 2))
    with pytest.raises(WireFormatError, match="no device found on node"):
        engine.backends["XPU"].hami_node_devices(node("x1", annotations={XPU_REGISTER: raw}))
    empty = xpu_node("x1", 2)
    empty["metadata"]["annotations"][XPU_REGISTER] = raw
    status = engine.upsert_node(empty)
    assert status.devices == {"XPU": 2}
    assert "no device found on node" in status.errors["XPU"]
