"""Request generation, HAMi ``GenerateResourceRequests`` for Iluvatar (vendors F.3, F.4, J.2, J.3)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from iluvatar_testlib import VCORE, VGPU, VMEM, container, ilu_container, make_engine, make_pod

from hami_core.plugins.types import DeviceRequest
from hami_core.testing import container_request

NONE: dict[str, Any] = {}
MAX_VMEM = (2**31 - 1) // 256  # 8388607 units
ENGINE = make_engine()


def first(engine: Any, ctr: dict[str, Any], chip: str = "MR-V100") -> DeviceRequest | None:
    """The request of a one-container pod for ``chip``, or None when HAMi would produce ``Nums == 0``."""
    return container_request(engine, ctr, chip)


def req(nums: int, memreq: int, pct: int, cores: int, chip: str = "MR-V100") -> DeviceRequest:
    return DeviceRequest(chip, nums, memreq, pct, cores)


# ------------------------------------------------------------------------------------ spec vectors
def test_memory_in_256_mib_units_and_cores() -> None:
    assert first(make_engine(), ilu_container(mem=64, cores=50)) == req(1, 16384, 0, 50)


def test_no_memory_means_whole_card_memory_and_cores_default_to_zero() -> None:
    assert first(make_engine(), ilu_container()) == req(1, 0, 100, 0)


@pytest.mark.parametrize("mem", ["16Gi", "16.0Gi"])
def test_f4_memory_quantities_drop_the_request(mem: str) -> None:
    assert first(make_engine(), ilu_container(mem=mem, cores=10)) is None


def test_admitted_two_cards_request_exclusive_cores() -> None:
    engine = make_engine()
    admitted = engine.admit(make_pod(ilu_container(gpus=2)))
    assert engine.requests(admitted).containers[0]["MR-V100"] == req(2, 0, 100, 200)


# ------------------------------------------------------------------------------------ count
@pytest.mark.parametrize("count", ["1.5", "500m", "0", "-1", "2147483648"])
def test_count_must_be_a_positive_int32(count: str) -> None:
    assert first(make_engine(), container(limits={VGPU: count, VMEM: "4"})) is None


def test_count_accepts_integer_quantities() -> None:
    assert first(make_engine(), container(limits={VGPU: 2})) == req(2, 0, 100, 0)
    assert first(make_engine(), container(limits={VGPU: "2147483647"})) == req(2147483647, 0, 100, 0)


def test_no_count_no_request() -> None:
    engine = make_engine()
    assert first(engine, container(limits={VMEM: "4", VCORE: "10"})) is None
    assert first(engine, container()) is None
    assert engine.requests(make_pod(container(), container("d"))).empty


# ------------------------------------------------------------------------------------ memory
@pytest.mark.parametrize("mem", ["1.5", "500m", "-1", str(MAX_VMEM + 1), "1Gi"])
def test_unusable_memory_drops_the_whole_request(mem: str) -> None:
    assert first(make_engine(), ilu_container(mem=mem, cores=30)) is None


def test_memory_up_to_maxint32_over_256_is_kept() -> None:
    assert first(make_engine(), ilu_container(mem=MAX_VMEM)) == req(1, MAX_VMEM * 256, 0, 0)


@settings(max_examples=60, deadline=None)
@given(units=st.integers(min_value=0, max_value=2 * MAX_VMEM), gpus=st.integers(min_value=1, max_value=16))
def test_memory_units_property(units: int, gpus: int) -> None:
    got = first(ENGINE, ilu_container(gpus=gpus, mem=units))
    if units > MAX_VMEM:
        assert got is None
    else:
        assert got == req(gpus, units * 256, 100 if units == 0 else 0, 0)


def test_memory_zero_is_like_no_memory() -> None:
    assert first(make_engine(), ilu_container(mem=0)) == req(1, 0, 100, 0)


def test_memory_suffix_that_is_a_whole_number_counts_as_units() -> None:
    assert first(make_engine(), ilu_container(mem="2k")) == req(1, 2000 * 256, 0, 0)


# ------------------------------------------------------------------------------------ cores
def test_cores() -> None:
    engine = make_engine()
    assert first(engine, ilu_container(mem=4, cores=0)) == req(1, 1024, 0, 0)
    assert first(engine, ilu_container(mem=4, cores=100)) == req(1, 1024, 0, 100)
    # Fit clamps to 100 (A.7 step 8); the request carries the user's number.
    assert first(engine, ilu_container(mem=4, cores=150)) == req(1, 1024, 0, 150)


@pytest.mark.parametrize("cores", ["1.5", "500m"])
def test_non_integer_cores_leave_the_default(cores: str) -> None:
    assert first(make_engine(), ilu_container(mem=4, cores=cores)) == req(1, 1024, 0, 0)


def test_negative_cores_are_zero() -> None:
    assert first(make_engine(), ilu_container(mem=4, cores=-20)) == req(1, 1024, 0, 0)


# ------------------------------------------------------------------------------------ limits / requests
def test_requests_are_read_when_limits_lack_the_resource() -> None:
    engine = make_engine()
    assert first(engine, container(requests={VGPU: "1", VMEM: "8", VCORE: "20"})) == req(1, 2048, 0, 20)
    assert first(engine, container(limits={VGPU: "1"}, requests={VMEM: "8"})) == req(1, 2048, 0, 0)


def test_limits_win_over_requests() -> None:
    ctr = container(limits={VGPU: "1", VMEM: "8", VCORE: "10"}, requests={VGPU: "2", VMEM: "4", VCORE: "50"})
    assert first(make_engine(), ctr) == req(1, 2048, 0, 10)


def test_bad_memory_in_requests_also_drops_the_request() -> None:
    assert first(make_engine(), container(limits={VGPU: "1"}, requests={VMEM: "16Gi"})) is None


# ------------------------------------------------------------------------------------ chips and containers
def test_each_chip_reads_its_own_resources() -> None:
    engine = make_engine()
    ctr = container(limits={"iluvatar.ai/BI-V150-vgpu": "1", "iluvatar.ai/BI-V150.vMem": "128", VMEM: "8"})
    reqs = engine.requests(make_pod(ctr)).containers[0]
    assert reqs == {"BI-V150": req(1, 32768, 0, 0, chip="BI-V150")}


def test_custom_resource_names() -> None:
    engine = make_engine([{"chipName": "BI-V150", "commonWord": "BI150", "resourceCountName": "acme/gpu",
                           "resourceMemoryName": "acme/mem", "resourceCoreName": "acme/core"}])
    ctr = container(limits={"acme/gpu": "1", "acme/mem": "4", "acme/core": "25"})
    assert first(engine, ctr, "BI150") == req(1, 1024, 0, 25, chip="BI150")


def test_chip_without_memory_resource_books_whole_memory() -> None:
    engine = make_engine([{"chipName": "MR-V100", "resourceMemoryName": ""}])
    assert first(engine, ilu_container(mem=8, cores=10)) == req(1, 0, 100, 10)


def test_init_containers_come_first_and_dropped_containers_stay_empty() -> None:
    pod = make_pod(container("cpu"), ilu_container("bad", mem="16Gi"), ilu_container("app", mem=16, cores=20),
                   init=[ilu_container("init", mem=8)])
    reqs = make_engine().requests(pod)
    assert reqs.init_count == 1
    assert reqs.names == ("init", "cpu", "bad", "app")
    assert reqs.containers == ({"MR-V100": req(1, 2048, 0, 0)}, NONE, NONE, {"MR-V100": req(1, 4096, 0, 20)})
    assert reqs.backends() == ("MR-V100",)
