"""Iluvatar ``Fit``: HAMi's standard template (vendors A.7, F.3, F.4).

Most vectors call ``IluvatarBackend.hami_filter_nodes`` directly with devices in HAMi's sorted order
(Fit walks them from the last to the first); the end-to-end ones run through the engine.
"""

from __future__ import annotations

import pytest
from iluvatar_testlib import (
    GPU_POLICY,
    NOUSE_UUID,
    USE_UUID,
    FakeNode,
    card,
    chosen,
    container,
    csv,
    fit,
    gpu_policy,
    ilu_container,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    request,
    running_pod,
    usage,
)

from hami_core.plugins.types import DeviceRequest, DeviceUsage, FilterCode, FitCandidate


def two_cards() -> list:
    return [usage("ilu-0"), usage("ilu-1", index=1)]


# ------------------------------------------------------------------------------------ the template, step by step
def test_picks_the_last_device_and_books_the_request() -> None:
    result = fit(two_cards(), request(1, memreq=1024, coresreq=50))
    assert result.code is FilterCode.SUCCESS
    assert [(d.uuid, d.type, d.usedmem, d.usedcores, d.idx) for d in result.devices] == [
        ("ilu-1", "MR-V100", 1024, 50, 1)]


# One card, refused for one reason (HAMi's checks in their order, each alone).
@pytest.mark.parametrize(("device", "req", "reason"), [
    pytest.param(usage("ilu-0", health=False), request(1, memreq=1024), "CardNotHealth", id="unhealthy"),
    pytest.param(usage("ilu-0", usedmem=8000), request(1, memreq=256), "CardInsufficientMemory",
                 id="insufficient_memory"),
    pytest.param(usage("ilu-0", used=1, usedcores=60), request(1, memreq=256, coresreq=50), "CardInsufficientCore",
                 id="insufficient_core"),
    pytest.param(usage("ilu-0", count=2, used=2, usedmem=512), request(1, memreq=256), "CardTimeSlicingExhausted",
                 id="time_slicing_exhausted"),
    # An exclusive (100-core) request needs an idle card.
    pytest.param(usage("ilu-0", used=1, usedmem=256), request(1, memreq=256, coresreq=100),
                 "ExclusiveDeviceAllocateConflict", id="exclusive_request_needs_an_idle_card"),
    # A zero-core task does not fit beside one holding all cores.
    pytest.param(usage("ilu-0", used=1, usedmem=256, usedcores=100), request(1, memreq=256),
                 "CardComputeUnitsExhausted", id="compute_exhausted_for_zero_core_tasks"),
])
def test_one_card_refused(device: DeviceUsage, req: DeviceRequest, reason: str) -> None:
    assert fit([device], req).reason == f"1/1 {reason}"


def test_type_mismatch_for_another_chip_request() -> None:
    result = fit([usage("ilu-0")], request(1, memreq=1024, type="BI-V150"))
    assert result.code is FilterCode.UNSCHEDULABLE
    assert result.reason == "1/1 CardTypeMismatch"


def test_health_is_checked_before_type() -> None:
    devs = [usage("ilu-0", health=False), usage("ilu-1")]
    assert fit(devs, request(1, memreq=1, type="BI-V150")).reason == "1/2 CardNotHealth, 1/2 CardTypeMismatch"


def test_whole_memory_request_needs_an_untouched_card() -> None:
    # No .vMem: percentage 100, so the card's whole memory is booked.
    assert [(d.uuid, d.usedmem) for d in fit([usage("ilu-0")], request(1)).devices] == [("ilu-0", 8192)]
    assert fit([usage("ilu-0", used=1, usedmem=256)], request(1)).reason == "1/1 CardInsufficientMemory"


def test_cores_over_100_are_clamped() -> None:
    result = fit([usage("ilu-0")], request(1, memreq=256, coresreq=200))
    assert [(d.uuid, d.usedcores) for d in result.devices] == [("ilu-0", 100)]


def test_more_cards_than_fit() -> None:
    devs = [usage("ilu-0", used=1, usedmem=8000), usage("ilu-1", index=1)]
    assert fit(devs, request(2, memreq=1024)).reason == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory")
    assert fit(two_cards(), request(3, memreq=1024)).reason == "2/2 AllocatedCardsInsufficientRequest"


def test_reasons_are_counted_per_device_and_sorted() -> None:
    devs = [usage("a", usedmem=8192), usage("b", health=False), usage("c", used=1, usedmem=1, usedcores=100)]
    assert fit(devs, request(1, memreq=256)).reason == (
        "1/3 CardComputeUnitsExhausted, 1/3 CardInsufficientMemory, 1/3 CardNotHealth")


def test_two_cards_request_take_two_devices() -> None:
    result = fit([usage("a"), usage("b", index=1), usage("c", index=2)], request(2, coresreq=200))
    assert [(d.uuid, d.usedmem, d.usedcores) for d in result.devices] == [("c", 8192, 100), ("b", 8192, 100)]


# ------------------------------------------------------------------------------------ mutex (F.4)
def mutex_cards() -> list:
    return [usage("used", used=1, usedmem=256), usage("idle", index=1)]


def test_mutex_rejects_a_used_device() -> None:
    assert chosen(fit(mutex_cards(), request(1, memreq=256), policy=gpu_policy("mutex"))) == ["idle"]
    result = fit([usage("used", used=1, usedmem=256)], request(1, memreq=256), policy=gpu_policy("mutex"))
    assert result.reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_mutex_as_a_token_in_a_chain() -> None:
    result = fit(mutex_cards(), request(2, memreq=256), policy=gpu_policy("binpack,mutex"))
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"


def test_without_mutex_a_used_device_is_shared() -> None:
    assert chosen(fit([usage("used", used=1, usedmem=256)], request(1, memreq=256))) == ["used"]


# ------------------------------------------------------------------------------------ UUID selection
def test_use_uuid() -> None:
    devs = [usage("ilu-0"), usage("ilu-1", index=1)]
    assert chosen(fit(devs, request(1, memreq=1), pod_annotations={USE_UUID: "ilu-0"})) == ["ilu-0"]
    assert fit(devs, request(1, memreq=1), pod_annotations={USE_UUID: "ilu-9"}).reason == "2/2 CardUuidMismatch"


def test_nouse_uuid() -> None:
    devs = [usage("ilu-0"), usage("ilu-1", index=1)]
    assert chosen(fit(devs, request(1, memreq=1), pod_annotations={NOUSE_UUID: "ilu-1"})) == ["ilu-0"]
    assert fit(devs, request(2, memreq=1), pod_annotations={NOUSE_UUID: "ilu-1"}).reason == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardUuidMismatch")


def test_uuid_lists_are_trimmed_and_blank_means_no_constraint() -> None:
    devs = [usage("a"), usage("b", index=1), usage("c", index=2)]
    assert len(chosen(fit(devs, request(3, memreq=1), pod_annotations={USE_UUID: "  "}))) == 3
    assert len(chosen(fit(devs, request(3, memreq=1), pod_annotations={NOUSE_UUID: ""}))) == 3
    assert chosen(fit(devs, request(2, memreq=1), pod_annotations={USE_UUID: " a , b"})) == ["b", "a"]


def test_use_and_nouse_together() -> None:
    devs = [usage("a"), usage("b", index=1), usage("c", index=2)]
    annos = {USE_UUID: "a,b", NOUSE_UUID: "b"}
    assert chosen(fit(devs, request(1, memreq=1), pod_annotations=annos)) == ["a"]


def test_uuid_keys_are_per_chip() -> None:
    devs = [usage("ilu-0", type="BI-V150"), usage("ilu-1", index=1, type="BI-V150")]
    b = make_backend("BI-V150")
    # MR-V100's key says nothing to BI-V150; BI-V150's own key does.
    assert chosen(fit(devs, request(1, memreq=1, type="BI-V150"), backend=b,
                      pod_annotations={USE_UUID: "ilu-0"})) == ["ilu-1"]
    assert chosen(fit(devs, request(1, memreq=1, type="BI-V150"), backend=b,
                      pod_annotations={"hami.io/use-BI-V150-uuid": "ilu-0"})) == ["ilu-0"]


# ------------------------------------------------------------------------------------ batch contract
def test_one_result_per_candidate_in_order() -> None:
    cands = [FitCandidate(FakeNode("a"), [usage("a0", usedmem=8192)], {}),
             FitCandidate(FakeNode("b"), [usage("b0", health=False)], {}),
             FitCandidate(FakeNode("c"), [usage("c0")], {})]
    results = make_backend().hami_filter_nodes(make_pod(container()), request(1, memreq=256), cands, gpu_policy(),
                                               quota=None)
    assert [r.reason if not r.ok else chosen(r) for r in results] == [
        "1/1 CardInsufficientMemory", "1/1 CardNotHealth", ["c0"]]


def test_fit_does_not_change_the_devices() -> None:
    devs = two_cards()
    fit(devs, request(2, memreq=64, coresreq=50))
    assert [(d.used, d.usedmem, d.usedcores) for d in devs] == [(0, 0, 0), (0, 0, 0)]


# ------------------------------------------------------------------------------------ end to end
def node_with(*cards: str, name: str = "n1") -> dict:
    return make_node(name, csv(*cards), allocatable={"iluvatar.ai/MR-V100-vgpu": 20})


def test_engine_insufficient_memory() -> None:
    engine = make_engine()
    engine.upsert_node(node_with(card("ilu-0"), card("ilu-1", index=1)))
    decision = engine.schedule(make_pod(ilu_container(mem=33)))  # 8448 MiB > 8192
    assert decision.node is None
    assert decision.failed == {"n1": "2/2 CardInsufficientMemory"}
    assert engine.schedule(make_pod(ilu_container(mem=32))).node == "n1"


def test_engine_insufficient_core_and_compute_exhausted() -> None:
    engine = make_engine()
    engine.upsert_node(node_with(card("ilu-0")))
    engine.upsert_pod(running_pod("busy", "n1", "ilu-0,MR-V100,1024,100:;"))
    assert engine.schedule(make_pod(ilu_container(mem=4, cores=10))).failed == {"n1": "1/1 CardInsufficientCore"}
    assert engine.schedule(make_pod(ilu_container(mem=4))).failed == {"n1": "1/1 CardComputeUnitsExhausted"}


def test_engine_unhealthy_card() -> None:
    engine = make_engine()
    engine.upsert_node(node_with(card("ilu-0", health=False), card("ilu-1", index=1)))
    decision = engine.schedule(make_pod(ilu_container(mem=4)))
    assert decision.annotations["hami.io/MR-V100-devices-allocated"] == "ilu-1,MR-V100,1024,0:;"
    assert engine.schedule(make_pod(ilu_container(gpus=2, mem=4))).failed == {
        "n1": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth"}


def test_engine_mutex_policy_annotation() -> None:
    engine = make_engine()
    engine.upsert_node(node_with(card("ilu-0")))
    engine.upsert_pod(running_pod("busy", "n1", "ilu-0,MR-V100,1024,10:;"))
    pod = make_pod(ilu_container(mem=4), annotations={GPU_POLICY: "mutex"})
    assert engine.schedule(pod).failed == {"n1": "1/1 ExclusiveDeviceAllocateConflict"}
    assert engine.schedule(make_pod(ilu_container(mem=4))).node == "n1"


def test_engine_more_cards_than_the_node_has() -> None:
    engine = make_engine()
    engine.upsert_node(node_with(card("ilu-0"), card("ilu-1", index=1)))
    assert engine.schedule(make_pod(ilu_container(gpus=3, mem=4))).failed == {"n1": "NodeInsufficientDevice"}


def test_engine_admitted_multi_card_pod_gets_exclusive_cards() -> None:
    engine = make_engine()
    engine.upsert_node(node_with(card("ilu-0"), card("ilu-1", index=1), card("ilu-2", index=2)))
    engine.upsert_pod(running_pod("small", "n1", "ilu-2,MR-V100,256,0:;"))
    pod = engine.admit(make_pod(ilu_container("trainer", gpus=2, mem=16)))
    decision = engine.schedule(pod)
    # ilu-2 is shared (with 0 cores booked), so the two exclusive (100-core) cards are the idle ones.
    assert decision.annotations["hami.io/MR-V100-devices-allocated"] == (
        "ilu-1,MR-V100,4096,100:ilu-0,MR-V100,4096,100:;")
    pod3 = engine.admit(make_pod(ilu_container("trainer", gpus=3, mem=16)))
    assert engine.schedule(pod3).failed == {
        "n1": "1/3 ExclusiveDeviceAllocateConflict, 2/3 AllocatedCardsInsufficientRequest"}


@pytest.mark.parametrize(("policy", "device"), [("binpack", "ilu-0"), ("spread", "ilu-1")])
def test_engine_gpu_policy_orders_devices(policy: str, device: str) -> None:
    engine = make_engine()
    engine.upsert_node(node_with(card("ilu-0"), card("ilu-1", index=1)))
    engine.upsert_pod(running_pod("busy", "n1", "ilu-0,MR-V100,1024,20:;"))
    decision = engine.schedule(make_pod(ilu_container(mem=4, cores=10), annotations={GPU_POLICY: policy}))
    assert decision.annotations["hami.io/MR-V100-devices-allocated"] == f"{device},MR-V100,1024,10:;"
