"""Fit: HAMi's standard template with the Mthreads rules (vendors H.5, A.7, A.8)."""

from __future__ import annotations

import pytest
from mthreads_testlib import NOUSE_UUID, USE_UUID, chosen, fit, gpu_policy, request, usage

from hami_core.plugins.types import ContainerDevice


def card(id: str, **kw: int) -> object:
    """A device of HAMi's TestDevices_Fit matrix: 1280 MiB, 100 cores, split 100."""
    kw.setdefault("totalmem", 1280)
    kw.setdefault("totalcore", 100)
    return usage(id, **kw)


# ------------------------------------------------------------------------------------ HAMi's Fit matrix
def test_fit_success_takes_the_last_device() -> None:
    devs = [card("dev-0", totalmem=128), card("dev-1", totalmem=128)]
    result = fit(devs, request(1, 64, 50, pct=0))
    assert chosen(result) == ["dev-1"]
    assert result.devices == (ContainerDevice("dev-1", "Mthreads", 64, 50, idx=0),)


@pytest.mark.parametrize(("dev", "req", "annos", "reason"), [
    (card("dev-0", totalmem=128), request(1, 512, 50, pct=0), {}, "1/1 CardInsufficientMemory"),
    (card("dev-0", totalmem=1024, usedcores=100), request(1, 512, 50, pct=0), {}, "1/1 CardInsufficientCore"),
    (card("dev-0", totalmem=128), request(1, 512, 50, pct=0, type="OtherType"), {}, "1/1 CardTypeMismatch"),
    (card("dev-1"), request(2, 512, 50, pct=0), {USE_UUID: "dev-0"}, "1/1 CardUuidMismatch"),
    (card("dev-0"), request(2, 512, 50, pct=0), {NOUSE_UUID: "dev-0"}, "1/1 CardUuidMismatch"),
    (card("dev-0", used=100), request(1, 512, 50, pct=0), {}, "1/1 CardTimeSlicingExhausted"),
    (card("dev-0", used=20), request(1, 512, 100, pct=0), {}, "1/1 ExclusiveDeviceAllocateConflict"),
    (card("dev-0", used=20, usedcores=100), request(1, 512, 0, pct=0), {}, "1/1 CardComputeUnitsExhausted"),
    (card("dev-0", used=20, usedcores=10), request(2, 512, 20, pct=0), {},
     "1/1 AllocatedCardsInsufficientRequest"),
    (card("dev-0", health=False), request(1, 512, 0, pct=0), {}, "1/1 CardNotHealth"),
], ids=["memory", "core", "type", "use-uuid", "nouse-uuid", "overused", "exclusive", "compute-exhausted",
        "insufficient-request", "unhealthy"])
def test_fit_failures(dev: object, req: object, annos: dict, reason: str) -> None:
    result = fit([dev], req, pod_annotations=annos)
    assert not result.ok
    assert result.reason == reason


def test_core_request_above_100_is_clamped() -> None:
    result = fit([card("dev-0")], request(1, 512, 120, pct=0))
    assert result.devices == (ContainerDevice("dev-0", "Mthreads", 512, 100, idx=0),)


def test_memory_percentage_books_part_of_the_card() -> None:
    result = fit([card("dev-0", used=20, usedcores=10)], request(1, 0, 20, pct=10))
    assert result.devices == (ContainerDevice("dev-0", "Mthreads", 128, 20, idx=0),)


# ------------------------------------------------------------------------------------ 16-core MTT GPUs
def test_whole_card_percentage_books_all_memory() -> None:
    result = fit([usage("g0", index=3)], request(1, 0, 0, pct=100))
    assert result.devices == (ContainerDevice("g0", "Mthreads", 49152, 0, idx=3),)


def test_compute_exhausted_when_16_cores_are_used_and_no_cores_are_asked() -> None:
    assert fit([usage("g0", used=1, usedmem=1024, usedcores=16)], request(1, 1024)).reason == (
        "1/1 CardComputeUnitsExhausted")


def test_more_cores_than_a_gpu_has_is_insufficient_core() -> None:
    assert fit([usage("g0")], request(1, 1024, 17)).reason == "1/1 CardInsufficientCore"
    assert fit([usage("g0", used=1, usedcores=8)], request(1, 1024, 9)).reason == "1/1 CardInsufficientCore"


def test_exclusive_100_rule_never_triggers_on_16_core_cards() -> None:
    # Totalcore is 16, so a whole-card request (16 cores) on a busy card with free cores still fits,
    # and a 100-core request is refused for cores, not as an exclusive conflict.
    assert chosen(fit([usage("g0", used=3, usedmem=0, usedcores=0)], request(1, 49152, 16))) == ["g0"]
    assert fit([usage("g0", used=1)], request(1, 0, 100)).reason == "1/1 CardInsufficientCore"


def test_type_check_is_case_sensitive_contains() -> None:
    devs = [usage("a", type="mthreads"), usage("b", type="MTT-Mthreads-S4000")]
    assert chosen(fit(devs, request(1, 1024))) == ["b"]
    assert fit(devs[:1], request(1, 1024)).reason == "1/1 CardTypeMismatch"


def test_reasons_are_counted_and_sorted() -> None:
    devs = [usage("a", usedmem=49152), usage("b"), usage("c", usedmem=49000)]
    result = fit(devs, request(1, 1024), pod_annotations={NOUSE_UUID: "b"})
    # Items sort as whole strings ("<n>/<total> <Reason>"), as common.GenReason does.
    assert result.reason == "1/3 CardUuidMismatch, 2/3 CardInsufficientMemory"


@pytest.mark.parametrize(("annos", "picked"), [
    ({}, ["c"]),
    ({USE_UUID: ""}, ["c"]),
    ({USE_UUID: "  "}, ["c"]),
    ({USE_UUID: "x, a"}, ["a"]),
    ({NOUSE_UUID: "c,b"}, ["a"]),
    ({USE_UUID: "a,b", NOUSE_UUID: "b"}, ["a"]),
])
def test_uuid_selection(annos: dict, picked: list[str]) -> None:
    assert chosen(fit([usage("a"), usage("b"), usage("c")], request(1, 1024), pod_annotations=annos)) == picked


def test_mutex_policy_needs_an_idle_card() -> None:
    devs = [usage("a"), usage("b", used=1, usedmem=1024)]
    assert chosen(fit(devs, request(1, 1024), policy=gpu_policy("binpack,mutex"))) == ["a"]
    assert fit(devs[1:], request(1, 1024), policy=gpu_policy("mutex")).reason == (
        "1/1 ExclusiveDeviceAllocateConflict")
    assert chosen(fit(devs[1:], request(1, 1024), policy=gpu_policy("binpack"))) == ["b"]


def test_one_container_may_take_several_devices() -> None:
    result = fit([usage("a", index=0), usage("b", index=1)], request(2, 49152, 16))
    assert [(d.uuid, d.idx) for d in result.devices] == [("b", 1), ("a", 0)]


# ------------------------------------------------------------------------------------ one device per pod
def test_later_containers_go_where_earlier_ones_went() -> None:
    # HAMi customFilterRule: the earlier container got "a", so "b" (preferred, last) is refused.
    earlier = {"Mthreads": [(ContainerDevice("a", "Mthreads", 1024, 0),), ()]}
    result = fit([usage("a"), usage("b")], request(1, 1024), allocated=earlier)
    assert chosen(result) == ["a"]
    only_b = fit([usage("b")], request(1, 1024), allocated=earlier)
    assert only_b.reason == "1/1 CardNotFoundCustomFilterRule"


def test_earlier_containers_on_two_devices_leave_no_device() -> None:
    earlier = {"Mthreads": [(ContainerDevice("a", "Mthreads", 1024, 0), ContainerDevice("b", "Mthreads", 1024, 0))]}
    result = fit([usage("a"), usage("b")], request(1, 1024), allocated=earlier)
    assert result.reason == "2/2 CardNotFoundCustomFilterRule"


def test_rule_comes_after_the_capacity_checks() -> None:
    earlier = {"Mthreads": [(ContainerDevice("a", "Mthreads", 1024, 0),)]}
    result = fit([usage("a", usedmem=49152), usage("b")], request(1, 1024), allocated=earlier)
    assert result.reason == "1/2 CardInsufficientMemory, 1/2 CardNotFoundCustomFilterRule"


def test_other_backends_allocations_do_not_count() -> None:
    earlier = {"NVIDIA": [(ContainerDevice("GPU-x", "NVIDIA", 1024, 0),)]}
    assert chosen(fit([usage("a"), usage("b")], request(1, 1024), allocated=earlier)) == ["b"]
