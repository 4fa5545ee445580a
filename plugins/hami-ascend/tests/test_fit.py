"""Fit on one node (HAMi Ascend ``Fit``: vendors A.7, C.7 and the C.9 vectors)."""

from __future__ import annotations

import pytest
from ascend_testlib import HAMI_CORE, chosen, fit, gpu_policy, make_backend, request, usage

from hami_ascend.backend import NODE_VNPU_CORE
from hami_core.plugins.types import ContainerDevice

C = "Ascend910C"
ON = {NODE_VNPU_CORE: "true"}


# ------------------------------------------------------------------------------------ standard checks
def test_walks_from_the_preferred_last_device() -> None:
    devices = [usage("d0", index=0), usage("d1", index=1), usage("d2", index=2)]
    result = fit(devices, request(2, 8738))
    assert result.devices == (ContainerDevice("d2", "Ascend910A", 8738, 0, 2),
                              ContainerDevice("d1", "Ascend910A", 8738, 0, 1))


def test_whole_card_request_books_the_card_memory() -> None:
    result = fit([usage("d0", totalmem=32768)], request(1))
    assert result.devices == (ContainerDevice("d0", "Ascend910A", 32768, 0, 0),)
    busy = fit([usage("d0", totalmem=32768, used=1, usedmem=8738)], request(1))
    assert busy.reasons == ("1/1 CardInsufficientMemory",)


def test_reasons_count_every_device() -> None:
    devices = [usage("full", used=4), usage("small", usedmem=30000), usage("sick", health=False)]
    result = fit(devices, request(1, 8738))
    assert not result.ok
    assert result.reason == "1/3 CardInsufficientMemory, 1/3 CardNotHealth, 1/3 CardTimeSlicingExhausted"


def test_partial_success_is_allocated_cards_insufficient() -> None:
    result = fit([usage("ok"), usage("sick", health=False)], request(2, 8738))
    assert result.reasons == ("1/2 AllocatedCardsInsufficientRequest", "1/2 CardNotHealth")


def test_type_must_be_the_backend_common_word() -> None:
    result = fit([usage("d0"), usage("d1")], request(1, 8738, word="Ascend910B3"), backend=make_backend("Ascend910A"))
    assert result.reasons == ("2/2 CardTypeMismatch",)


def test_uuid_selection_annotations() -> None:
    devices = [usage("d0"), usage("d1", index=1)]
    use = fit(devices, request(1, 8738), pod_annotations={"hami.io/use-Ascend910A-uuid": " d0 , other"})
    assert chosen(use) == ["d0"]
    nouse = fit(devices, request(2, 8738), pod_annotations={"hami.io/no-use-Ascend910A-uuid": "d0"})
    assert nouse.reasons == ("1/2 AllocatedCardsInsufficientRequest", "1/2 CardUuidMismatch")
    other_chip = fit(devices, request(1, 8738), pod_annotations={"hami.io/use-Ascend910B3-uuid": "d0"})
    assert chosen(other_chip) == ["d1"]


def test_mutex_policy_takes_only_idle_cards() -> None:
    devices = [usage("idle"), usage("busy", used=1, usedmem=2184)]
    assert chosen(fit(devices, request(1, 2184), policy=gpu_policy("mutex"))) == ["idle"]
    assert chosen(fit(devices, request(1, 2184))) == ["busy"]


def test_template_mode_counts_cores_against_the_registered_ai_cores() -> None:
    result = fit([usage("d0", totalcore=20)], request(1, 8738, 50))
    assert result.reasons == ("1/1 CardInsufficientCore",)
    assert fit([usage("d0", totalcore=20)], request(1, 8738, 20)).devices[0].usedcores == 20


# ------------------------------------------------------------------------------------ hami-core mode
def test_hami_core_counts_cores_against_100() -> None:
    result = fit([usage("d0", totalcore=20)], request(1, 15360, 50), pod_annotations=HAMI_CORE, node_annotations=ON)
    assert result.devices == (ContainerDevice("d0", "Ascend910A", 15360, 50, 0),)
    busy = fit([usage("d0", totalcore=20, used=1, usedcores=60)], request(1, 15360, 50), pod_annotations=HAMI_CORE,
               node_annotations=ON)
    assert busy.reasons == ("1/1 CardInsufficientCore",)


def test_hami_core_exclusive_and_exhausted_cards() -> None:
    exclusive = fit([usage("d0", used=1, usedcores=0)], request(1, 1024, 150), pod_annotations=HAMI_CORE,
                    node_annotations=ON)
    assert exclusive.reasons == ("1/1 ExclusiveDeviceAllocateConflict",)
    exhausted = fit([usage("d0", used=1, usedcores=100)], request(1, 1024, 0), pod_annotations=HAMI_CORE,
                    node_annotations=ON)
    assert exhausted.reasons == ("1/1 CardComputeUnitsExhausted",)


@pytest.mark.parametrize("req", [request(1, 15360, 20), request(1), request(1, 0, 20)])
def test_hami_core_pod_on_a_node_without_hami_core(req) -> None:
    # Whole-card and memory-less hami-core pods are refused too (the check precedes the device loop).
    assert fit([usage("d0")], req, pod_annotations=HAMI_CORE).reasons == ("1/1 ModeNotFit",)


def test_mode_not_fit_counts_once_over_all_devices() -> None:
    # HAMi increments ModeNotFit once and divides by the number of devices.
    devices = [usage("d0"), usage("d1", index=1), usage("d2", index=2)]
    assert fit(devices, request(1, 15360), pod_annotations=HAMI_CORE).reasons == ("1/3 ModeNotFit",)


def test_node_annotation_overrides_the_global_default() -> None:
    on_globally = make_backend("Ascend910A", hami_vnpu_core=True)
    assert fit([usage("d0")], request(1, 15360), backend=on_globally, pod_annotations=HAMI_CORE).ok
    off_here = fit([usage("d0")], request(1, 15360), backend=on_globally, pod_annotations=HAMI_CORE,
                   node_annotations={NODE_VNPU_CORE: "false"})
    assert off_here.reasons == ("1/1 ModeNotFit",)
    anything_else = fit([usage("d0")], request(1, 15360), backend=on_globally, pod_annotations=HAMI_CORE,
                        node_annotations={NODE_VNPU_CORE: "yes"})
    assert anything_else.reasons == ("1/1 ModeNotFit",)


def test_plain_pod_fits_on_a_hami_core_node() -> None:
    assert chosen(fit([usage("d0")], request(1, 8738), node_annotations=ON)) == ["d0"]
    other_vnpu_mode = fit([usage("d0")], request(1, 8738), pod_annotations={"huawei.com/vnpu-mode": "template"})
    assert chosen(other_vnpu_mode) == ["d0"]


# ------------------------------------------------------------------------------------ NetworkID topology
def test_network_id_groups_fill_from_the_largest() -> None:
    devices = [usage("dev-0", index=0, network=0), usage("dev-1", index=1, network=1),
               usage("dev-2", index=2, network=1)]
    result = fit(devices, request(2, 8738))
    assert chosen(result) == ["dev-2", "dev-1"]
    assert [d.custom_info for d in result.devices] == [{"NetworkID": 1}, {"NetworkID": 1}]


def test_network_id_groups_beat_the_device_order() -> None:
    devices = [usage("a", index=0, network=1), usage("b", index=1, network=1), usage("c", index=2, network=1),
               usage("d", index=3, network=0), usage("e", index=4, network=0)]
    # Candidates in walk order: e, d (net 0), c, b, a (net 1): net 1 is larger.
    assert chosen(fit(devices, request(3, 8738))) == ["c", "b", "a"]
    assert chosen(fit(devices, request(2, 8738))) == ["c", "b"]


def test_topology_single_device_takes_the_first_candidate() -> None:
    devices = [usage("d0", index=0, network=0), usage("d1", index=1, network=1)]
    assert chosen(fit(devices, request(1, 8738))) == ["d1"]


def test_topology_with_exactly_enough_candidates() -> None:
    devices = [usage("d0", index=0, network=0), usage("busy", index=1, network=0, used=4),
               usage("d2", index=2, network=1)]
    assert chosen(fit(devices, request(2, 8738))) == ["d2", "d0"]
    short = fit(devices, request(3, 8738))
    assert short.reasons == ("1/3 CardTimeSlicingExhausted", "2/3 AllocatedCardsInsufficientRequest")


def test_topology_needs_network_id_on_every_device() -> None:
    devices = [usage("dev-0", index=0, network=1), usage("dev-1", index=1, network=0),
               usage("dev-2", index=2, custom_info={})]
    # Standard walk: the last two candidates, whatever their networks.
    assert chosen(fit(devices, request(2, 8738))) == ["dev-2", "dev-1"]


def test_topology_is_for_ascend910_chips_only() -> None:
    devices = [usage("p0", index=0, network=0, type="Ascend310P"), usage("p1", index=1, network=1,
                                                                         type="Ascend310P"),
               usage("p2", index=2, network=0, type="Ascend310P")]
    assert chosen(fit(devices, request(2, 3072, word="Ascend310P"))) == ["p2", "p1"]


def test_non_numeric_network_ids_never_under_allocate() -> None:
    devices = [usage("d0", index=0, custom_info={"NetworkID": "a"}),
               usage("d1", index=1, custom_info={"NetworkID": "a"}),
               usage("d2", index=2, custom_info={"NetworkID": 0})]
    result = fit(devices, request(2, 8738))
    assert result.reasons == ("1/3 AllocatedCardsInsufficientRequest",)


# ------------------------------------------------------------------------------------ 910C modules
def npus(*indices: int, network: bool = True, **kw) -> list:
    return [usage(f"dev-{i}", index=i, count=1, totalmem=32000, type=C,
                  custom_info={"NetworkID": 0} if network else {}, **kw) for i in indices]


@pytest.mark.parametrize("network", [True, False])
def test_910c_four_npus_need_two_whole_modules(network: bool) -> None:
    result = fit(npus(0, 1, 2, 4, 6, network=network), request(4, 16384, word=C))
    # Only module 0 (indices 0 and 1) is complete; the reason's total is the request.
    assert result.reasons == ("2/4 AllocatedCardsInsufficientRequest",)


@pytest.mark.parametrize("network", [True, False])
def test_910c_pair_from_two_partial_modules_fails(network: bool) -> None:
    result = fit(npus(0, 2, network=network), request(2, 16384, word=C))
    assert result.reasons == ("0/2 AllocatedCardsInsufficientRequest",)


@pytest.mark.parametrize("network", [True, False])
def test_910c_full_module_succeeds(network: bool) -> None:
    result = fit(npus(0, 1, network=network), request(2, 16384, word=C))
    assert chosen(result) == ["dev-1", "dev-0"]
    assert [d.idx for d in result.devices] == [1, 0]


def test_910c_singletons_only() -> None:
    assert fit(npus(0, 2, 4, 6, network=False), request(4, word=C)).reasons == (
        "0/4 AllocatedCardsInsufficientRequest",)


def test_910c_takes_whole_modules_in_preference_order() -> None:
    devices = npus(0, 1, 2, 3, 4, 6, 7)
    assert chosen(fit(devices, request(4, 16384, word=C))) == ["dev-7", "dev-6", "dev-3", "dev-2"]
    assert chosen(fit(devices, request(2, 16384, word=C))) == ["dev-7", "dev-6"]


def test_910c_failed_devices_are_counted_against_the_request() -> None:
    devices = npus(0, 1) + npus(2, used=1) + npus(3)
    assert fit(devices, request(4, 16384, word=C)).reasons == (
        "1/4 CardTimeSlicingExhausted", "2/4 AllocatedCardsInsufficientRequest")


def test_910c_odd_requests_never_fit() -> None:
    # Modules come in twos, so three NPUs take two modules and the count differs.
    assert fit(npus(0, 1, 2, 3), request(3, word=C)).reasons == ("4/3 AllocatedCardsInsufficientRequest",)


def test_910c_single_npu_is_a_standard_fit() -> None:
    assert chosen(fit(npus(0, 2), request(1, word=C))) == ["dev-2"]
