"""NVIDIA ``Fit`` (scheduler §6.6-§6.7, vendors B.6 and the B.10 vectors).

Most vectors call :meth:`NvidiaBackend.hami_filter_nodes` directly with devices in HAMi's sorted order
(Fit walks them from the last to the first); a few run end to end through the engine.
"""

from __future__ import annotations

import json

import pytest
from nvidia_testlib import (
    CORDON,
    GPU_POLICY,
    SCORE,
    FakeNode,
    chosen,
    container,
    fit,
    gpu_container,
    gpu_policy,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    reg,
    request,
    running_pod,
    usage,
)

from hami_core.plugins.types import FilterCode, FitCandidate


def two_cards() -> list:
    return [usage("dev-0"), usage("dev-1")]


# ------------------------------------------------------------------------------------ B.10 vectors
def test_picks_the_last_device() -> None:
    result = fit(two_cards(), request(1, memreq=64, coresreq=50, pct=0))
    assert result.code is FilterCode.SUCCESS
    assert [(d.uuid, d.type, d.usedmem, d.usedcores) for d in result.devices] == [("dev-1", "NVIDIA", 64, 50)]


def test_insufficient_memory() -> None:
    assert fit([usage("dev-0")], request(1, memreq=512, coresreq=50)).reason == "1/1 CardInsufficientMemory"


def test_insufficient_core() -> None:
    devs = [usage("dev-0", totalmem=1024, usedcores=100)]
    assert fit(devs, request(1, memreq=512, coresreq=50)).reason == "1/1 CardInsufficientCore"


def test_type_mismatch_for_another_request_type() -> None:
    result = fit([usage("dev-0")], request(1, memreq=512, coresreq=50, type="OtherType"))
    assert result.code is FilterCode.UNSCHEDULABLE
    assert result.reason == "1/1 CardTypeMismatch"


def test_type_check_comes_after_health_and_cordon() -> None:
    devs = [usage("dev-0", health=False), usage("dev-1"), usage("dev-2")]
    result = fit(devs, request(1, memreq=1, type="OtherType"), node_annotations={CORDON: "dev-1"})
    assert result.reason == "1/3 CardCordoned, 1/3 CardNotHealth, 1/3 CardTypeMismatch"


def test_use_uuid_mismatch() -> None:
    devs = [usage("dev-1", totalmem=1280)]
    result = fit(devs, request(2, memreq=512, coresreq=50), pod_annotations={"nvidia.com/use-gpuuuid": "dev-0"})
    assert result.reason == "1/1 CardUuidMismatch"


def test_nouse_uuid_match() -> None:
    devs = [usage("dev-0", totalmem=1280)]
    result = fit(devs, request(2, memreq=512, coresreq=50), pod_annotations={"nvidia.com/nouse-gpuuuid": "dev-0"})
    assert result.reason == "1/1 CardUuidMismatch"


def test_uuid_lists_are_trimmed_and_blank_means_no_constraint() -> None:
    devs = [usage("GPU-a"), usage("GPU-b"), usage("GPU-c")]
    r = request(3, memreq=1)
    assert fit(devs, r, pod_annotations={"nvidia.com/use-gpuuuid": ""}).ok
    assert fit(devs, r, pod_annotations={"nvidia.com/use-gpuuuid": "   "}).ok
    result = fit(devs, request(2, memreq=1), pod_annotations={"nvidia.com/use-gpuuuid": " GPU-a , GPU-b"})
    assert chosen(result) == ["GPU-b", "GPU-a"]
    assert fit(devs, r, pod_annotations={"nvidia.com/use-gpuuuid": " GPU-a , GPU-b"}).reason == (
        "1/3 CardUuidMismatch, 2/3 AllocatedCardsInsufficientRequest")  # whole items sorted, as Go GenReason


def test_count_exhausted() -> None:
    devs = [usage("dev-0", totalmem=1280, used=100, count=100)]
    assert fit(devs, request(1, memreq=512, coresreq=50)).reason == "1/1 CardTimeSlicingExhausted"


def test_cores_over_100_are_clamped() -> None:
    result = fit([usage("dev-0", totalmem=1280)], request(1, memreq=512, coresreq=120))
    assert [(d.uuid, d.usedcores) for d in result.devices] == [("dev-0", 100)]


def test_exclusive_request_needs_an_idle_card() -> None:
    devs = [usage("dev-0", totalmem=1280, used=20)]
    assert fit(devs, request(1, memreq=512, coresreq=100)).reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_exclusive_conflict_only_on_100_core_cards() -> None:
    devs = [usage("dev-0", totalmem=1280, totalcore=200, used=1)]
    assert chosen(fit(devs, request(1, memreq=512, coresreq=100))) == ["dev-0"]


def test_compute_exhausted_for_zero_core_tasks() -> None:
    devs = [usage("dev-0", totalmem=1280, used=20, usedcores=100)]
    assert fit(devs, request(1, memreq=512, coresreq=0)).reason == "1/1 CardComputeUnitsExhausted"


def test_more_cards_than_fit() -> None:
    devs = [usage("dev-0", totalmem=1280, used=20, usedcores=10)]
    assert fit(devs, request(2, memreq=512, coresreq=20)).reason == "1/1 AllocatedCardsInsufficientRequest"
    devs = [usage("dev-0", totalmem=1280), usage("dev-1", index=1, totalmem=1280)]
    assert fit(devs, request(3, memreq=512, coresreq=20)).reason == "2/2 AllocatedCardsInsufficientRequest"


def test_memory_percentage() -> None:
    devs = [usage("dev-0", totalmem=1280, used=20, usedcores=10)]
    result = fit(devs, request(1, pct=10, coresreq=20))
    assert [(d.uuid, d.usedmem, d.usedcores) for d in result.devices] == [("dev-0", 128, 20)]


def test_memory_percentage_uses_integer_division() -> None:
    result = fit([usage("dev-0", totalmem=1001)], request(1, pct=33))
    assert result.devices[0].usedmem == 330


def test_unset_percentage_and_no_memory_books_nothing() -> None:
    result = fit([usage("dev-0", totalmem=1280, usedmem=1280)], request(1, coresreq=10))
    assert [(d.uuid, d.usedmem) for d in result.devices] == [("dev-0", 0)]


def test_unhealthy() -> None:
    devs = [usage("dev-0", totalmem=1280, used=20, usedcores=10, health=False)]
    assert fit(devs, request(1, pct=10, coresreq=20)).reason == "1/1 CardNotHealth"


def test_reasons_are_counted_per_device_and_sorted() -> None:
    devs = [usage("dev-0", usedmem=100), usage("dev-1", health=False)]
    assert fit(devs, request(1, memreq=64)).reason == "1/2 CardInsufficientMemory, 1/2 CardNotHealth"


# ------------------------------------------------------------------------------------ cordon
def test_cordoned_device_is_skipped() -> None:
    result = fit(two_cards(), request(1, memreq=64, coresreq=50), node_annotations={CORDON: "dev-1, "})
    assert chosen(result) == ["dev-0"]


def test_all_devices_cordoned() -> None:
    result = fit(two_cards(), request(1, memreq=64, coresreq=50), node_annotations={CORDON: "dev-0,dev-1"})
    assert result.reason == "2/2 CardCordoned"
    # Entries are trimmed.
    result = fit(two_cards(), request(1, memreq=64, coresreq=50), node_annotations={CORDON: " dev-0 , dev-1"})
    assert result.reason == "2/2 CardCordoned"


def test_cordon_leaves_existing_usage_alone() -> None:
    devs = [usage("dev-0"), usage("dev-1", used=1, usedcores=50, usedmem=64)]
    result = fit(devs, request(1, memreq=64, coresreq=50), node_annotations={CORDON: "dev-1"})
    assert chosen(result) == ["dev-0"]
    assert (devs[1].used, devs[1].usedmem, devs[1].usedcores) == (1, 64, 50)


@pytest.mark.parametrize("value", ["", "  ", ",", " , "])
def test_blank_cordon_cordons_nothing(value: str) -> None:
    assert chosen(fit(two_cards(), request(1, memreq=64), node_annotations={CORDON: value})) == ["dev-1"]


# ------------------------------------------------------------------------------------ NUMA bind
def numa_cards() -> list:
    return [usage("dev-0", index=0, count=10, totalmem=8192, numa=1),
            usage("dev-1", index=1, count=10, totalmem=8192, numa=1),
            usage("dev-2", index=2, count=10, totalmem=8192, numa=0)]


def test_numa_bind_keeps_a_container_on_one_numa_node() -> None:
    result = fit(numa_cards(), request(2, memreq=100, coresreq=10), policy=gpu_policy(numa_bind=True))
    assert chosen(result) == ["dev-1", "dev-0"]


def test_without_numa_bind_numa_is_ignored() -> None:
    assert chosen(fit(numa_cards(), request(2, memreq=100, coresreq=10))) == ["dev-2", "dev-1"]


def test_numa_bind_failure_counts_discarded_devices() -> None:
    devs = [usage("dev-0", index=0, count=10, totalmem=8192, numa=0),
            usage("dev-1", index=1, count=10, totalmem=8192, numa=1)]
    result = fit(devs, request(2, memreq=100), policy=gpu_policy(numa_bind=True))
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 NumaNotFit"


# ------------------------------------------------------------------------------------ mutex
def mutex_cards() -> list:
    return [usage("used", index=0, used=1, count=10, totalmem=8192),
            usage("idle", index=1, count=10, totalmem=8192)]


def test_mutex_takes_only_idle_cards() -> None:
    assert chosen(fit(mutex_cards(), request(1, memreq=100, coresreq=10), policy=gpu_policy("mutex"))) == ["idle"]


def test_mutex_cannot_give_two_cards_when_one_is_idle() -> None:
    result = fit(mutex_cards(), request(2, memreq=100, coresreq=10), policy=gpu_policy("mutex"))
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"


def test_mutex_as_a_token_in_a_list() -> None:
    result = fit(mutex_cards(), request(2, memreq=100), policy=gpu_policy("binpack,mutex"))
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"


# ------------------------------------------------------------------------------------ topology
def scored_cards(s01: int, s02: int, s12: int) -> list:
    scores = {"dev-0": {"dev-1": s01, "dev-2": s02}, "dev-1": {"dev-0": s01, "dev-2": s12},
              "dev-2": {"dev-0": s02, "dev-1": s12}}
    return [usage(f"dev-{i}", index=i, count=10, totalmem=8192, pair_scores=scores[f"dev-{i}"]) for i in range(3)]


TOPOLOGY = gpu_policy("topology-aware")


def test_topology_one_card_takes_the_least_connected() -> None:
    # totals: dev-0 300, dev-1 250, dev-2 350
    assert chosen(fit(scored_cards(100, 200, 150), request(1, memreq=100, coresreq=10), policy=TOPOLOGY)) == ["dev-1"]


def test_topology_several_cards_take_the_best_connected_set() -> None:
    result = fit(scored_cards(100, 200, 150), request(2, memreq=100, coresreq=10), policy=TOPOLOGY)
    assert sorted(chosen(result)) == ["dev-0", "dev-2"]


def test_topology_negative_scores() -> None:
    devs = scored_cards(-5, -3, -1)
    assert chosen(fit(devs, request(1, memreq=100, coresreq=10), policy=TOPOLOGY)) == ["dev-0"]
    assert sorted(chosen(fit(scored_cards(-5, -3, -1), request(2, memreq=100), policy=TOPOLOGY))) == [
        "dev-1", "dev-2"]


def test_topology_exact_count_takes_them_all() -> None:
    devs = [usage("dev-0", count=10, totalmem=8192), usage("dev-1", index=1, count=10, totalmem=8192)]
    assert sorted(chosen(fit(devs, request(2, memreq=100), policy=TOPOLOGY))) == ["dev-0", "dev-1"]


def test_topology_without_scores_still_fits() -> None:
    devs = [usage(f"dev-{i}", index=i, count=10, totalmem=8192) for i in range(3)]
    assert len(chosen(fit(devs, request(2, memreq=100), policy=TOPOLOGY))) == 2


def test_topology_short_of_cards_fails() -> None:
    devs = [usage("dev-0", count=10, totalmem=8192), usage("dev-1", index=1, count=10, totalmem=100)]
    result = fit(devs, request(2, memreq=1000), policy=TOPOLOGY)
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"


# ------------------------------------------------------------------------------------ whole-card defaults
def test_percentage_zero_books_the_whole_card() -> None:
    engine = make_engine()
    req = engine.requests(make_pod(gpu_container(pct=0))).containers[0]["NVIDIA"]
    result = fit([usage("dev-0", count=10, totalmem=11264)], req)
    assert [(d.uuid, d.usedmem) for d in result.devices] == [("dev-0", 11264)]
    assert fit([usage("dev-0", count=10, totalmem=11264, usedmem=11260)], req).reason == (
        "1/1 CardInsufficientMemory")


def test_default_memory_books_512() -> None:
    req = make_engine({"defaultMemory": 512}).requests(make_pod(gpu_container())).containers[0]["NVIDIA"]
    assert (req.memreq, req.mem_percentage) == (512, 101)
    assert fit([usage("dev-0", count=10, totalmem=11264, usedmem=10752)], req).devices[0].usedmem == 512
    assert fit([usage("dev-0", count=10, totalmem=11264, usedmem=10753)], req).reason == "1/1 CardInsufficientMemory"


# ------------------------------------------------------------------------------------ type and mode selection
A100 = "NVIDIA A100-SXM4-40GB"
V100 = "NVIDIA-Tesla V100-PCIE-32GB"


def typed_cards() -> list:
    return [usage("a100", type=A100, count=10, totalmem=40960),
            usage("v100", index=1, type=V100, count=10, totalmem=32768)]


def test_use_gputype_is_a_case_insensitive_substring() -> None:
    result = fit(typed_cards(), request(1, memreq=100), pod_annotations={"nvidia.com/use-gputype": "a100, h100"})
    assert chosen(result) == ["a100"]


def test_use_gputype_without_a_match() -> None:
    result = fit(typed_cards(), request(1, memreq=100), pod_annotations={"nvidia.com/use-gputype": "H100"})
    assert result.reason == "2/2 CardTypeMismatch"


def test_nouse_gputype_excludes() -> None:
    result = fit(typed_cards(), request(2, memreq=100), pod_annotations={"nvidia.com/nouse-gputype": "A100"})
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTypeMismatch"
    result = fit(typed_cards(), request(1, memreq=100), pod_annotations={"nvidia.com/nouse-gputype": "v100"})
    assert chosen(result) == ["a100"]


def test_use_and_nouse_together() -> None:
    # "A10" matches both A100 and A10 (substring); "A100" then removes the A100.
    devs = [usage("a100", type="NVIDIA A100"), usage("a10", index=1, type="NVIDIA A10"), usage("t4", type="NVIDIA T4")]
    annos = {"nvidia.com/use-gputype": "A10", "nvidia.com/nouse-gputype": "A100"}
    assert chosen(fit(devs, request(1, memreq=1), pod_annotations=annos)) == ["a10"]


@pytest.mark.parametrize("value", ["", "   ", " , "])
def test_blank_type_lists_impose_nothing(value: str) -> None:
    for key in ("nvidia.com/use-gputype", "nvidia.com/nouse-gputype"):
        assert chosen(fit(typed_cards(), request(1, memreq=1), pod_annotations={key: value})) == ["v100"]


def test_vgpu_mode_must_contain_the_device_mode() -> None:
    devs = [usage("core", mode="hami-core"), usage("mps", index=1, mode="mps")]
    assert chosen(fit(devs, request(1, memreq=1), pod_annotations={"nvidia.com/vgpu-mode": "hami-core"})) == ["core"]
    assert chosen(fit(devs, request(1, memreq=1), pod_annotations={"nvidia.com/vgpu-mode": "mps"})) == ["mps"]
    assert len(chosen(fit(devs, request(2, memreq=1), pod_annotations={"nvidia.com/vgpu-mode": "hami-core,mps"}))) == 2
    assert fit(devs, request(1, memreq=1), pod_annotations={"nvidia.com/vgpu-mode": "mig"}).reason == (
        "2/2 CardTypeMismatch")


# ------------------------------------------------------------------------------------ batch contract
def test_one_result_per_candidate_in_order() -> None:
    b = make_backend()
    cands = [FitCandidate(FakeNode("a"), [usage("a0", totalmem=100)], {}),
             FitCandidate(FakeNode("b", {CORDON: "b0"}), [usage("b0")], {}),
             FitCandidate(FakeNode("c"), [usage("c0")], {})]
    results = b.hami_filter_nodes(make_pod(container()), request(1, memreq=120), cands, gpu_policy(), None)
    assert [r.reason if not r.ok else chosen(r) for r in results] == [
        "1/1 CardInsufficientMemory", "1/1 CardCordoned", ["c0"]]


def test_fit_does_not_change_the_devices() -> None:
    devs = two_cards()
    fit(devs, request(2, memreq=64, coresreq=50))
    assert [(d.used, d.usedmem, d.usedcores) for d in devs] == [(0, 0, 0), (0, 0, 0)]


# ------------------------------------------------------------------------------------ end to end
def a10_node(name: str = "n1", *, annotations: dict | None = None, **kw: object) -> dict:
    devices = [reg("GPU-a", devmem=8000, type="NVIDIA A10", **kw), reg("GPU-b", index=1, devmem=8000,
                                                                        type="NVIDIA A10", **kw)]
    return make_node(name, devices, annotations=annotations, allocatable=20)


def test_engine_reports_insufficient_memory() -> None:
    engine = make_engine()
    engine.upsert_node(a10_node())
    decision = engine.schedule(make_pod(gpu_container(mem=9000)))
    assert decision.node is None
    assert decision.failed == {"n1": "2/2 CardInsufficientMemory"}


def test_engine_type_selection() -> None:
    engine = make_engine()
    engine.upsert_node(a10_node())
    pod = make_pod(gpu_container(mem=1000), annotations={"nvidia.com/use-gputype": "V100"})
    assert engine.schedule(pod).failed == {"n1": "2/2 CardTypeMismatch"}
    pod = make_pod(gpu_container(mem=1000), annotations={"nvidia.com/use-gputype": "a10"})
    assert engine.schedule(pod).node == "n1"


def test_engine_cordon_from_the_node_annotation() -> None:
    engine = make_engine()
    engine.upsert_node(a10_node(annotations={CORDON: "GPU-a,GPU-b"}))
    assert engine.schedule(make_pod(gpu_container(mem=1000))).failed == {"n1": "2/2 CardCordoned"}
    engine.upsert_node(a10_node(annotations={CORDON: "GPU-a"}))
    decision = engine.schedule(make_pod(gpu_container(mem=1000)))
    assert decision.annotations["hami.io/vgpu-devices-allocated"] == "GPU-b,NVIDIA,1000,0:;"


def test_engine_existing_usage_exclusive_and_split_count() -> None:
    engine = make_engine()
    engine.upsert_node(make_node("n1", [reg("GPU-a", count=2, devmem=8000, type="NVIDIA A10")], allocatable=2))
    engine.upsert_pod(running_pod("old", "n1", "GPU-a,NVIDIA,1000,0:;"))
    # An exclusive request needs an idle card (a bare count would also want the whole memory).
    assert engine.schedule(make_pod(gpu_container(cores=100))).failed == {"n1": "1/1 CardInsufficientMemory"}
    assert engine.schedule(make_pod(gpu_container(mem=1000, cores=100))).failed == {
        "n1": "1/1 ExclusiveDeviceAllocateConflict"}
    engine.upsert_pod(running_pod("old2", "n1", "GPU-a,NVIDIA,1000,0:;"))
    assert engine.schedule(make_pod(gpu_container(mem=10))).failed == {"n1": "1/1 CardTimeSlicingExhausted"}
    engine.remove_pod(running_pod("old2", "n1", ""))
    assert engine.schedule(make_pod(gpu_container(mem=7001))).failed == {"n1": "1/1 CardInsufficientMemory"}
    assert engine.schedule(make_pod(gpu_container(mem=7000))).node == "n1"


def test_engine_compute_exhausted() -> None:
    engine = make_engine()
    engine.upsert_node(make_node("n1", [reg("GPU-a", devmem=8000, type="NVIDIA A10")], allocatable=10))
    engine.upsert_pod(running_pod("full", "n1", "GPU-a,NVIDIA,1000,100:;"))
    assert engine.schedule(make_pod(gpu_container(mem=10))).failed == {"n1": "1/1 CardComputeUnitsExhausted"}
    assert engine.schedule(make_pod(gpu_container(mem=10, cores=1))).failed == {"n1": "1/1 CardInsufficientCore"}


def test_engine_more_cards_than_the_node_has() -> None:
    engine = make_engine()
    engine.upsert_node(a10_node())
    assert engine.schedule(make_pod(gpu_container(gpus=3, mem=10))).failed == {"n1": "NodeInsufficientDevice"}


def test_engine_unregistered_node() -> None:
    engine = make_engine()
    engine.upsert_node(make_node("cpu", None))
    engine.upsert_node(a10_node())
    decision = engine.schedule(make_pod(gpu_container(mem=10)), ["cpu", "n1", "ghost"])
    assert decision.node == "n1"
    assert decision.failed == {"cpu": "node unregistered", "ghost": "node unregistered"}


def test_engine_numa_bind_annotation() -> None:
    engine = make_engine()
    devices = [reg("GPU-0", index=0, numa=0), reg("GPU-1", index=1, numa=1), reg("GPU-2", index=2, numa=1)]
    engine.upsert_node(make_node("n1", devices, allocatable=30))
    engine.upsert_pod(running_pod("busy", "n1", "GPU-1,NVIDIA,7000,0:;"))
    pod = make_pod(gpu_container(gpus=2, mem=2000), annotations={"nvidia.com/numa-bind": "true"})
    decision = engine.schedule(pod)
    assert decision.failed == {"n1": "1/3 AllocatedCardsInsufficientRequest, 1/3 CardInsufficientMemory, "
                                      "1/3 NumaNotFit"}
    pod = make_pod(gpu_container(gpus=2, mem=500), annotations={"nvidia.com/numa-bind": "true"})
    devices = engine.schedule(pod).devices["NVIDIA"][0]
    assert sorted(d.uuid for d in devices) == ["GPU-1", "GPU-2"]


def test_engine_topology_uses_the_score_annotation() -> None:
    engine = make_engine()
    devices = [reg(f"GPU-{i}", index=i) for i in range(3)]
    scores = [{"uuid": "GPU-0", "score": {"GPU-1": 100, "GPU-2": 200}},
              {"uuid": "GPU-1", "score": {"GPU-0": 100, "GPU-2": 150}},
              {"uuid": "GPU-2", "score": {"GPU-0": 200, "GPU-1": 150}}]
    engine.upsert_node(make_node("n1", devices, annotations={SCORE: json.dumps(scores)}, allocatable=30))
    one = engine.schedule(make_pod(gpu_container(mem=100), annotations={GPU_POLICY: "topology-aware"}))
    assert one.annotations["hami.io/vgpu-devices-allocated"] == "GPU-1,NVIDIA,100,0:;"
    two = engine.schedule(make_pod(gpu_container(gpus=2, mem=100), annotations={GPU_POLICY: "topology-aware"}))
    assert sorted(d.uuid for d in two.devices["NVIDIA"][0]) == ["GPU-0", "GPU-2"]


def test_engine_negative_cores_clamp_and_keep() -> None:
    """``negativeCores``: ``clamp`` (default) books 0 cores for ``gpucores: -10``; ``keep`` books -10 as HAMi
    v2.10.0 does, so a compute-full card then takes a pod a 0-core request is refused (HAMi's behaviour, which is
    why clamp is the default)."""
    full = running_pod("full", "n1", "GPU-a,NVIDIA,1000,100:;")
    for mode, cores, node in (("clamp", 0, None), ("keep", -10, "n1")):
        engine = make_engine({"negativeCores": mode})
        engine.upsert_node(make_node("n1", [reg("GPU-a", devmem=8000, type="NVIDIA A10")], allocatable=10))
        engine.upsert_pod(full)
        decision = engine.schedule(make_pod(gpu_container(mem=10, cores=-10)))
        assert decision.node == node, (mode, decision.failed)
        if node is None:
            assert decision.failed == {"n1": "1/1 CardComputeUnitsExhausted"}
        else:
            assert decision.annotations["hami.io/vgpu-devices-allocated"] == f"GPU-a,NVIDIA,10,{cores}:;"


def test_engine_books_a_hami_written_negative_core_usage_as_hami_does() -> None:
    """A pod HAMi's scheduler placed with ``gpucores: -10`` carries ``...,-10:``: it is read and booked as HAMi
    books it (the node is not quarantined for one tenant's pod), whatever this scheduler's own negativeCores."""
    engine = make_engine()
    engine.upsert_node(make_node("n1", [reg("GPU-a", devmem=8000, type="NVIDIA A10")], allocatable=10))
    engine.upsert_pod(running_pod("full", "n1", "GPU-a,NVIDIA,1000,100:;"))
    engine.upsert_pod(running_pod("hami", "n1", "GPU-a,NVIDIA,1000,-10:;"))
    assert engine.schedule(make_pod(gpu_container(mem=10, cores=10))).node == "n1"
    assert engine.schedule(make_pod(gpu_container(mem=10, cores=11))).failed == {"n1": "1/1 CardInsufficientCore"}


def test_a_negative_memory_booking_quarantines_the_node() -> None:
    """No HAMi component writes negative memory: booked, ``-1000`` would hand the GPU's memory to the next pod,
    so the node is quarantined (as for an undecodable allocation) until the pod goes."""
    engine = make_engine()
    engine.upsert_node(make_node("n1", [reg("GPU-a", devmem=8000, type="NVIDIA A10")], allocatable=10))
    engine.upsert_pod(running_pod("full", "n1", "GPU-a,NVIDIA,8000,10:;"))
    damaged = running_pod("damaged", "n1", "GPU-a,NVIDIA,-1000,10:;")
    engine.upsert_pod(damaged)
    state = engine.nodes["n1"]
    assert "books -1000 MiB of memory" in next(iter(state.quarantine.values()))
    assert state.by_uuid["GPU-a"].usedmem == 8000
    assert not engine.schedule(make_pod(gpu_container(mem=10, cores=10))).ok
    engine.remove_pod(damaged)
    assert not state.quarantine
