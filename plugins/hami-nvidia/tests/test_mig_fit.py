"""NVIDIA dynamic-MIG fit (scheduler.md §6.6 steps 15-16, §6.8; vendors.md B.6, B.7, B.10), on hand-computed
A100-40GB profiles (see ``migsched_testlib``): profile choice, placement order, occupied placements, several
instances from one GPU, and the refusal reason."""

from __future__ import annotations

import pytest
from migsched_testlib import instance, mig_gpu, placements
from nvidia_testlib import FakeNode, fit, gpu_policy, request, usage

from hami_core.plugins.types import FitCandidate, Placement
from hami_nvidia import backend as nv

MIG = {"nvidia.com/vgpu-mode": "mig"}


# ------------------------------------------------------------------------------------ profile choice
@pytest.mark.parametrize(("mem", "profile", "start", "usedmem", "cores"), [
    (1, "1g.5gb", 6, 5120, 14),
    (5000, "1g.5gb", 6, 5120, 14),
    (5120, "1g.5gb", 6, 5120, 14),       # memoryMB >= request: equal fits
    (5121, "2g.10gb", 0, 10240, 28),     # 2g.* from the lowest start
    (10000, "2g.10gb", 0, 10240, 28),
    (12000, "3g.20gb", 4, 20480, 42),    # 3g before 4g (same memory, fewer slices); 3g.* from the highest start
    (30000, "7g.40gb", 0, 40960, 100),
])
def test_smallest_fitting_profile(mem: int, profile: str, start: int, usedmem: int, cores: int) -> None:
    result = fit([mig_gpu("GPU-m")], request(1, memreq=mem, coresreq=10), pod_annotations=MIG)
    (dev,) = result.devices
    # the container books the profile, not the request (AddResourceUsage rewrite)
    assert (dev.uuid, dev.usedmem, dev.usedcores, dev.idx) == ("GPU-m", usedmem, cores, 0)
    assert dev.custom_info == {"migProfile": profile, "migPlacement": Placement(start, {"1g.5gb": 1, "2g.10gb": 2,
                                                                                        "3g.20gb": 4,
                                                                                        "7g.40gb": 8}[profile])}


def test_a_mode_annotation_is_not_needed() -> None:
    # the vgpu-mode filter only applies when the pod sets it (spec §6.8 "if set")
    assert placements(fit([mig_gpu("GPU-m")], request(1, memreq=5000)).devices) == [("GPU-m", "1g.5gb", 6)]


def test_percentage_is_of_the_whole_gpu() -> None:
    # 25 % of 40960 MiB = 10240 → 2g.10gb; 100 % (a whole-card request) → 7g.40gb
    assert placements(fit([mig_gpu("GPU-m")], request(1, pct=25)).devices) == [("GPU-m", "2g.10gb", 0)]
    (whole,) = fit([mig_gpu("GPU-m")], request(1, pct=100, coresreq=100)).devices
    assert (whole.usedmem, whole.usedcores, whole.custom_info["migProfile"]) == (40960, 100, "7g.40gb")


def test_1g_is_placed_from_the_highest_free_start() -> None:
    gpu = mig_gpu("GPU-m", in_use=[("1g.5gb", 6), ("1g.5gb", 5)])
    assert placements(fit([gpu], request(1, memreq=5000)).devices) == [("GPU-m", "1g.5gb", 4)]


@pytest.mark.parametrize(("in_use", "mem", "expected"), [
    ([("2g.10gb", 0)], 8000, ("2g.10gb", 2)),
    ([("2g.10gb", 0), ("2g.10gb", 2)], 8000, ("2g.10gb", 4)),
    ([("3g.20gb", 4)], 12000, ("3g.20gb", 0)),
    ([("1g.5gb", 0)], 8000, ("2g.10gb", 2)),          # a 1g at 0 blocks the 2g at 0
    ([("1g.5gb", 4)], 12000, ("3g.20gb", 0)),         # a 1g at 4 blocks the 3g at 4
    ([("2g.10gb", 0)], 12000, ("3g.20gb", 4)),
])
def test_an_occupied_placement_is_skipped(in_use: list, mem: int, expected: tuple[str, int]) -> None:
    result = fit([mig_gpu("GPU-m", in_use=in_use)], request(1, memreq=mem))
    assert placements(result.devices) == [("GPU-m", *expected)]


def test_scattered_small_instances_block_every_larger_profile() -> None:
    # 1g instances at 1, 3 and 5 hit every 2g (0-1, 2-3, 4-5), both 3g (0-3, 4-7), the 4g and the 7g
    gpu = mig_gpu("GPU-m", in_use=[("1g.5gb", s) for s in (1, 3, 5)])
    assert fit([gpu], request(1, memreq=8000)).reason == "1/1 CardMigTopologyInfeasible"
    assert placements(fit([gpu], request(1, memreq=5000)).devices) == [("GPU-m", "1g.5gb", 6)]
    # next to a 4g at 0 the 1g slots 4..6 remain, taken from the highest
    gpu = mig_gpu("GPU-m", in_use=[("4g.20gb", 0), ("1g.5gb", 6), ("1g.5gb", 5)])
    assert placements(fit([gpu], request(1, memreq=5000)).devices) == [("GPU-m", "1g.5gb", 4)]


# ------------------------------------------------------------------------------------ refusal
def test_three_2g_leave_room_for_a_1g_only() -> None:
    # vendors.md B.10: with three 2g placements used a fourth 2g fails but a 1g fits
    gpu = mig_gpu("GPU-m", in_use=[("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4)])
    assert fit([gpu], request(1, memreq=8000)).reason == "1/1 CardMigTopologyInfeasible"
    assert placements(fit([gpu], request(1, memreq=5000)).devices) == [("GPU-m", "1g.5gb", 6)]
    # 25 % of the card (10240 MiB) with only a 1g slot free: no fit
    assert fit([gpu], request(1, pct=25)).reason == "1/1 CardMigTopologyInfeasible"


def test_the_reason_counts_every_refusing_gpu() -> None:
    full = [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4)]
    gpus = [mig_gpu("GPU-a", in_use=full), mig_gpu("GPU-b", index=1, in_use=full)]
    assert fit(gpus, request(1, memreq=8000)).reason == "2/2 CardMigTopologyInfeasible"
    # earlier checks still come first: memory, then the split count
    gpus.append(mig_gpu("GPU-c", index=2, in_use=[("7g.40gb", 0)]))
    assert fit(gpus, request(1, memreq=8000)).reason == "1/3 CardInsufficientMemory, 2/3 CardMigTopologyInfeasible"
    spent = mig_gpu("GPU-d", in_use=[("1g.5gb", 6), ("1g.5gb", 5)], count=2)
    assert fit([spent], request(1, memreq=5000)).reason == "1/1 CardTimeSlicingExhausted"


def test_an_exclusive_request_needs_an_idle_gpu() -> None:
    # HAMi's checklist applies unchanged: an instance books its profile's cores, so a busy MIG GPU has fewer than
    # 100 free and a 100-core request stops at the core check (step 12) before the exclusive one (step 13)
    busy = mig_gpu("GPU-m", in_use=[("1g.5gb", 6)])
    assert fit([busy], request(1, memreq=5000, coresreq=100)).reason == "1/1 CardInsufficientCore"
    # on an idle GPU it gets the smallest profile for its memory and books that profile's cores, not 100
    (dev,) = fit([mig_gpu("GPU-m")], request(1, memreq=5000, coresreq=100)).devices
    assert (dev.custom_info["migProfile"], dev.usedcores) == ("1g.5gb", 14)


def test_a_mode_filter_that_excludes_mig_reports_the_type_first() -> None:
    result = fit([mig_gpu("GPU-m")], request(1, memreq=5000), pod_annotations={"nvidia.com/vgpu-mode": "hami-core"})
    assert result.reason == "1/1 CardTypeMismatch"


# ------------------------------------------------------------------------------------ several instances
def test_several_instances_from_one_gpu() -> None:
    result = fit([mig_gpu("GPU-m")], request(3, memreq=5000), pod_annotations=MIG)
    assert placements(result.devices) == [("GPU-m", "1g.5gb", 6), ("GPU-m", "1g.5gb", 5), ("GPU-m", "1g.5gb", 4)]
    result = fit([mig_gpu("GPU-m")], request(2, memreq=12000))
    assert placements(result.devices) == [("GPU-m", "3g.20gb", 4), ("GPU-m", "3g.20gb", 0)]


def test_an_instance_that_does_not_fit_the_gpu_any_more() -> None:
    # two 3g fill the card; the third is refused on the revisit and no other GPU is there
    result = fit([mig_gpu("GPU-m")], request(3, memreq=12000))
    assert result.reason == "1/1 CardMigTopologyInfeasible, 2/1 AllocatedCardsInsufficientRequest"


def test_the_walk_moves_to_the_next_gpu_when_one_is_full() -> None:
    full = [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4)]
    gpus = [mig_gpu("GPU-a"), mig_gpu("GPU-b", index=1, in_use=full)]
    result = fit(gpus, request(3, memreq=5000))
    assert placements(result.devices) == [("GPU-b", "1g.5gb", 6), ("GPU-a", "1g.5gb", 6), ("GPU-a", "1g.5gb", 5)]


def test_a_mig_gpu_next_to_a_shared_one() -> None:
    gpus = [usage("core-0", totalmem=40960, count=10), mig_gpu("GPU-m", index=1)]
    # the MIG GPU is last (preferred); without a mode filter both instances come from it
    result = fit(gpus, request(2, memreq=5000))
    assert placements(result.devices) == [("GPU-m", "1g.5gb", 6), ("GPU-m", "1g.5gb", 5)]
    shared = fit(gpus, request(1, memreq=5000), pod_annotations={"nvidia.com/vgpu-mode": "hami-core"})
    assert [(d.uuid, d.usedmem, d.custom_info) for d in shared.devices] == [("core-0", 5000, None)]
    assert fit(gpus, request(2, memreq=5000), pod_annotations={"nvidia.com/vgpu-mode": "hami-core"}).reason == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTypeMismatch")


def test_a_shared_gpu_is_never_chosen_twice() -> None:
    # the revisit is for MIG GPUs only (spec §6.6 note)
    gpus = [usage("core-0", totalmem=40960, count=10), mig_gpu("GPU-m", index=1, in_use=[("7g.40gb", 0)])]
    assert fit(gpus, request(2, memreq=5000)).reason == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory")


def test_topology_policy_terminates_on_a_mig_gpu() -> None:
    # topology-aware collects every eligible instance (the walk stops when the GPU is full), then picks two
    result = fit([mig_gpu("GPU-m")], request(2, memreq=5000), policy=gpu_policy("topology-aware"))
    assert placements(result.devices) == [("GPU-m", "1g.5gb", 6), ("GPU-m", "1g.5gb", 5)]


def test_placements_of_size_zero_are_never_chosen() -> None:
    gpu = mig_gpu("GPU-m")
    broken = type(gpu.info.mig_profiles[0])("1g.5gb", 5120, 14, 1, (Placement(3, 0),))
    gpu.info = type(gpu.info)(id="GPU-m", count=7, devmem=40960, devcore=100, type=gpu.type, mode="mig",
                              health=True, mig_profiles=(broken,), vendor="NVIDIA")
    assert fit([gpu], request(1, memreq=5000)).reason == "1/1 CardMigTopologyInfeasible"
    assert fit([gpu], request(1, memreq=5000), policy=gpu_policy("topology-aware")).reason == (
        "1/1 CardMigTopologyInfeasible")


def test_the_rule_replays_instances_chosen_earlier_in_the_container() -> None:
    gpu = mig_gpu("GPU-m", in_use=[("3g.20gb", 4)])
    earlier = [nv.ContainerDevice("GPU-m", "NVIDIA", 12000, 0, 0)]   # replayed: 3g at 0 → card full
    assert nv.mig_rule(gpu, 5000, 0, []) is True
    assert nv.mig_rule(gpu, 5000, 0, earlier) is False
    other = [nv.ContainerDevice("GPU-x", "NVIDIA", 12000, 0, 0)]     # other GPUs do not count
    assert nv.mig_rule(gpu, 5000, 0, other) is True
    assert nv.mig_rule(usage("core-0"), 5000, 0, earlier) is True   # not a MIG GPU: no rule


def test_a_node_view_without_the_mig_summary_is_scanned() -> None:
    # the engine's node state says which backends have MIG GPUs; a hand-built view is scanned instead
    plain = FakeNode()
    summary = FakeNode()
    summary.mig = frozenset()   # type: ignore[attr-defined]  # says: no MIG GPU here
    cands = [FitCandidate(plain, [mig_gpu("GPU-m")], {}), FitCandidate(summary, [usage("core-0")], {})]
    pod = {"metadata": {"name": "p"}, "spec": {"containers": []}}
    from nvidia_testlib import default_backend

    first, second = default_backend().hami_filter_nodes(pod, request(1, memreq=64), cands, gpu_policy(), None)
    assert placements(first.devices) == [("GPU-m", "1g.5gb", 6)]
    assert second.devices[0].custom_info is None


def test_instance_helper_matches_the_profiles() -> None:
    assert instance("3g.20gb", 4).placement == Placement(4, 4)
