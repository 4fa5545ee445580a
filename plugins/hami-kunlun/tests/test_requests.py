"""Admission and request generation for both backends (vendors.md Part I, J.2)."""

from __future__ import annotations

import pytest
from kunlun_testlib import VMEM, VXPU, XPU_RES, container, make_engine, pod

from hami_core.plugins.types import DeviceRequest


def _reqs(*ctrs: dict) -> list[dict]:
    return [dict(c) for c in make_engine().requests(pod(*ctrs)).containers]


def test_whole_card_request() -> None:
    assert _reqs(container(limits={XPU_RES: 2})) == [{"kunlun": DeviceRequest("kunlun", 2, 0, 100, 0)}]
    assert _reqs(container(requests={XPU_RES: 1})) == [{"kunlun": DeviceRequest("kunlun", 1, 0, 100, 0)}]


@pytest.mark.parametrize("value", ["0", "-1", "2147483648", "1.5"])
def test_unusable_counts_are_dropped(value: str) -> None:
    assert _reqs(container(limits={XPU_RES: value}, ), container(limits={VXPU: value})) == [{}, {}]


@pytest.mark.parametrize(("mem", "expected"), [
    (1, (24576, 0, 25)), (24576, (24576, 0, 25)), (24577, (49152, 0, 50)), (49152, (49152, 0, 50)),
    (50000, (98304, 0, 100)), (200000, (98304, 0, 100)), (0, (24576, 0, 25)), ("1Gi", (98304, 0, 100)),
    (None, (98304, 100, 100)), ("1.5", (98304, 100, 100))])
def test_vxpu_memory_rounds_to_slices(mem: object, expected: tuple[int, int, int]) -> None:
    limits = {VXPU: 2} if mem is None else {VXPU: 2, VMEM: mem}
    (got,) = _reqs(container(limits=limits))
    assert got == {"XPU": DeviceRequest("XPU", 2, *expected)}


def test_admission_rewrites_vxpu_memory_limit_and_request() -> None:
    engine = make_engine()
    out = engine.admit(pod(container(limits={VXPU: 1, VMEM: 30000}), container("whole", limits={XPU_RES: 1})))
    res = out["spec"]["containers"][0]["resources"]
    assert res["limits"][VMEM] == "49152" and res["requests"][VMEM] == "49152"
    assert "requests" not in out["spec"]["containers"][1]["resources"]
    assert engine.admit(out) == out


def test_admission_of_count_only_in_requests_is_not_a_device_container() -> None:
    engine = make_engine()
    backend = engine.backends["XPU"]
    ctr = container(requests={VXPU: 1, VMEM: 1000})
    m = engine.hook.hami_mutate_container(backend=backend, pod=pod(ctr), container=ctr)
    assert m.requested is False and ctr["resources"]["requests"][VMEM] == "1000"
