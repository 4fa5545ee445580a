"""Every test case of HAMi v2.10.0's ``pkg/device/amd/device_test.go``, same inputs, same expected outcome."""

from __future__ import annotations

import pytest
from amd_testlib import (
    ALLOCATED,
    HAMI_TEST_NAMES,
    NOUSE_TYPE,
    TO_ALLOCATE,
    USE_TYPE,
    USE_UUID,
    container,
    fit,
    make_backend,
    make_engine,
    make_node,
    request,
    usage,
)

from hami_amd.fit import check_amd_type, refusal
from hami_core.plugins import AdmissionFailed, ContainerDevice, DeviceRequest
from hami_core.wire.common import INT32_MAX

MEM, CORES = HAMI_TEST_NAMES["resourceMemoryName"], HAMI_TEST_NAMES["resourceCoreName"]


def hami_backend():  # type: ignore[no-untyped-def]
    return make_backend(**HAMI_TEST_NAMES)


# --------------------------------------------------------------------------------------- Test_MutateAdmission
@pytest.mark.parametrize(("limits", "requests", "want"), [
    pytest.param({"amd.com/gpu": 2}, None, True, id="gpu count in limits"),
    pytest.param({MEM: 1024}, None, True, id="gpu memory in limits"),
    pytest.param({CORES: 50}, None, True, id="core percentage in limits"),
    pytest.param(None, {"amd.com/gpu": 1}, False, id="requests only (limits empty) -> false"),
    pytest.param({"amd.com/gpu": 1, MEM: 1024}, None, True, id="accepts partial memory without a core percentage"),
    pytest.param({}, None, False, id="no resources"),
])
def test_mutate_admission(limits: dict | None, requests: dict | None, want: bool) -> None:
    ctr = container(limits=limits, requests=requests)
    assert hami_backend().hami_mutate_container({}, ctr).requested is want


@pytest.mark.parametrize("percent", [pytest.param(0, id="rejects zero core percentage"),
                                     pytest.param(101, id="rejects core percentage above 100")])
def test_mutate_admission_rejects(percent: int) -> None:
    ctr = container(limits={"amd.com/gpu": 1, CORES: percent})
    with pytest.raises(AdmissionFailed, match="must be an integer percentage between 1 and 100"):
        hami_backend().hami_mutate_container({}, ctr)


# --------------------------------------------------------------------------------------- Test_GetNodeDevices
def test_get_node_devices() -> None:
    register = '[{"id":"GPU-0","index":0,"count":1,"devmem":8192,"devcore":100,"type":"amd","numa":0,"health":true}]'
    amd = make_backend(resourceCountName="amd.com/gpu")
    (dev,) = amd.hami_node_devices(make_node("node-1", register))
    assert (dev.id, dev.type) == ("GPU-0", "amd")
    # DeviceVendor: the engine stamps the common word on every device it keeps
    engine = make_engine()
    engine.upsert_node(make_node("node-1", register, capacity=1))
    assert [d.info.vendor for d in engine.nodes["node-1"].devices["AMD"]] == ["AMD"]
    # HAMi: "annos not found"; the core's convention for every vendor: no annotation, no devices
    assert amd.hami_node_devices(make_node("node-2")) == []


# --------------------------------------------------------------------------------------- Test_PatchAnnotations
def test_patch_annotations() -> None:
    devices = ((ContainerDevice("test1", "AMD", 100, 3, 0), ContainerDevice("test2", "AMD", 200, 4, 1)),)
    want = "test1,AMD,100,3:test2,AMD,200,4:;"
    assert make_backend().hami_allocation_annotations(devices) == {TO_ALLOCATE: want, ALLOCATED: want}


# --------------------------------------------------------------------------------------- Test_checkType
def test_check_type() -> None:
    amd, dev = make_backend(), usage("d", type="AMD-MI300X")
    assert refusal(dev, request(), {}, amd, False) is None
    assert refusal(dev, request(), {USE_TYPE: "MI250"}, amd, False) == "CardTypeMismatch"
    assert refusal(dev, DeviceRequest("other", 1), {}, amd, False) == "CardTypeMismatch"


# --------------------------------------------------------------------------------------- Test_GenerateResourceRequests
def test_generate_parses_limits_only() -> None:
    ctr = container(limits={"amd.com/gpu": 2, MEM: 4096, CORES: 33},
                    requests={"amd.com/gpu": 99, MEM: 99, CORES: 99})
    assert hami_backend().hami_container_request(ctr) == DeviceRequest("AMD", 2, 4096, 0, 33)


def test_generate_no_gpu_limits_is_empty() -> None:
    assert hami_backend().hami_container_request(container(limits={MEM: 4096, CORES: 33})) is None


def test_generate_defaults_an_omitted_core_limit_to_100_percent() -> None:
    req = hami_backend().hami_container_request(container(limits={"amd.com/gpu": 1, MEM: 4096}))
    assert req is not None and req.coresreq == 100


@pytest.mark.parametrize(("name", "value"), [
    pytest.param("amd.com/gpu", 0, id="rejects zero count"),
    pytest.param("amd.com/gpu", INT32_MAX + 1, id="rejects overflowing count"),
    pytest.param(MEM, -1, id="rejects negative memory"),
    pytest.param(MEM, INT32_MAX + 1, id="rejects overflowing memory"),
    pytest.param(CORES, 0, id="rejects zero core percentage"),
    pytest.param(CORES, 101, id="rejects excessive core percentage"),
])
def test_generate_rejects(name: str, value: int) -> None:
    assert hami_backend().hami_container_request(container(limits={"amd.com/gpu": 1, name: value})) is None


# --------------------------------------------------------------------------------------- TestDevices_Fit
def test_fit_two_whole_cards() -> None:
    # memreq=0 uses totalmem; coresreq=0 uses totalcore when the whole memory is booked
    devices = [usage("dev-0", index=0, count=2), usage("dev-1", index=1, count=12)]
    result = fit(devices, request(2))
    assert result.ok and result.reason == ""
    # reverse iteration prefers the last card first
    assert [(d.uuid, d.usedmem, d.usedcores) for d in result.devices] == [("dev-1", 1000, 100), ("dev-0", 1000, 100)]


def test_fit_core_percentage_maps_per_device() -> None:
    devices = [usage("dev-0", index=0, totalcore=10), usage("dev-1", index=1, count=12)]
    result = fit(devices, request(1, memreq=500, coresreq=50))
    assert result.ok and result.reason == ""
    assert [(d.uuid, d.usedmem, d.usedcores) for d in result.devices] == [("dev-1", 500, 50)]  # 50% of 100


def test_fit_retains_the_registered_product_type() -> None:
    result = fit([usage("dev-0", type="AMD_Instinct_MI300X_VF")], request(1, memreq=100, coresreq=10))
    assert result.ok and result.reason == ""
    assert result.devices[0].type == "AMD_Instinct_MI300X_VF"


def test_fit_clamps_a_positive_percentage_to_at_least_one_cu() -> None:
    result = fit([usage("dev-0", totalcore=64)], request(1, memreq=100, coresreq=1))
    assert result.ok and result.devices[0].usedcores == 1


def test_fit_clamps_a_core_request_to_the_device_total() -> None:
    result = fit([usage("dev-0", totalcore=64)], request(1, memreq=100, coresreq=101))
    assert result.ok and result.devices[0].usedcores == 64


@pytest.mark.parametrize(("device", "req", "annos", "reason"), [
    pytest.param(usage("dev-0", usedmem=900), request(1, 500, 10), {}, "CardInsufficientMemory",
                 id="insufficient memory"),
    pytest.param(usage("dev-0", totalcore=10, usedcores=9), request(1, 100, 100), {}, "CardInsufficientCore",
                 id="insufficient core"),
    pytest.param(usage("dev-1"), request(1, 100, 10), {USE_UUID: "dev-0"}, "CardUuidMismatch",
                 id="uuid mismatch (use)"),
    pytest.param(usage("dev-0", used=2), request(1, 100, 10), {}, "CardTimeSlicingExhausted",
                 id="time slicing exhausted"),
    pytest.param(usage("dev-0", health=False), request(1, 100, 10), {}, "CardNotHealth",
                 id="unhealthy device is rejected"),
])
def test_fit_refusals(device, req, annos, reason) -> None:  # type: ignore[no-untyped-def]
    result = fit([device], req, pod_annotations=annos)
    assert not result.ok
    assert reason in result.reason


# --------------------------------------------------------------------------------------- TestCheckAMDType
@pytest.mark.parametrize(("annos", "card", "want"), [
    pytest.param({}, "MI300X", True, id="no annotations"),
    pytest.param({USE_TYPE: "MI300"}, "MI300X", True, id="matching use type"),
    pytest.param({USE_TYPE: "MI250"}, "MI300X", False, id="non-matching use type"),
    pytest.param({NOUSE_TYPE: "MI300"}, "MI300X", False, id="matching nouse type excludes card"),
    pytest.param({NOUSE_TYPE: "MI250"}, "MI300X", True, id="non-matching nouse type keeps card"),
    pytest.param({NOUSE_TYPE: ""}, "MI300X", True, id="empty nouse annotation keeps card"),
    pytest.param({USE_TYPE: ""}, "MI300X", True, id="empty use annotation keeps card"),
    pytest.param({NOUSE_TYPE: "   "}, "MI300X", True, id="whitespace-only nouse annotation keeps card"),
    pytest.param({USE_TYPE: "   "}, "MI300X", True, id="whitespace-only use annotation keeps card"),
    pytest.param({NOUSE_TYPE: "MI250,"}, "MI300X", True, id="nouse with trailing comma only excludes named type"),
    pytest.param({NOUSE_TYPE: ",MI250"}, "MI300X", True, id="nouse with leading comma only excludes named type"),
    pytest.param({NOUSE_TYPE: " MI250 , "}, "MI250X", False, id="nouse with blank member still excludes named type"),
    pytest.param({NOUSE_TYPE: ", "}, "MI300X", True, id="nouse with only commas keeps card"),
    pytest.param({USE_TYPE: "MI300,"}, "MI250X", False, id="use with trailing comma matches named type only"),
    pytest.param({USE_TYPE: ", "}, "MI300X", False, id="use with only commas rejects card"),
])
def test_check_amd_type(annos: dict[str, str], card: str, want: bool) -> None:
    assert check_amd_type(annos, card, USE_TYPE, NOUSE_TYPE) is want

