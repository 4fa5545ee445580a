"""The wing/interconnect selector and both fits (vendors.md Part I; HAMi's device_test.go and topo tests)."""

from __future__ import annotations

import random

import pytest
from kunlun_testlib import fit, idx, usages

from hami_core.plugins.types import DeviceRequest
from hami_kunlun.topo import calc_score, count_bubbles


def whole(n: int) -> DeviceRequest:
    return DeviceRequest("kunlun", n, 0, 100, 0)


def vxpu(n: int, mem: int = 24576) -> DeviceRequest:
    return DeviceRequest("XPU", n, mem, 0, mem * 100 // 98304)


@pytest.mark.parametrize(("used", "nums", "expected"), [
    ((), 8, [0, 1, 2, 3, 4, 5, 6, 7]),
    ((5,), 2, [4, 6]),
    ((5,), 1, [4]),
    ((6, 7), 1, [4]),
    ((0, 1, 2, 4, 5, 6), 2, [3, 7]),
    ((2, 3, 7), 4, [0, 1, 4, 5]),           # 5 free: first connected quad
    ((3, 6), 4, [0, 1, 4, 5]),              # 6 free, rest {2, 7} unconnected: last fitting quad
    ((2, 6), 4, [0, 1, 4, 5]),              # 6 free, rest {3, 7} connected
    ((), 1, [0]),
    ((4, 5, 6, 7), 4, [0, 1, 2, 3]),
])
def test_hami_graph_select_vectors(used: tuple[int, ...], nums: int, expected: list[int]) -> None:
    assert idx(fit(usages(used), whole(nums))) == expected


@pytest.mark.parametrize(("used", "nums"), [((5,), 8), ((), 3), ((), 5)])
def test_unsupported_or_short_counts_fail_with_numa_not_fit(used: tuple[int, ...], nums: int) -> None:
    res = fit(usages(used), whole(nums))
    assert not res.ok and res.reason == "1/8 NumaNotFit"


def test_all_busy_or_unhealthy_cards_fail() -> None:
    assert fit(usages(range(8)), whole(1)).reason == "1/8 NumaNotFit"
    assert fit(usages(unhealthy=range(8)), whole(1)).reason == "1/8 NumaNotFit"


def test_whole_cards_record_the_full_card() -> None:
    res = fit(usages((0,)), whole(1))  # the left wing has 3 free cards: tried before the full right wing
    (d,) = res.devices
    assert (d.uuid, d.type, d.usedmem, d.usedcores, d.idx) == ("xpu-1", "kunlun", 98304, 100, 1)


def test_selection_does_not_depend_on_list_order() -> None:
    devs = usages((7,))
    for seed in range(5):
        shuffled = devs[:]
        random.Random(seed).shuffle(shuffled)
        assert idx(fit(shuffled, whole(4))) == [0, 1, 2, 3]


@pytest.mark.parametrize("family", [("hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"),
                                    ("baidu.com/use-gpuuuid", "baidu.com/nouse-gpuuuid")])
@pytest.mark.parametrize("req", [whole(1), vxpu(1, 98304)])
def test_uuid_annotations_both_families(family: tuple[str, str], req: DeviceRequest) -> None:
    use, nouse = family
    typ = "kunlun" if req.backend == "kunlun" else "XPU"
    devs = usages(typ=typ)
    assert [d.uuid for d in fit(devs, req, annotations={use: "xpu-5"}).devices] == ["xpu-5"]
    assert fit(devs, req, annotations={use: "xpu-99"}).reason == "8/8 CardUuidMismatch"
    every = ",".join(f"xpu-{i}" for i in range(8))
    assert fit(devs, req, annotations={nouse: every}).reason == "8/8 CardUuidMismatch"
    assert idx(fit(devs, req, annotations={nouse: "xpu-0"})) == [1]


def test_vxpu_vectors_from_hami() -> None:
    mem = {1: 24576, 3: 49152, 5: 49152}
    cnt = {1: 1, 3: 2, 5: 1}
    assert idx(fit(usages(typ="XPU", usedmem=mem, counts=cnt), vxpu(4))) == [0, 1, 2, 3]
    mem, cnt = {1: 49152, 3: 49152, 5: 24576}, {1: 2, 3: 1, 5: 1}
    assert idx(fit(usages(typ="XPU", usedmem=mem, counts=cnt), vxpu(4))) == [4, 5, 6, 7]
    halves = usages(typ="XPU", usedmem=dict.fromkeys(range(8), 49152), counts=dict.fromkeys(range(8), 1))
    assert fit(halves, vxpu(2)).reason == "1/8 NumaNotFit"
    mem, cnt = {0: 24576, 1: 24576, 2: 49152, 5: 24576}, {0: 1, 1: 1, 2: 1, 5: 1}
    assert idx(fit(usages(typ="XPU", usedmem=mem, counts=cnt), vxpu(1))) == [0]


def test_vxpu_records_the_slice_and_checks_memory() -> None:
    (d,) = fit(usages(typ="XPU"), vxpu(1, 49152)).devices
    assert (d.usedmem, d.usedcores, d.type) == (49152, 50, "XPU")
    full = usages(typ="XPU", usedmem=dict.fromkeys(range(8), 98304), counts=dict.fromkeys(range(8), 4))
    assert fit(full, vxpu(1)).reason == "1/8 NumaNotFit"


def test_vxpu_mutex_needs_idle_cards() -> None:
    shared = usages(typ="XPU", usedmem=dict.fromkeys(range(8), 24576), counts=dict.fromkeys(range(8), 1))
    assert fit(shared, vxpu(1)).ok
    assert fit(shared, vxpu(1), gpu="mutex").reason == "8/8 ExclusiveDeviceAllocateConflict"


@pytest.mark.parametrize(("prev", "cur", "score"), [
    ([0], [0, 1], 3000.0), ([0], [4], 2000.0), ([0, 1], [0], 1000.0), ([0, 1, 2, 3], [0], 0.0),
    ([0, 1, 2, 3], list(range(8)), 3000.0), ([], [0], 0.0)])
def test_bubble_score(prev: list[int], cur: list[int], score: float) -> None:
    assert calc_score(prev, cur) == score


def test_count_bubbles() -> None:
    assert [count_bubbles(x) for x in ([], [0, 1, 2, 3], [0], [4], [0, 1])] == [1, 1, 3, 3, 2]
