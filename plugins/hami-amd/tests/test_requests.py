"""Admission and requests (HAMi ``MutateAdmission``, ``GenerateResourceRequests``): bad quantities, limits only."""

from __future__ import annotations

import pytest
from amd_testlib import GPU, GPUCORES, GPUMEM, amd_container, container, make_backend, make_engine, make_pod

from hami_core.plugins import AdmissionFailed, DeviceRequest


@pytest.mark.parametrize(("limits", "want"), [
    pytest.param({GPU: 1}, DeviceRequest("AMD", 1, 0, 0, 100), id="whole gpu: all memory, all CUs"),
    pytest.param({GPU: 1, GPUMEM: 16384, GPUCORES: 25}, DeviceRequest("AMD", 1, 16384, 0, 25), id="vgpu"),
    pytest.param({GPU: "2k"}, DeviceRequest("AMD", 2000, 0, 0, 100), id="count as a quantity"),
    pytest.param({GPU: 1, GPUMEM: "0"}, DeviceRequest("AMD", 1, 0, 0, 100), id="zero memory is the whole card"),
])
def test_request(limits: dict, want: DeviceRequest) -> None:
    assert make_backend().hami_container_request(container(limits=limits)) == want


@pytest.mark.parametrize("limits", [
    pytest.param({GPU: "1.5"}, id="fractional count"),
    pytest.param({GPU: "lots"}, id="count not a quantity"),
    pytest.param({GPU: -1}, id="negative count"),
    pytest.param({GPU: 1, GPUMEM: "1.5"}, id="fractional memory drops the request"),
    pytest.param({GPU: 1, GPUMEM: "16Gi"}, id="memory beyond int32"),
    pytest.param({GPU: 1, GPUCORES: "50m"}, id="fractional core percentage"),
    pytest.param({GPU: 1, GPUCORES: "half"}, id="core percentage not a quantity"),
])
def test_bad_quantities_drop_the_request(limits: dict) -> None:
    assert make_backend().hami_container_request(container(limits=limits)) is None


def test_requests_are_not_read() -> None:
    # HAMi reads amd.com/* from limits only: a request-only container asks nothing.
    ctr = container(requests={GPU: 1, GPUMEM: 1024})
    assert make_backend().hami_container_request(ctr) is None
    assert make_backend().hami_container_request(container(limits={GPU: 1}, requests={GPUMEM: 1024})) == (
        DeviceRequest("AMD", 1, 0, 0, 100))


@pytest.mark.parametrize("cores", ["1.5", "half", -5, 0, 101])
def test_admission_rejects_a_bad_core_percentage_naming_the_resource(cores: object) -> None:
    with pytest.raises(AdmissionFailed, match=r"container c: amd.com/gpucores must be an integer percentage"):
        make_backend().hami_mutate_container({}, container(limits={GPU: 1, GPUCORES: cores}))


def test_admission_does_not_check_cores_without_a_count() -> None:
    # HAMi validates the percentage only next to amd.com/gpu; a core-only container still counts as AMD's.
    assert make_backend().hami_mutate_container({}, container(limits={GPUCORES: 500})).requested


def test_admission_leaves_the_container_alone() -> None:
    ctr = amd_container(mem=1024, cores=25)
    before = {k: dict(v) for k, v in ctr["resources"].items()}
    make_backend().hami_mutate_container({}, ctr)
    assert ctr["resources"] == before


def test_engine_admission_errors_and_scheduler_name() -> None:
    engine = make_engine()
    assert engine.admit(make_pod(container(limits={GPUMEM: 1024})))["spec"]["schedulerName"] == "hami-scheduler"
    assert engine.admit(make_pod(container(requests={GPU: 1})))["spec"].get("schedulerName") is None
    with pytest.raises(AdmissionFailed):
        engine.admit(make_pod(container(limits={GPU: 1, GPUCORES: 0})))
