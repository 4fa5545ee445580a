"""HAMi's Cambricon Fit (vendors D.4, A.7): every case of device_test.go TestDevices_Fit, and more."""

from __future__ import annotations

from cambricon_testlib import FakeNode, backend, chosen, fit, gpu_policy, make_pod, request, usage

from hami_core.plugins.types import ContainerDevice, FilterCode, FitCandidate

# ------------------------------------------------------------------------------------ TestDevices_Fit


def test_fit_success_picks_the_last_device() -> None:
    devices = [usage("dev-0"), usage("dev-1")]
    result = fit(devices, request(memreq=64, coresreq=50))
    assert result.devices == (ContainerDevice("dev-1", "MLU", 64, 50, idx=0),)


def test_memory_not_enough() -> None:
    assert fit([usage("dev-0")], request(memreq=512, coresreq=50)).reason == "1/1 CardInsufficientMemory"


def test_core_not_enough() -> None:
    result = fit([usage("dev-0", totalmem=1024, usedcores=100)], request(memreq=512, coresreq=50))
    assert result.reason == "1/1 CardInsufficientCore"


def test_type_mismatch() -> None:
    result = fit([usage("dev-0")], request(memreq=512, coresreq=50, type="OtherType"))
    assert result.code is FilterCode.UNSCHEDULABLE
    assert result.reason == "1/1 CardTypeMismatch"


def test_use_uuid_mismatch() -> None:
    result = fit([usage("dev-1", totalmem=1280)], request(nums=2, memreq=512, coresreq=50),
                 pod_annotations={"cambricon.com/use-gpuuuid": "dev-0"})
    assert result.reason == "1/1 CardUuidMismatch"


def test_nouse_uuid_match() -> None:
    result = fit([usage("dev-0", totalmem=1280)], request(nums=2, memreq=512, coresreq=50),
                 pod_annotations={"cambricon.com/nouse-gpuuuid": "dev-0"})
    assert result.reason == "1/1 CardUuidMismatch"


def test_card_overused() -> None:
    result = fit([usage("dev-0", totalmem=1280, used=100)], request(memreq=512, coresreq=50))
    assert result.reason == "1/1 CardTimeSlicingExhausted"


def test_cores_above_100_are_clamped() -> None:
    result = fit([usage("dev-0", totalmem=1280)], request(memreq=512, coresreq=120))
    assert result.devices == (ContainerDevice("dev-0", "MLU", 512, 100, idx=0),)


def test_exclusive_card_on_a_used_device() -> None:
    result = fit([usage("dev-0", totalmem=1280, used=20)], request(memreq=512, coresreq=100))
    assert result.reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_compute_units_exhausted() -> None:
    result = fit([usage("dev-0", totalmem=1280, used=20, usedcores=100)], request(memreq=512, coresreq=0))
    assert result.reason == "1/1 CardComputeUnitsExhausted"


def test_allocated_cards_insufficient_request() -> None:
    result = fit([usage("dev-0", totalmem=1280, used=20, usedcores=10)], request(nums=2, memreq=512, coresreq=20))
    assert result.reason == "1/1 AllocatedCardsInsufficientRequest"


def test_memory_percentage() -> None:
    result = fit([usage("dev-0", totalmem=1280, used=20, usedcores=10)], request(memreq=0, pct=10, coresreq=20))
    assert result.devices == (ContainerDevice("dev-0", "MLU", 128, 20, idx=0),)


def test_mutex_policy_rejects_a_used_device() -> None:
    result = fit([usage("dev-0", used=1)], request(memreq=64, coresreq=50), policy=gpu_policy("mutex"))
    assert result.reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_partial_allocation_over_several_cards() -> None:
    devices = [usage("dev-0", totalmem=1280), usage("dev-1", index=1, totalmem=1280)]
    assert fit(devices, request(nums=3, memreq=512, coresreq=20)).reason == "2/2 AllocatedCardsInsufficientRequest"


def test_card_not_healthy() -> None:
    assert fit([usage("dev-0", health=False)], request(memreq=64, coresreq=50)).reason == "1/1 CardNotHealth"


# ------------------------------------------------------------------------------------ beyond HAMi's table


def test_whole_card_request_books_the_whole_memory() -> None:
    # The request HAMi generates for a bare `cambricon.com/vmlu: 1`: pct 100, 100 cores.
    result = fit([usage("dev-0", totalmem=49152)], request(memreq=0, pct=100, coresreq=100))
    assert result.devices == (ContainerDevice("dev-0", "MLU", 49152, 100, idx=0),)


def test_whole_card_request_needs_an_idle_card() -> None:
    devices = [usage("dev-0", index=0, totalmem=49152), usage("dev-1", index=1, totalmem=49152, used=1, usedmem=256,
                                                              usedcores=10)]
    result = fit(devices, request(memreq=0, pct=100, coresreq=100))
    assert chosen(result) == ["dev-0"]


def test_reasons_are_counted_and_sorted() -> None:
    devices = [usage("dev-0", health=False), usage("dev-1", index=1, totalmem=64), usage("dev-2", index=2, used=100)]
    result = fit(devices, request(memreq=100, coresreq=10))
    assert result.reason == "1/3 CardInsufficientMemory, 1/3 CardNotHealth, 1/3 CardTimeSlicingExhausted"


def test_several_devices_are_taken_from_the_end() -> None:
    devices = [usage(f"dev-{i}", index=i, totalmem=1024) for i in range(4)]
    result = fit(devices, request(nums=3, memreq=256, coresreq=25))
    assert [(d.uuid, d.idx) for d in result.devices] == [("dev-3", 3), ("dev-2", 2), ("dev-1", 1)]


def test_use_and_nouse_lists_are_trimmed_comma_lists() -> None:
    devices = [usage("dev-0", index=0), usage("dev-1", index=1), usage("dev-2", index=2)]
    result = fit(devices, request(memreq=64), pod_annotations={"cambricon.com/use-gpuuuid": " dev-0 , dev-2,",
                                                               "cambricon.com/nouse-gpuuuid": "dev-2"})
    assert chosen(result) == ["dev-0"]


def test_empty_uuid_annotation_is_no_constraint() -> None:
    result = fit([usage("dev-0")], request(memreq=64), pod_annotations={"cambricon.com/use-gpuuuid": " "})
    assert chosen(result) == ["dev-0"]


def test_cordon_annotation_is_not_read() -> None:
    # HAMi's device cordon is NVIDIA only (vendors A.7 step 2, scheduler §12).
    cand = FitCandidate(FakeNode(annotations={"hami.io/device-cordon": "dev-0"}), [usage("dev-0")], {})
    (result,) = backend().hami_filter_nodes(make_pod(), request(memreq=64), [cand], gpu_policy(), None)
    assert chosen(result) == ["dev-0"]
