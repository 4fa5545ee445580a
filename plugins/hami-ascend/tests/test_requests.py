"""Request generation (HAMi ``GenerateResourceRequests``, vendors C.6, J.3)."""

from __future__ import annotations

from typing import Any

import pytest
from ascend_testlib import chip_section, container, make_engine, make_pod, npu_container, res

from hami_core.plugins.types import DeviceRequest

A = "Ascend910A"


def requests_of(*containers: dict[str, Any], vnpus: dict[str, Any] | None = None, init: tuple = ()) -> list:
    return list(make_engine(vnpus).requests(make_pod(*containers, init=init)).containers)


def test_memory_and_cores_pass_through() -> None:
    assert requests_of(npu_container(A, 1, 8738, cores=3)) == [{A: DeviceRequest(A, 1, 8738, 0, 3)}]


def test_without_memory_the_whole_card_is_requested_as_a_percentage() -> None:
    assert requests_of(npu_container(A, 2)) == [{A: DeviceRequest(A, 2, 0, 100, 0)}]


def test_requests_are_read_when_limits_are_absent() -> None:
    ctr = container("c", requests={res(A): "1", res(A, "memory"): "4369", res(A, "core"): "2"})
    assert requests_of(ctr) == [{A: DeviceRequest(A, 1, 4369, 0, 2)}]


def test_limits_win_over_requests() -> None:
    ctr = container("c", limits={res(A): "2", res(A, "memory"): "32768"},
                    requests={res(A): "1", res(A, "memory"): "8738"})
    assert requests_of(ctr) == [{A: DeviceRequest(A, 2, 32768, 0, 0)}]


def test_memory_is_not_rounded_to_a_template_here() -> None:
    # The webhook rounds; the request takes the (admitted) quantity as it is.
    assert requests_of(npu_container(A, 1, 3000)) == [{A: DeviceRequest(A, 1, 3000, 0, 0)}]


def test_memory_factor_scales_memory() -> None:
    vnpus = {"configs": [chip_section(A, memoryFactor=1024)]}
    assert requests_of(npu_container(A, 1, 8), vnpus=vnpus) == [{A: DeviceRequest(A, 1, 8192, 0, 0)}]
    assert requests_of(npu_container(A, 1, 2**21), vnpus=vnpus) == [{}]


@pytest.mark.parametrize("count", ["0", "-1", "1.5", "2147483648", "many"])
def test_unusable_counts_drop_the_request(count: str) -> None:
    assert requests_of(npu_container(A, count, 8738)) == [{}]


@pytest.mark.parametrize("mem", ["-1", "-1m", "-0.5", "2147483648", "3Gi"])
def test_out_of_range_memory_drops_the_request(mem: str) -> None:
    # "3Gi" is an integer of bytes beyond MaxInt32: the wrong unit, so the request is dropped. A negative that is
    # not a whole number ("-1m") is dropped too, not taken as the whole chip (HAMi #2601, "negative fractional
    # memory request" in HAMi's device_test.go).
    assert requests_of(npu_container(A, 1, mem)) == [{}]


@pytest.mark.parametrize("mem", ["1.5", "500m", "bogus"])
def test_non_integer_memory_is_ignored(mem: str) -> None:
    assert requests_of(npu_container(A, 1, mem)) == [{A: DeviceRequest(A, 1, 0, 100, 0)}]


@pytest.mark.parametrize(("cores", "want"), [("0", 0), ("250", 250), ("1.2", 2)])
def test_cores_are_taken_as_written(cores: str, want: int) -> None:
    # Fit clamps cores to 100; Go's Quantity.Value rounds a fraction up.
    assert requests_of(npu_container(A, 1, 8738, cores=cores)) == [{A: DeviceRequest(A, 1, 8738, 0, want)}]


@pytest.mark.parametrize("cores", ["-1", "2147483648", "lots"])
def test_unusable_cores_drop_the_request(cores: str) -> None:
    assert requests_of(npu_container(A, 1, 8738, cores=cores)) == [{}]


def test_each_container_and_chip_separately_init_first() -> None:
    init = npu_container("Ascend310P", 1, 3072, name="warmup")
    got = requests_of(npu_container(A, 1, 8738), container("cpu"), npu_container("Ascend910B3", 1, name="b3"),
                      init=(init,))
    assert got == [{"Ascend310P": DeviceRequest("Ascend310P", 1, 3072, 0, 0)},
                   {A: DeviceRequest(A, 1, 8738, 0, 0)}, {},
                   {"Ascend910B3": DeviceRequest("Ascend910B3", 1, 0, 100, 0)}]


def test_b4_resource_does_not_match_b4_1() -> None:
    assert requests_of(npu_container("Ascend910B4-1", 1, 16384)) == [
        {"Ascend910B4-1": DeviceRequest("Ascend910B4-1", 1, 16384, 0, 0)}]
