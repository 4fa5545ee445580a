"""Enflame DRS end to end: annotations, usage after restart, reserve-then-schedule, no lock (vendors I)."""

from __future__ import annotations

import json

from enflame_testlib import CORE, DRS, MEM, container, drs_capacity, drs_node, make_engine, make_pod, running_pod

from hami_enflame.drs import DRS_ALLOCATED


def _engine() -> object:
    engine = make_engine()
    engine.upsert_node(drs_node("e1", drs_capacity([("0", "4", 6), ("1", "5", 6)])))
    return engine


def test_direct_pod_annotations() -> None:
    engine = _engine()
    pod = make_pod(container("init", limits={"cpu": "1"}), container("main", limits={DRS: "3"}))
    decision = engine.schedule(engine.admit(pod))
    assert decision.node == "e1"
    assert {k: v for k, v in decision.annotations.items() if k not in ("hami.io/vgpu-node", "hami.io/vgpu-time")} == {
        "hami.io/enflame-vgpu-devices-allocated": ";e1-enflame-drs-1,Enflame,20480,50:;",
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-assigned-time": "1750000000000000000",
        "enflame.com/gcu-assigned-index": "1",
        "enflame.com/gcu-assigned-id": "1",
        "enflame.com/gcu-assigned-minor": "5",
        "enflame.com/gcu-request-size": "3",
        "assigned-containers": '{"main":{"allocated":false,"request":3,"profileID":"1","profileName":"3g.20gb"}}',
    }
    assert "hami.io/enflame-vgpu-devices-to-allocate" not in decision.annotations


def test_spec_pod_gets_the_same_profile() -> None:
    engine = _engine()
    decision = engine.schedule(make_pod(container("m", limits={MEM: "20480", CORE: "40"})))
    assert decision.annotations["hami.io/enflame-vgpu-devices-allocated"] == "e1-enflame-drs-1,Enflame,20480,50:;"
    assert json.loads(decision.annotations["assigned-containers"]) == {
        "m": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.20gb"}}


def test_no_lock() -> None:
    engine = _engine()
    pod = make_pod(container(limits={DRS: "1"}))
    assert engine.hook.hami_node_lock(backend=engine.backends["Enflame"], pod=pod,
                                      requests=engine.requests(pod)) is None


def test_reserve_then_schedule_fills_by_memory() -> None:
    engine = _engine()
    placed = []
    for i in range(5):
        pod = make_pod(container(limits={DRS: "3"}), name=f"p{i}")
        decision = engine.schedule(pod)
        if decision.node is None:
            assert decision.failed["e1"] == "2/2 CardInsufficientMemory"
            break
        engine.reserve(pod, decision)
        placed.append(decision.annotations["hami.io/enflame-vgpu-devices-allocated"].split(",")[0])
    # Two 3g.20gb per 40 GB card.
    assert sorted(placed) == ["e1-enflame-drs-0", "e1-enflame-drs-0", "e1-enflame-drs-1", "e1-enflame-drs-1"]


def test_usage_rebuilt_from_the_allocated_annotation() -> None:
    engine = _engine()
    engine.upsert_pod(running_pod("old", "e1", DRS_ALLOCATED, "e1-enflame-drs-1,Enflame,40960,100:;"))
    usage = {d.id: (d.used, d.usedmem, d.usedcores) for d in engine.nodes["e1"].devices["Enflame"]}
    # Caveat kept from HAMi: one slot per allocation after a restart, not one per slice.
    assert usage == {"e1-enflame-drs-0": (0, 0, 0), "e1-enflame-drs-1": (1, 40960, 100)}
    decision = engine.schedule(make_pod(container(limits={DRS: "6"})))
    assert decision.annotations["hami.io/enflame-vgpu-devices-allocated"] == "e1-enflame-drs-0,Enflame,40960,100:;"


def test_two_containers_add_their_slices_within_one_pod() -> None:
    engine = make_engine()
    engine.upsert_node(drs_node("e1", drs_capacity([("0", "0", 4)], profiles={"1g.6gb": "0", "3g.20gb": "1",
                                                                                  "6g.40gb": "2"})))
    # 3 slices then 1 slice: HAMi's Used becomes 3 + 1 = 4 of 4; a third container finds no slot.
    fits = engine.schedule(make_pod(container("a", limits={DRS: "3"}), container("b", limits={DRS: "1"})))
    assert fits.node == "e1"
    full = engine.schedule(make_pod(container("a", limits={DRS: "3"}), container("b", limits={DRS: "1"}),
                                    container("c", limits={DRS: "1"})))
    assert full.failed["e1"] == "1/1 CardTimeSlicingExhausted"
