"""The fit's topology rules (HAMi ``graphSelect``: contiguous device groups) and core masks (``addCoreUsage``),
beyond HAMi's Go cases; on one node through the filter hook and across pods through an engine."""

from __future__ import annotations

import pytest
from awsneuron_testlib import (
    AWS_NEURON_IDS,
    NEURON,
    NEURONCORE,
    NOUSE_UUID,
    USE_UUID,
    Clock,
    chosen,
    container,
    fit,
    gpu_policy,
    make_engine,
    make_pod,
    neuron_node,
    request,
    usage,
)

from hami_awsneuron.topology import add_core_usage


def node_devices(n: int, node_type: str | None, used: set[int] = frozenset(), unhealthy: set[int] = frozenset(),
                 ) -> list:
    return [usage(f"d{i}", i, used=int(i in used), usedcores=3 if i in used else 0, node_type=node_type,
                  health=i not in unhealthy) for i in range(n)]


# ------------------------------------------------------------------------------------------ groups
@pytest.mark.parametrize(("node_type", "nums", "used", "want"), [
    # Inferentia: any contiguous run of idle devices, the lowest first
    ("inf2.48xlarge", 3, {0}, [1, 2, 3]),
    ("inf2.48xlarge", 2, {0, 2}, [3, 4]),
    ("Inf2", 5, {4}, [5, 6, 7, 8, 9]),
    # Trainium and any other type: 4, 8 or 16 devices, aligned to the group size
    ("trn1.32xlarge", 4, {1}, [4, 5, 6, 7]),
    ("trn1.32xlarge", 4, {4, 9}, [0, 1, 2, 3]),
    ("trn2.48xlarge", 8, set(), [0, 1, 2, 3, 4, 5, 6, 7]),
    ("trn1.32xlarge", 16, set(), list(range(16))),
    ("", 4, {0}, [4, 5, 6, 7]),  # no instance-type label: Trainium's rule
])
def test_groups_by_node_type(node_type: str, nums: int, used: set[int], want: list[int]) -> None:
    result = fit(node_devices(16, node_type, used), request(nums, 2))
    assert chosen(result) == [f"d{i}" for i in want]
    assert {(d.usedmem, d.usedcores) for d in result.devices} == {(0, 3)}  # the whole mask of every device


@pytest.mark.parametrize(("node_type", "nums", "used", "n"), [
    ("trn1.32xlarge", 2, set(), 16),   # 2, 3, 5... devices are no Trainium group
    ("trn1.32xlarge", 3, set(), 16),
    ("trn1.32xlarge", 4, {1, 5, 9, 13}, 16),  # every aligned quad has a busy device (2-5 is not aligned)
    ("trn1.32xlarge", 16, {15}, 16),
    ("inf2.48xlarge", 3, {2, 5, 8, 10}, 12),  # no run of 3 (11, 0, 1 would wrap around)
    ("inf2.48xlarge", 13, set(), 12),
    (None, 4, set(), 16),  # no AWSNodeType at all
])
def test_no_group_is_numa_not_fit(node_type: str | None, nums: int, used: set[int], n: int) -> None:
    result = fit(node_devices(n, node_type, used), request(nums, 2))
    assert not result.ok
    assert result.reasons == (f"1/{n} NumaNotFit",)


def test_an_unhealthy_device_breaks_a_group() -> None:
    assert chosen(fit(node_devices(8, "trn1", unhealthy={2}), request(4, 2))) == ["d4", "d5", "d6", "d7"]


def test_a_group_ignores_uuid_selection_and_mutex() -> None:
    # HAMi's multi-device path checks only health and idleness.
    devices = node_devices(4, "trn1")
    annos = {USE_UUID: "d9", NOUSE_UUID: "d0,d1"}
    assert chosen(fit(devices, request(4, 2), pod_annotations=annos, policy=gpu_policy("mutex"))) == [
        "d0", "d1", "d2", "d3"]


def test_groups_are_found_in_index_order_whatever_the_policy_order() -> None:
    # The engine hands devices sorted by the GPU policy; the group is contiguous by device index and never
    # takes a busy device (README: HAMi scans positions of the sorted list).
    devices = node_devices(8, "trn1", used={2})
    shuffled = [devices[i] for i in (2, 7, 0, 5, 3, 6, 1, 4)]
    assert chosen(fit(shuffled, request(4, 2))) == ["d4", "d5", "d6", "d7"]


# ------------------------------------------------------------------------------------------ one device
@pytest.mark.parametrize(("booked", "require", "mask"), [
    (0, 1, 1), (0, 2, 3), (1, 1, 2), (2, 1, 1), (3, 1, 0), (0, 4, 3), (0, 0, 3), (1, 2, 2),
])
def test_core_masks(booked: int, require: int, mask: int) -> None:
    assert add_core_usage(booked, require) == mask


def test_one_device_books_the_next_free_core() -> None:
    result = fit([usage("d0", used=1, usedcores=1)], request(1, 1))
    assert [(d.uuid, d.usedmem, d.usedcores) for d in result.devices] == [("d0", 0, 2)]


def test_one_device_walks_from_the_preferred_last() -> None:
    devices = [usage("d0", 0), usage("d1", 1, used=2, usedcores=3), usage("d2", 2, health=False)]
    assert chosen(fit(devices, request(1, 1))) == ["d0"]
    result = fit(devices[1:], request(1, 1))
    assert result.reasons == ("1/2 CardNotHealth", "1/2 CardTimeSlicingExhausted")


def test_a_whole_device_needs_both_cores_free() -> None:
    result = fit([usage("d0", used=1, usedcores=2)], request(1, 2))
    assert result.reasons == ("1/1 CardInsufficientCore",)


def test_uuid_selection_picks_the_device() -> None:
    devices = [usage("d0", 0), usage("d1", 1)]
    assert chosen(fit(devices, request(1, 1), pod_annotations={USE_UUID: " d0 "})) == ["d0"]
    assert chosen(fit(devices, request(1, 1), pod_annotations={NOUSE_UUID: "d1", USE_UUID: ""})) == ["d0"]


def test_no_devices_is_node_insufficient_device() -> None:
    assert fit([], request(1, 1)).reasons == ("NodeInsufficientDevice",)


# ------------------------------------------------------------------------------------------ across pods
def test_two_single_core_pods_share_a_device_then_it_is_full(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(neuron_node("n", 1, 2, instance_type="inf2.xlarge"))
    ids = []
    for name in ("a", "b"):
        pod = make_pod(container(limits={NEURONCORE: "1"}), name=name)
        decision = engine.schedule(pod)
        assert decision.ok, decision.failed
        engine.reserve(pod, decision)
        ids.append(decision.annotations[AWS_NEURON_IDS])
    assert ids == ["0", "1"]  # the first core, then the second
    third = engine.schedule(make_pod(container(limits={NEURON: "1"}), name="c"))
    assert dict(third.failed) == {"n": "1/1 CardTimeSlicingExhausted"}


def test_more_than_two_cores_a_device_lets_later_pods_in_without_a_core(clock: Clock) -> None:
    # inf1: 4 cores per device, 4 slots, but a core mask has two bits: the third and fourth 1-core pods get
    # mask 0 and no AWS_NEURON_IDS (HAMi's behaviour).
    engine = make_engine(clock=clock)
    engine.upsert_node(neuron_node("n", 1, 4, instance_type="inf1.xlarge"))
    seen = []
    for name in "abcde":
        pod = make_pod(container(limits={NEURONCORE: "1"}), name=name)
        decision = engine.schedule(pod)
        if not decision.ok:
            seen.append(dict(decision.failed)["n"])
            break
        engine.reserve(pod, decision)
        seen.append(decision.annotations.get(AWS_NEURON_IDS))
    assert seen == ["0", "1", None, None, "1/1 CardTimeSlicingExhausted"]


def test_a_busy_device_leaves_its_group_to_others(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(neuron_node("trn", 8, 16))
    small = make_pod(container(limits={NEURONCORE: "1"}), name="small")
    decision = engine.schedule(small)
    assert decision.annotations[AWS_NEURON_IDS] == "14"  # spread: the last idle device, 7, its first core
    engine.reserve(small, decision)
    big = make_pod(container(limits={NEURON: "4"}), name="big")
    decision = engine.schedule(big)
    assert decision.annotations[AWS_NEURON_IDS] == "0,1,2,3"
    engine.reserve(big, decision)
    # the other aligned quad, 4-7, holds the busy device 7
    second = make_pod(container(limits={NEURON: "4"}), name="big-2")
    assert dict(engine.schedule(second).failed) == {"trn": "1/8 NumaNotFit"}
