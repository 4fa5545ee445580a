"""DCU ``Fit``: the standard template with the DCU type rule (vendors A.7, A.8, E.4, E.5).

Devices are given in HAMi's sorted order; fit walks from the last one. The card is the upstream test
card (128 MiB, 100 cores, split 100) unless a test says otherwise.
"""

from __future__ import annotations

import pytest
from hygon_testlib import (
    NOUSE_TYPE,
    NOUSE_UUID,
    USE_TYPE,
    USE_UUID,
    chosen,
    fit,
    gpu_policy,
    make_backend,
    request,
    usage,
)

from hami_core.plugins.types import ContainerDevice, GpuPolicy


def two() -> list:
    return [usage("dev-0", index=0), usage("dev-1", index=1)]


# ------------------------------------------------------------------------------------ the standard checklist
def test_picks_the_last_device_and_books_memory_and_cores() -> None:
    result = fit(two(), request(1, 64, 50))
    assert result.ok
    assert result.devices == (ContainerDevice("dev-1", "DCU", 64, 50, idx=1),)


def test_insufficient_memory() -> None:
    assert fit([usage("dev-0")], request(1, 512, 50)).reason == "1/1 CardInsufficientMemory"


def test_insufficient_core() -> None:
    assert fit([usage("dev-0", used=1, usedcores=100)], request(1, 64, 50)).reason == "1/1 CardInsufficientCore"


def test_request_type_other_than_dcu_is_a_type_mismatch() -> None:
    # Upstream checkType: a request whose Type is not "DCU" never matches, even with a matching annotation.
    result = fit([usage("dev-0")], request(1, 64, 50, type="test"), pod_annotations={USE_TYPE: "DCU"})
    assert result.reason == "1/1 CardTypeMismatch"


def test_split_count_exhausted() -> None:
    assert fit([usage("dev-0", used=100)], request(1, 64, 50)).reason == "1/1 CardTimeSlicingExhausted"


def test_cores_above_100_are_clamped() -> None:
    result = fit([usage("dev-0")], request(1, 64, 120))
    assert result.devices == (ContainerDevice("dev-0", "DCU", 64, 100, idx=0),)


def test_whole_card_on_a_shared_card_is_an_exclusive_conflict() -> None:
    assert fit([usage("dev-0", used=20)], request(1, 64, 100)).reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_zero_cores_on_a_saturated_card() -> None:
    result = fit([usage("dev-0", used=1, usedcores=100)], request(1, 64, 0))
    assert result.reason == "1/1 CardComputeUnitsExhausted"


def test_not_enough_devices() -> None:
    assert fit([usage("dev-0")], request(2, 64, 50)).reason == "1/1 AllocatedCardsInsufficientRequest"
    assert fit(two(), request(3, 64, 50)).reason == "2/2 AllocatedCardsInsufficientRequest"


def test_unhealthy_card() -> None:
    assert fit([usage("dev-0", health=False)], request(1, 64, 50)).reason == "1/1 CardNotHealth"


def test_reasons_are_counted_and_sorted() -> None:
    devices = [usage("dev-0", health=False), usage("dev-1", usedmem=100)]
    assert fit(devices, request(1, 64, 50)).reason == "1/2 CardInsufficientMemory, 1/2 CardNotHealth"


def test_whole_card_memory_books_the_device_total() -> None:
    # The request of a bare `hygon.com/dcunum: 1`: memory 0, percentage 100, cores 100.
    result = fit([usage("dev-0", totalmem=65520)], request(1, 0, 100, pct=100))
    assert result.devices == (ContainerDevice("dev-0", "DCU", 65520, 100, idx=0),)
    assert fit([usage("dev-0", totalmem=65520, usedmem=1, used=1, usedcores=0)],
               request(1, 0, 0, pct=100)).reason == "1/1 CardInsufficientMemory"


def test_two_devices_are_collected_last_first() -> None:
    result = fit([usage("dev-0", index=0, numa=0), usage("dev-1", index=1, numa=1)], request(2, 64, 50))
    assert chosen(result) == ["dev-1", "dev-0"]


def test_no_numa_binding_for_dcus() -> None:
    # nvidia.com/numa-bind sets policy.numa_bind for the pod; Hygon's fit has no NUMA step (E.4).
    policy = GpuPolicy(numa_bind=True)
    result = fit([usage("dev-0", numa=0), usage("dev-1", index=1, numa=1)], request(2, 64, 50), policy=policy)
    assert chosen(result) == ["dev-1", "dev-0"]


def test_mutex_policy_prefers_an_idle_card() -> None:
    devices = [usage("used", used=1, usedmem=10, usedcores=10), usage("idle", index=1)]
    # Mutex sorting puts the busiest first, so the idle card is last, and a used card is refused.
    assert chosen(fit(devices, request(1, 64, 50), policy=gpu_policy("mutex"))) == ["idle"]
    result = fit(devices, request(2, 64, 50), policy=gpu_policy("mutex"))
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"


def test_memory_given_wins_over_the_percentage_field() -> None:
    # HAMi writes MemPercentagereq 0 when memory is given; Memreq is what gets booked.
    assert fit([usage("dev-0")], request(1, 64, 10, pct=0)).devices[0].usedmem == 64


# ------------------------------------------------------------------------------------ type annotations (E.5)
@pytest.mark.parametrize(("annotations", "card", "ok"), [
    ({USE_TYPE: "dcu"}, "dcu", True),
    ({USE_TYPE: "dcu"}, "test", False),
    ({}, "dcu", True),
    ({USE_TYPE: "dcu,test"}, "dcu", True),
    ({NOUSE_TYPE: "dcu"}, "dcu", False),
    ({NOUSE_TYPE: "test,dcu"}, "test", False),
    ({NOUSE_TYPE: "dcu"}, "test", True),
    ({USE_TYPE: ""}, "dcu", True),
    ({USE_TYPE: "   "}, "dcu", True),
    ({NOUSE_TYPE: " , "}, "dcu", True),
    ({USE_TYPE: "DCU-K100_AI"}, "DCU-K100_AI", True),
    ({USE_TYPE: "k100"}, "DCU-K100_AI", True),
    ({USE_TYPE: " Z100 , K100 "}, "DCU-K100_AI", True),
    ({USE_TYPE: "Z100"}, "DCU-K100_AI", False),
    ({USE_TYPE: "DCU", NOUSE_TYPE: "K100"}, "DCU-K100_AI", False),
    ({USE_TYPE: "DCU", NOUSE_TYPE: "Z100"}, "DCU-K100_AI", True),
])
def test_type_selection(annotations: dict[str, str], card: str, ok: bool) -> None:
    assert make_backend().selection({"metadata": {"annotations": annotations}}).type_ok(card) is ok


def test_type_annotation_in_fit() -> None:
    devices = [usage("k100", type="DCU-K100_AI"), usage("z100", index=1, type="DCU-Z100")]
    assert chosen(fit(devices, request(1, 64, 50), pod_annotations={USE_TYPE: "K100"})) == ["k100"]
    assert chosen(fit(devices, request(1, 64, 50), pod_annotations={NOUSE_TYPE: "z100"})) == ["k100"]
    result = fit(devices, request(1, 64, 50), pod_annotations={USE_TYPE: "BW1000"})
    assert result.reason == "2/2 CardTypeMismatch"


# ------------------------------------------------------------------------------------ UUID annotations (A.8)
def test_use_uuid_mismatch() -> None:
    result = fit([usage("dev-1")], request(1, 64, 50), pod_annotations={USE_UUID: "dev-0"})
    assert result.reason == "1/1 CardUuidMismatch"


def test_use_uuid_list_is_trimmed_and_exact() -> None:
    devices = [usage("dev-0"), usage("dev-1", index=1), usage("dev-10", index=2)]
    assert chosen(fit(devices, request(1, 64, 50), pod_annotations={USE_UUID: " dev-1 , dev-x"})) == ["dev-1"]
    # "dev-1" is not a prefix match for "dev-10".
    assert chosen(fit(devices, request(2, 64, 50), pod_annotations={USE_UUID: "dev-0,dev-1"})) == ["dev-1", "dev-0"]


def test_nouse_uuid_excludes_cards() -> None:
    devices = [usage("dev-0"), usage("dev-1", index=1)]
    assert chosen(fit(devices, request(1, 64, 50), pod_annotations={NOUSE_UUID: "dev-1"})) == ["dev-0"]
    result = fit(devices, request(1, 64, 50), pod_annotations={NOUSE_UUID: "dev-0, dev-1"})
    assert result.reason == "2/2 CardUuidMismatch"


def test_blank_uuid_lists_are_no_constraint() -> None:
    devices = [usage("dev-0"), usage("dev-1", index=1)]
    assert chosen(fit(devices, request(1, 64, 50), pod_annotations={USE_UUID: " ", NOUSE_UUID: ""})) == ["dev-1"]


def test_type_is_checked_before_uuid_and_health_before_type() -> None:
    devices = [usage("dev-0", health=False), usage("dev-1", index=1, type="DCU-Z100")]
    result = fit(devices, request(1, 64, 50), pod_annotations={USE_TYPE: "K100", USE_UUID: "dev-x"})
    assert result.reason == "1/2 CardNotHealth, 1/2 CardTypeMismatch"
