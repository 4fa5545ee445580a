"""Request generation, HAMi ``GenerateResourceRequests`` for Mthreads (vendors H.4, H.7, J.3)."""

from __future__ import annotations

from typing import Any

import pytest
from mthreads_testlib import CORE, MEM, VGPU, container, make_backend, make_engine, make_pod, mt_container

from hami_core.plugins.types import DeviceRequest


def req(ctr: dict[str, Any]) -> DeviceRequest | None:
    return make_backend().hami_container_request(ctr)


def test_hami_vector_all_resources_in_limits_and_requests() -> None:
    # H.7: vgpu 1 + memory 1000 + core 1 → Memreq 512000 MiB, percentage 0, cores 1.
    values = {VGPU: "1", MEM: "1000", CORE: "1"}
    assert req(container(limits=values, requests=values)) == DeviceRequest("Mthreads", 1, 512000, 0, 1)


def test_hami_vector_memory_and_cores_without_count_is_empty() -> None:
    # H.7: only memory/core (in requests, limits empty) → no request.
    assert req(container(limits={}, requests={MEM: "1000", CORE: "1"})) is None


def test_hami_vector_count_in_requests_only() -> None:
    # No memory → percentage 100 (the whole card's memory), cores default 0.
    assert req(container(limits={}, requests={VGPU: "1"})) == DeviceRequest("Mthreads", 1, 0, 100, 0)


def test_memory_and_cores_are_divided_by_the_count() -> None:
    assert req(mt_container(gpus=2, mem=192, cores=32)) == DeviceRequest("Mthreads", 2, 49152, 0, 16)
    # Integer division: 4 x 512 / 3 = 682 MiB and 5 / 3 = 1 core per device.
    assert req(mt_container(gpus=3, mem=4, cores=5)) == DeviceRequest("Mthreads", 3, 682, 0, 1)


def test_limits_win_over_requests() -> None:
    ctr = container(limits={VGPU: "1", MEM: "8"}, requests={VGPU: "4", MEM: "2", CORE: "3"})
    assert req(ctr) == DeviceRequest("Mthreads", 1, 4096, 0, 3)


def test_zero_memory_is_the_whole_card() -> None:
    assert req(mt_container(mem=0, cores=4)) == DeviceRequest("Mthreads", 1, 0, 100, 4)


def test_largest_memory_that_fits_int32() -> None:
    top = (2**31 - 1) // 512
    assert req(mt_container(mem=top)) == DeviceRequest("Mthreads", 1, top * 512, 0, 0)
    assert req(mt_container(mem=top + 1)) is None


@pytest.mark.parametrize("gpus", ["0", "-1", "1.5", "500m", str(2**31), "lots"])
def test_unusable_count_drops_the_request(gpus: str) -> None:
    assert req(mt_container(gpus=gpus)) is None


@pytest.mark.parametrize("mem", ["16Gi", "16.0Gi", "0.5", "-1", "1e10", "lots"])
def test_unusable_memory_drops_the_whole_request(mem: str) -> None:
    # J.3: a memory that is not a plain integer or overflows int32 after x512 drops the request.
    assert req(mt_container(mem=mem)) is None


def test_fractional_cores_are_ignored() -> None:
    assert req(mt_container(mem=4, cores="1.5")) == DeviceRequest("Mthreads", 1, 2048, 0, 0)


@pytest.mark.parametrize("cores", ["-1", str(2**31)])
def test_out_of_range_cores_drop_the_request(cores: str) -> None:
    assert req(mt_container(mem=4, cores=cores)) is None


def test_engine_requests_cover_init_and_app_containers() -> None:
    pod = make_pod(container("sidecar"), mt_container("app", gpus=1, mem=8, cores=4),
                   init=[mt_container("init", gpus=1, mem=2)])
    reqs = make_engine().requests(pod)
    assert reqs.init_count == 1
    assert reqs.names == ("init", "sidecar", "app")
    assert reqs.containers == ({"Mthreads": DeviceRequest("Mthreads", 1, 1024, 0, 0)}, {},
                               {"Mthreads": DeviceRequest("Mthreads", 1, 4096, 0, 4)})


def test_dropped_request_leaves_the_pod_unscheduled_by_mthreads() -> None:
    decision = make_engine().schedule(make_pod(mt_container(mem="16Gi")))
    assert decision.skipped
