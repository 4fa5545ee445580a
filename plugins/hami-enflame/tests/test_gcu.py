"""GCU, the whole-card backend (vendors I "Enflame GCU whole card", gcu.go)."""

from __future__ import annotations

from enflame_testlib import GCU, T0, backends, container, gcu_node, gcu_usage, make_engine, make_pod, running_pod

from hami_core.plugins.types import DeviceInfo, DeviceRequest, HealthReport
from hami_enflame.gcu import GCU_ALLOCATED

REQ = DeviceRequest("GCU", 1, 100, 100, 100)


def test_cards_are_synthesised_from_capacity() -> None:
    engine = make_engine()
    status = engine.upsert_node(gcu_node("g1", 3))
    assert status.devices == {"GCU": 3}
    assert status.errors == {}
    assert [d.info for d in engine.nodes["g1"].devices["GCU"]] == [
        DeviceInfo(id=f"g1-GCU-{i}", index=i, count=1, devmem=100, devcore=100, type="GCU", health=True,
                   vendor="GCU") for i in range(3)]


def test_health_is_capacity_above_zero() -> None:
    gcu, _ = backends()
    assert gcu.hami_node_health(gcu_node("g1", 2), [], T0) == HealthReport(True, True)
    assert gcu.hami_node_health(gcu_node("g1", None), [], T0) == HealthReport(
        False, True, reason="status.capacity[enflame.com/gcu] is absent")
    assert gcu.hami_node_health(gcu_node("g1", 0), [], T0) == HealthReport(
        False, True, reason="status.capacity[enflame.com/gcu] is '0'")


def test_zero_or_bad_capacity_drops_the_cards() -> None:
    # HAMi CheckHealth reads an unreadable capacity as 0: unhealthy, the cards are cleaned up (GetNodeDevices's
    # error is reported as well).
    engine = make_engine()
    engine.upsert_node(gcu_node("g1", 2))
    status = engine.upsert_node(gcu_node("g1", "1.5"))
    assert status.devices == {}
    assert "status.capacity[enflame.com/gcu]" in status.errors["GCU"]
    engine.upsert_node(gcu_node("g1", 2))
    status = engine.upsert_node(gcu_node("g1", 0))
    assert status.devices == {}
    assert status.unhealthy == {"GCU": "status.capacity[enflame.com/gcu] is '0'"}


def test_admission_follows_limits_only() -> None:
    engine = make_engine()
    admitted = engine.admit(make_pod(container(limits={GCU: 1})))
    assert admitted["spec"]["containers"][0]["resources"] == {"limits": {GCU: 1}}
    gcu, _ = backends()
    assert gcu.hami_mutate_container({}, container(limits={GCU: 1})).requested is True
    assert gcu.hami_mutate_container({}, container(requests={GCU: 1})).requested is False


def test_request_is_always_the_whole_card() -> None:
    engine = make_engine()
    got = engine.requests(make_pod(container(limits={GCU: "2"}), container("r", requests={GCU: 1})))
    assert got.containers == ({"GCU": DeviceRequest("GCU", 2, 100, 100, 100)},
                              {"GCU": DeviceRequest("GCU", 1, 100, 100, 100)})
    gcu, _ = backends()
    for bad in ("0", "-1", "1.5", "500m", "4294967296"):
        assert gcu.hami_container_request(container(limits={GCU: bad})) is None, bad


def test_fit_takes_idle_cards_from_the_preferred_end() -> None:
    devs = [gcu_usage("a", index=0), gcu_usage("b", index=1, used=1), gcu_usage("c", index=2)]
    got = backends()[0].fit(devs, DeviceRequest("GCU", 2, 100, 100, 100))
    assert [(d.uuid, d.usedmem, d.usedcores, d.idx) for d in got.devices] == [("c", 100, 100, 2), ("a", 100, 100, 0)]


def test_fit_reasons() -> None:
    devs = [gcu_usage("a", used=1), gcu_usage("b", health=False), gcu_usage("c")]
    got = backends()[0].fit(devs, DeviceRequest("GCU", 2, 100, 100, 100))
    assert got.reason == ("1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, "
                          "1/3 ExclusiveDeviceAllocateConflict")
    assert backends()[0].fit(devs, DeviceRequest("Enflame", 1)).reason == "1/3 CardNotHealth, 2/3 CardTypeMismatch"


def test_schedule_writes_both_keys_and_no_lock() -> None:
    engine = make_engine()
    engine.upsert_node(gcu_node("g1", 2))
    engine.upsert_pod(running_pod("old", "g1", GCU_ALLOCATED, "g1-GCU-1,GCU,100,100:;"))
    pod = make_pod(container(limits={GCU: 1}))
    decision = engine.schedule(pod)
    assert decision.node == "g1"
    value = "g1-GCU-0,GCU,100,100:;"
    assert {k: v for k, v in decision.annotations.items() if "enflame" in k} == {
        "hami.io/enflame-gcu-devices-to-allocate": value, "hami.io/enflame-gcu-devices-allocated": value}
    gcu = engine.backends["GCU"]
    assert engine.hook.hami_node_lock(backend=gcu, pod=pod, requests=engine.requests(pod)) is None
    engine.reserve(pod, decision)
    again = engine.schedule(make_pod(container(limits={GCU: 1}), name="q"))
    assert again.node is None
    assert again.failed["g1"] == "2/2 ExclusiveDeviceAllocateConflict"


def test_capacity_removed_is_unhealthy_even_when_lost_registrations_are_kept() -> None:
    # HAMi GCUDevices.CheckHealth: no enflame.com/gcu capacity reads as 0, unhealthy, and the cards are cleaned up;
    # before, the missing key was "healthy, nothing to refresh", so HAMi's keep rule would have kept the cards.
    engine = make_engine(scheduler={"lostRegistration": "keep"})
    engine.upsert_node(gcu_node("g1", 2))
    status = engine.upsert_node(gcu_node("g1", None))
    assert status.devices == {}
    assert status.unhealthy == {"GCU": "status.capacity[enflame.com/gcu] is absent"}
    # a node that never had GCUs reports nothing (HAMi skips the clean-up of a vendor it has not cached)
    assert engine.upsert_node(gcu_node("g2", None)).unhealthy == {}
