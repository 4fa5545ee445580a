"""Biren ``Fit`` beyond HAMi's own cases: what it checks, what it never checks, what it books.

Devices are given in HAMi's order; the fit walks from the last one.
"""

from __future__ import annotations

from biren_testlib import NOUSE_UUID, USE_UUID, chosen, fit, gpu_policy, request, usage

from hami_core.plugins.types import ContainerDevice


def test_takes_devices_from_the_last_and_books_nothing_but_a_slot() -> None:
    result = fit([usage("a", index=0), usage("b", index=1), usage("c", index=2)], request(2))
    assert result.devices == (ContainerDevice("c", "Biren", 0, 0, idx=2), ContainerDevice("b", "Biren", 0, 0, idx=1))


def test_memory_and_cores_are_never_checked_nor_booked() -> None:
    # A request with memory and cores (not one Biren's request generator makes) on a full card: HAMi's Biren fit
    # books Usedcores = Coresreq and no Usedmem, and compares neither with what is free.
    full = usage("a", count=4, used=1, totalmem=100, usedmem=100, totalcore=100, usedcores=100)
    result = fit([full], request(1, memreq=512, coresreq=150))
    assert result.devices == (ContainerDevice("a", "Biren", 0, 150, idx=0),)


def test_split_count_allows_sharing() -> None:
    # A device registered with count 2 takes a second task until both slots are used.
    assert chosen(fit([usage("a", count=2, used=1)], request(1))) == ["a"]
    assert fit([usage("a", count=2, used=2)], request(1)).reason == "1/1 CardTimeSlicingExhausted"


def test_reasons_are_counted_per_device() -> None:
    devices = [usage("a", health=False), usage("b", used=1), usage("c"), usage("d")]
    result = fit(devices, request(3), pod_annotations={NOUSE_UUID: "d"})
    assert result.reasons == ("1/4 AllocatedCardsInsufficientRequest", "1/4 CardNotHealth",
                              "1/4 CardTimeSlicingExhausted", "1/4 CardUuidMismatch")


def test_use_and_nouse_uuid_lists() -> None:
    devices = [usage("a"), usage("b", index=1), usage("c", index=2)]
    assert chosen(fit(devices, request(2), pod_annotations={USE_UUID: " a, b "})) == ["b", "a"]
    assert chosen(fit(devices, request(1), pod_annotations={NOUSE_UUID: "c,b"})) == ["a"]
    # An empty list is no constraint.
    assert chosen(fit(devices, request(1), pod_annotations={USE_UUID: " "})) == ["c"]


def test_card_type_annotations_are_not_read() -> None:
    # birentech.com/use-biren is declared in HAMi but Fit never reads it (checkType looks at the request only).
    result = fit([usage("a", type="Biren-166M")], request(1), pod_annotations={"birentech.com/use-biren": "110E"})
    assert chosen(result) == ["a"]


def test_mutex_takes_idle_devices_only_and_combines_with_other_tokens() -> None:
    devices = [usage("a", count=4), usage("b", count=4, used=1)]
    assert chosen(fit(devices, request(1), policy=gpu_policy("binpack,mutex"))) == ["a"]
    assert chosen(fit(devices, request(1), policy=gpu_policy("binpack"))) == ["b"]


def test_custom_info_travels_with_the_chosen_device() -> None:
    (dev,) = fit([usage("a", custom_info={"AIC": "0"})], request(1)).devices
    assert dev.custom_info == {"AIC": "0"}


def test_no_device_at_all() -> None:
    assert fit([], request(1)).reason == "NodeInsufficientDevice"
