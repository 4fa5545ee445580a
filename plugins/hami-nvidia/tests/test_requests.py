"""Request generation, HAMi ``GenerateResourceRequests`` (scheduler §6.2, vendors B.5), through ``Engine.requests``."""

from __future__ import annotations

from typing import Any

import pytest
from nvidia_testlib import (
    GPU,
    GPUCORES,
    GPUMEM,
    GPUMEM_PCT,
    container,
    fit,
    gpu_container,
    make_engine,
    make_pod,
    usage,
)

from hami_core.plugins.types import DeviceRequest
from hami_core.testing import container_request

NONE: dict[str, Any] = {}


def first(engine: Any, ctr: dict[str, Any]) -> DeviceRequest | None:
    """The NVIDIA request of a one-container pod, or None when HAMi would produce ``Nums == 0``."""
    return container_request(engine, ctr, "NVIDIA")


def req(nums: int, memreq: int, pct: int, cores: int) -> DeviceRequest:
    return DeviceRequest("NVIDIA", nums, memreq, pct, cores)


# ------------------------------------------------------------------------------------ spec examples
def test_spec_example_memory_and_cores() -> None:
    engine = make_engine()
    assert first(engine, gpu_container(gpus=1, mem=3000, cores=30)) == req(1, 3000, 101, 30)


def test_spec_example_bare_count_after_the_webhook() -> None:
    engine = make_engine()
    admitted = engine.admit(make_pod(gpu_container(gpus=2)))
    assert admitted["spec"]["containers"][0]["resources"]["limits"] == {GPU: "2", GPUCORES: "100"}
    assert engine.requests(admitted).containers[0]["NVIDIA"] == req(2, 0, 100, 100)


def test_bare_count_without_the_webhook_is_whole_memory_but_default_cores() -> None:
    assert first(make_engine(), gpu_container(gpus=1)) == req(1, 0, 100, 0)


# ------------------------------------------------------------------------------------ count
@pytest.mark.parametrize("count", ["1.5", "500m", "0", "-1"])
def test_count_must_be_a_positive_integer(count: str) -> None:
    assert first(make_engine(), container(limits={GPU: count, GPUMEM: "1000"})) is None


def test_no_count_no_request() -> None:
    engine = make_engine()
    assert first(engine, container(limits={GPUMEM: "1000", GPUCORES: "10"})) is None
    assert first(engine, container()) is None
    assert engine.requests(make_pod(container(), container("d"))).empty


def test_count_accepts_integer_quantities() -> None:
    assert first(make_engine(), container(limits={GPU: 2})) == req(2, 0, 100, 0)
    assert first(make_engine(), container(limits={GPU: "3"})) == req(3, 0, 100, 0)


# ------------------------------------------------------------------------------------ memory
@pytest.mark.parametrize("mem", [
    "3Gi",          # 3221225472 > MaxInt32: HAMi drops the whole request (spec §6.2)
    "16Gi",
    "16.0Gi",       # vendors J.3
    "1.5",          # not an integer
    "500m",
    "-1",           # negative
    "2147483648",   # MaxInt32 + 1
])
def test_unusable_memory_drops_the_whole_request(mem: str) -> None:
    assert first(make_engine(), container(limits={GPU: "1", GPUMEM: mem, GPUCORES: "30"})) is None


def test_memory_up_to_max_int32_is_kept() -> None:
    assert first(make_engine(), gpu_container(mem="2147483647")) == req(1, 2147483647, 101, 0)


def test_memory_suffix_that_is_a_whole_number_is_taken_as_mib() -> None:
    # 2k = 2000: an exact integer in range, so it is a MiB count like any other.
    assert first(make_engine(), gpu_container(mem="2k")) == req(1, 2000, 101, 0)


def test_memory_zero_is_like_no_memory() -> None:
    engine = make_engine()
    assert first(engine, gpu_container(mem="0")) == first(engine, gpu_container()) == req(1, 0, 100, 0)


def test_memory_factor_scales_memory() -> None:
    assert first(make_engine({"memoryFactor": 4}), gpu_container(mem=1024)) == req(1, 4096, 101, 0)
    assert first(make_engine({"memoryFactor": 2}), gpu_container(mem=1024)) == req(1, 2048, 101, 0)


def test_memory_factor_narrows_the_range() -> None:
    engine = make_engine({"memoryFactor": 4})
    limit = (2**31 - 1) // 4  # 536870911
    assert first(engine, gpu_container(mem=limit)) == req(1, limit * 4, 101, 0)
    assert first(engine, gpu_container(mem=limit + 1)) is None
    # HAMi's own vector: factor 2 and 1Gi (1073741824 > MaxInt32/2) is dropped.
    assert first(make_engine({"memoryFactor": 2}), gpu_container(mem="1Gi")) is None


def test_default_memory_applies_when_no_memory_is_given() -> None:
    engine = make_engine({"defaultMemory": 512})
    assert first(engine, gpu_container()) == req(1, 512, 101, 0)
    assert first(engine, gpu_container(mem=0)) == req(1, 512, 101, 0)
    assert first(engine, gpu_container(mem=2000)) == req(1, 2000, 101, 0)
    assert first(engine, gpu_container(pct=50)) == req(1, 0, 50, 0)


# ------------------------------------------------------------------------------------ percentage
@pytest.mark.parametrize(("pct", "expected"), [
    ("50", 50),
    ("100", 100),
    ("150", 100),     # > 100 clamps to 100
    ("101", 100),
    ("1", 1),
])
def test_percentage(pct: str, expected: int) -> None:
    assert first(make_engine(), gpu_container(pct=pct)) == req(1, 0, expected, 0)


@pytest.mark.parametrize("pct", ["0", "-5", "50.5"])
def test_percentage_not_positive_or_not_integer_is_ignored(pct: str) -> None:
    # Stays at the 101 sentinel, then "no memory at all" makes it the whole card...
    assert first(make_engine(), gpu_container(pct=pct)) == req(1, 0, 100, 0)
    # ... or defaultMemory when one is configured.
    assert first(make_engine({"defaultMemory": 512}), gpu_container(pct=pct)) == req(1, 512, 101, 0)


def test_percentage_zero_with_memory_keeps_the_memory() -> None:
    assert first(make_engine(), gpu_container(mem=2000, pct=0)) == req(1, 2000, 101, 0)


def test_memory_and_percentage_both_given_memory_wins_in_fit() -> None:
    r = first(make_engine(), gpu_container(mem=3000, pct=50))
    assert r == req(1, 3000, 50, 0)
    result = fit([usage("dev-0", totalmem=8000, count=10)], r)
    assert [(d.uuid, d.usedmem) for d in result.devices] == [("dev-0", 3000)]


# ------------------------------------------------------------------------------------ cores
def test_default_cores() -> None:
    engine = make_engine({"defaultCores": 30})
    assert first(engine, gpu_container(mem=1000)) == req(1, 1000, 101, 30)
    assert first(engine, gpu_container(mem=1000, cores=0)) == req(1, 1000, 101, 0)
    assert first(engine, gpu_container(mem=1000, cores=70)) == req(1, 1000, 101, 70)
    # A core quantity that is not an integer leaves the default.
    assert first(engine, gpu_container(mem=1000, cores="1.5")) == req(1, 1000, 101, 30)


def test_cores_over_100_are_kept_in_the_request() -> None:
    # Fit clamps them (spec §6.6 step 8); the request carries the user's number.
    assert first(make_engine(), gpu_container(mem=1000, cores=120)) == req(1, 1000, 101, 120)


@pytest.mark.parametrize("cores", ["-10", "-1"])
def test_a_negative_core_quantity_books_no_cores(cores: str) -> None:
    # negativeCores: clamp (the default, docs/devices.md): HAMi keeps -10, which then books -10 on the GPU
    # (un-booking others' cores) and passes a core-full GPU that a 0 request is refused. The API server rejects
    # negative container quantities, so only a hand-made pod object or a raw extender call gets here.
    assert first(make_engine(), gpu_container(mem=1000, cores=cores)) == req(1, 1000, 101, 0)


@pytest.mark.parametrize(("cores", "want"), [("-10", -10), ("-1", -1), (str(2**32 + 5), 5), ("30", 30)])
def test_negative_cores_keep_is_hamis_behaviour(cores: str, want: int) -> None:
    """``negativeCores: keep``: the number as HAMi's ``int32(corenums)`` makes it, booked and written as is."""
    engine = make_engine({"negativeCores": "keep"})
    assert first(engine, gpu_container(mem=1000, cores=cores)) == req(1, 1000, 101, want)


# ------------------------------------------------------------------------------------ limits / requests
def test_requests_are_read_when_limits_lack_the_resource() -> None:
    engine = make_engine()
    assert first(engine, container(requests={GPU: "1", GPUMEM: "2000", GPUCORES: "20"})) == req(1, 2000, 101, 20)
    assert first(engine, container(requests={GPU: "1", GPUMEM_PCT: "40"})) == req(1, 0, 40, 0)
    # Each resource falls back on its own.
    assert first(engine, container(limits={GPU: "1"}, requests={GPUMEM: "1500"})) == req(1, 1500, 101, 0)


def test_limits_win_over_requests() -> None:
    ctr = container(limits={GPU: "1", GPUMEM: "2000", GPUCORES: "10", GPUMEM_PCT: "30"},
                    requests={GPU: "2", GPUMEM: "1000", GPUCORES: "50", GPUMEM_PCT: "60"})
    assert first(make_engine(), ctr) == req(1, 2000, 30, 10)


def test_bad_memory_in_requests_also_drops_the_request() -> None:
    assert first(make_engine(), container(limits={GPU: "1"}, requests={GPUMEM: "3Gi"})) is None


# ------------------------------------------------------------------------------------ containers
def test_init_containers_come_first() -> None:
    pod = make_pod(container("cpu"), gpu_container("app", mem=4000, cores=20),
                   init=[gpu_container("init", mem=5000, cores=20), container("init-cpu")])
    reqs = make_engine().requests(pod)
    assert reqs.init_count == 2
    assert reqs.names == ("init", "init-cpu", "cpu", "app")
    assert reqs.containers == ({"NVIDIA": req(1, 5000, 101, 20)}, NONE, NONE, {"NVIDIA": req(1, 4000, 101, 20)})
    assert reqs.is_init(1) and not reqs.is_init(2)
    assert reqs.backends() == ("NVIDIA",)
    assert not reqs.empty


def test_a_dropped_container_does_not_affect_its_neighbours() -> None:
    pod = make_pod(gpu_container("a", mem="3Gi"), gpu_container("b", mem=3000))
    reqs = make_engine().requests(pod)
    assert reqs.containers == (NONE, {"NVIDIA": req(1, 3000, 101, 0)})
