"""HAMi's AMD fit beyond its Go tests: CU booking on an MI300X, selection lists, mutex, reason strings."""

from __future__ import annotations

import pytest
from amd_testlib import (
    ALLOCATED,
    MI300X,
    NOUSE_UUID,
    USE_UUID,
    Clock,
    amd_container,
    amd_node,
    chosen,
    fit,
    gpu_policy,
    make_engine,
    make_pod,
    request,
    usage,
)

mi300x = {"type": MI300X, "totalmem": 196608, "totalcore": 304, "count": 4}


@pytest.mark.parametrize(("percent", "cus"), [(25, 76), (33, 100), (67, 203), (100, 304), (1, 3)])
def test_percentage_becomes_floor_of_the_cu_count(percent: int, cus: int) -> None:
    # docs/develop/amd-vgpu.md §5.2: cuCount = floor(percentage x devcore / 100)
    result = fit([usage("g0", **mi300x)], request(1, 16384, percent))
    assert [(d.usedmem, d.usedcores) for d in result.devices] == [(16384, cus)]


def test_memory_only_request_books_its_memory_and_all_cus() -> None:
    # The request's cores default to 100 percent: a memory-only vGPU still takes every CU of its GPU.
    result = fit([usage("g0", **mi300x)], request(1, 8192, 100))
    assert [(d.usedmem, d.usedcores) for d in result.devices] == [(8192, 304)]


def test_partial_memory_without_cores_books_no_cu() -> None:
    # Coresreq 0 (never produced by the request rule, but HAMi's Fit handles it): only a whole-memory booking takes
    # all the CUs.
    assert fit([usage("g0", **mi300x)], request(1, 8192, 0)).devices[0].usedcores == 0


def test_a_core_percentage_on_a_device_without_cus_is_insufficient_core() -> None:
    result = fit([usage("g0", totalcore=0)], request(1, 100, 10))
    assert result.reason == "1/1 CardInsufficientCore"


def test_no_exclusive_whole_card_rule() -> None:
    # The standard checklist refuses a 100-core request on a busy 100-core card; HAMi's AMD fit does not.
    assert fit([usage("g0", used=1, usedmem=100)], request(1, 100, 100)).ok


def test_overflowing_core_product_wraps_like_go_int32() -> None:
    # Totalcore * Coresreq is int32 arithmetic in Go: 2^30 x 4 wraps to 0, clamped up to 1 CU.
    assert fit([usage("g0", totalcore=2**30)], request(1, 100, 4)).devices[0].usedcores == 1


def test_cus_left_decide_the_fit() -> None:
    busy = usage("g1", index=1, **mi300x, used=1, usedcores=300)
    free = usage("g0", index=0, **mi300x)
    assert chosen(fit([free, busy], request(1, 1024, 10))) == ["g0"]  # 30 CUs do not fit in the 4 left on g1
    assert chosen(fit([free, busy], request(1, 1024, 1))) == ["g1"]  # 3 CUs do


def test_mutex_policy_needs_an_idle_gpu() -> None:
    devices = [usage("g0"), usage("g1", index=1, used=1, usedmem=100, usedcores=10)]
    assert chosen(fit(devices, request(1, 100, 10), policy=gpu_policy("mutex"))) == ["g0"]
    result = fit(devices[1:], request(1, 100, 10), policy=gpu_policy("mutex"))
    assert result.reason == "1/1 ExclusiveDeviceAllocateConflict"


@pytest.mark.parametrize(("annos", "want"), [
    pytest.param({USE_UUID: "g0, g2"}, ["g0"], id="use list"),
    pytest.param({NOUSE_UUID: "g1"}, ["g0"], id="nouse list"),
    pytest.param({USE_UUID: " "}, ["g1"], id="blank use list is no constraint"),
])
def test_uuid_lists(annos: dict[str, str], want: list[str]) -> None:
    assert chosen(fit([usage("g0"), usage("g1", index=1)], request(1, 100, 10), pod_annotations=annos)) == want


def test_a_use_list_of_only_commas_matches_no_gpu() -> None:
    # HAMi CheckUUID: a non-blank list whose entries are all blank matches nothing.
    result = fit([usage("g0")], request(1, 100, 10), pod_annotations={USE_UUID: ","})
    assert result.reason == "1/1 CardUuidMismatch"


def test_reasons_count_every_device_and_the_partial_allocation() -> None:
    devices = [usage("g0", health=False), usage("g1", index=1), usage("g2", index=2, usedmem=950)]
    result = fit(devices, request(2, 100, 10))
    assert not result.ok
    assert result.reason == "1/3 AllocatedCardsInsufficientRequest, 1/3 CardInsufficientMemory, 1/3 CardNotHealth"


def test_engine_books_cus_so_pods_share_a_gpu_until_its_cus_run_out(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(amd_node("n", 1))  # one MI300X, 4 tasks, 304 CUs
    placed = []
    for i in range(4):
        pod = engine.admit(make_pod(amd_container(mem=16384, cores=33), name=f"p{i}"))
        decision = engine.schedule(pod)
        if decision.node is None:
            placed.append(decision.failed)
            continue
        engine.reserve(pod, decision)
        placed.append(decision.annotations[ALLOCATED])
    assert placed[:3] == [f"n-gpu-0,{MI300X},16384,100:;"] * 3
    # 300 of 304 CUs are booked: a fourth 100-CU slice does not fit
    assert "CardInsufficientCore" in str(placed[3])
