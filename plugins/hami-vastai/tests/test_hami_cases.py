"""Every case of HAMi v2.10.0's ``pkg/device/vastai/device_test.go``, same inputs, same expected outcome.

Go calls the device's methods directly; here each method is the backend hook (or the engine step) that holds its
rule: ``MutateAdmission`` → ``Engine.admit``, ``GetNodeDevices`` → ``hami_node_devices``, ``CheckHealth`` →
``hami_node_health``, ``checkType`` → the fit's type step, ``PatchAnnotations`` → ``hami_allocation_annotations``,
``GenerateResourceRequests`` → ``hami_container_request``, ``LockNode`` / ``ReleaseNodeLock`` → ``hami_node_lock``
(the engine takes and releases exactly the lock it names), ``Fit`` → ``hami_filter_nodes``, ``AddResourceUsage`` →
``Engine.reserve``, ``computeBestCombination`` → :func:`hami_vastai.fit.best_combination`.
"""

from __future__ import annotations

from typing import Any

import pytest
from vastai_testlib import (
    ALLOCATED,
    HANDSHAKE,
    NODE_LOCK,
    NOUSE_UUID,
    REGISTER,
    T0,
    TO_ALLOCATE,
    USE_UUID,
    VA,
    Clock,
    chosen,
    container,
    die,
    fit,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    request,
    requesting,
    running_pod,
    usage,
)

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, ContainerRequests, DeviceInfo, DeviceRequest, LockSpec
from hami_vastai.fit import best_combination

MUTEX = {"hami.io/gpu-scheduler-policy": "mutex"}


# ------------------------------------------------------------------------------------ Test_MutateAdmission
def test_mutate_admission_set_to_resource_limits() -> None:
    engine = make_engine({"resourceCountName": VA})
    pod = make_pod(container(limits={VA: "1"}))
    assert engine.hook.hami_mutate_container(backend=engine.backends["Vastai"], pod=pod,
                                             container=pod["spec"]["containers"][0]).requested
    assert engine.admit(pod)["spec"]["schedulerName"] == "hami-scheduler"


# ------------------------------------------------------------------------------------ Test_GetNodeDevices
def test_get_node_devices_no_annotation() -> None:
    # HAMi errors "annos not found" and returns no device; the engine treats it as a node without Vastai devices.
    assert make_backend().hami_node_devices(make_node("n")) == []


def test_get_node_devices_exist_vastai_device() -> None:
    raw = '[{"id":"7-0","count":1,"devmem":32768,"type":"Vastai","health":true,"devicepairscore":{}}]'
    assert make_backend().hami_node_devices(make_node("n", raw)) == [
        DeviceInfo(id="7-0", index=0, count=1, devmem=32768, devcore=100, type="Vastai", numa=0, mode="",
                   health=True)]


def test_get_node_devices_exist_vastai_device_through_the_engine_has_the_vendor(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    raw = '[{"id":"7-0","count":1,"devmem":32768,"type":"Vastai","health":true,"devicepairscore":{}}]'
    assert engine.upsert_node(make_node("n", raw)).devices == {"Vastai": 1}
    (dev,) = engine.nodes["n"].devices["Vastai"]
    assert (dev.info.vendor, dev.totalcore) == ("Vastai", 100)


@pytest.mark.parametrize(("name", "raw"), [("no vasta device", ":"),
                                           ("node annotations not decode successfully", "")])
def test_get_node_devices_errors_give_no_devices(name: str, raw: str) -> None:
    with pytest.raises(WireFormatError, match=f"^{REGISTER}: "):
        make_backend().hami_node_devices(make_node("n", raw))


# ------------------------------------------------------------------------------------ Test_CheckHealth
def health(annotation: str, clock: Clock) -> tuple[bool, bool]:
    engine = make_engine(clock=clock)
    backend = engine.backends["Vastai"]
    node = make_node("n", [{"id": "7-0", "count": 1, "type": "Vastai", "health": True}],
                     annotations={HANDSHAKE: annotation})
    devices = backend.hami_node_devices(node)
    report = engine.hook.hami_node_health(backend=backend, node=node, devices=devices, now=clock(), state={})
    return report.healthy, report.need_update


def test_check_health_requesting_state_expired(clock: Clock) -> None:
    assert health("Requesting_2025-01-07 00:00:00", clock) == (False, False)


def test_check_health_unknown_state(clock: Clock) -> None:
    assert health("Unknown", clock) == (True, True)


# ------------------------------------------------------------------------------------ Test_checkType
@pytest.mark.parametrize(("request_type", "ok"), [("Vastai", True), ("test", False)])
def test_check_type(request_type: str, ok: bool) -> None:
    result = fit([usage("dev-0", type="Vastai")], request(1, request_type))
    assert result.ok is ok
    if not ok:
        assert result.reason == "1/1 CardTypeMismatch"


# ------------------------------------------------------------------------------------ Test_PatchAnnotations
def test_patch_annotations_exist_device() -> None:
    devices = ((ContainerDevice("test1", "Vastai", 2048, 1, idx=1),),)
    assert make_backend().hami_allocation_annotations(devices) == {TO_ALLOCATE: "test1,Vastai,2048,1:;",
                                                                   ALLOCATED: "test1,Vastai,2048,1:;"}


def test_patch_annotations_no_device(clock: Clock) -> None:
    # A pod without Vastai devices gets no Vastai annotation from the engine.
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", [{"id": "7-0", "count": 1, "type": "Vastai", "health": True}]))
    decision = engine.schedule(make_pod(container(limits={"cpu": "1"})))
    assert decision.skipped
    assert TO_ALLOCATE not in decision.annotations and ALLOCATED not in decision.annotations


# ------------------------------------------------------------------------------------ Test_GenerateResourceRequests
WHOLE = DeviceRequest("Vastai", 1, 0, 100, 0)


@pytest.mark.parametrize(("name", "ctr", "want"), [
    ("don't set to limits and request", container(limits={}, requests={}), None),
    ("set to limits and request", container(limits={VA: "1"}, requests={VA: "1"}), WHOLE),
    ("only set to limits", container(limits={VA: "1"}), WHOLE),
    ("only set to request", container(requests={VA: "1"}), WHOLE),
])
def test_generate_resource_requests(name: str, ctr: dict[str, Any], want: DeviceRequest | None) -> None:
    assert make_backend().hami_container_request(ctr) == want


# ------------------------------------------------------------------------------------ TestDevices_LockNode / Release
def lock(pod: dict[str, Any]) -> LockSpec | None:
    engine = make_engine()
    return engine.hook.hami_node_lock(backend=engine.backends["Vastai"], pod=pod, requests=engine.requests(pod))


def test_lock_node_with_no_containers() -> None:
    pod = make_pod()
    pod["spec"]["containers"] = []
    assert lock(pod) is None  # no lock taken (LockNode); an existing one is left alone (ReleaseNodeLock)


def test_lock_node_with_non_zero_resource_requests() -> None:
    pod = make_pod(container(requests={VA: "1"}), name="nozerorr")
    assert lock(pod) == LockSpec(NODE_LOCK)  # taken at bind, released after it
    assert make_backend().hami_node_lock(ContainerRequests(({"Vastai": WHOLE},))) == LockSpec(NODE_LOCK)


# ------------------------------------------------------------------------------------ TestDevices_Fit
def two() -> list:
    return [usage("dev-0", index=0), usage("dev-1", index=1)]


def test_fit_success() -> None:
    result = fit(two(), request(1))
    assert chosen(result) == ["dev-1"]
    assert result.reason == ""


def test_fit_fail_type_mismatch() -> None:
    result = fit([usage("dev-0")], request(1, "OtherType", memreq=512, coresreq=50))
    assert (result.ok, result.devices, result.reason) == (False, (), "1/1 CardTypeMismatch")


def test_fit_fail_user_assign_use_uuid_mismatch() -> None:
    result = fit([usage("dev-1")], request(1), pod_annotations={USE_UUID: "dev-0"})
    assert (result.ok, result.devices, result.reason) == (False, (), "1/1 CardUuidMismatch")


def test_fit_fail_user_assign_no_use_uuid_match() -> None:
    result = fit([usage("dev-0")], request(1), pod_annotations={NOUSE_UUID: "dev-0"})
    assert (result.ok, result.devices, result.reason) == (False, (), "1/1 CardUuidMismatch")


def test_fit_fail_card_overused() -> None:
    result = fit([usage("dev-0", used=1)], request(1))
    assert (result.ok, result.reason) == (False, "1/1 CardTimeSlicingExhausted")


def test_fit_fail_allocated_cards_insufficient_request() -> None:
    # Go's wantLen 1 is the partial list HAMi returns with the failure; a FitResult carries no devices then.
    result = fit([usage("dev-0")], request(2))
    assert (result.ok, result.reason) == (False, "1/1 AllocatedCardsInsufficientRequest")


def test_mutex_policy_rejects_used_device() -> None:
    result = fit([usage("dev-0", used=1, count=2)], request(1), pod_annotations=MUTEX)
    assert (result.ok, result.reason) == (False, "1/1 ExclusiveDeviceAllocateConflict")


def test_mutex_die_mode_rejects_idle_die_on_occupied_card_picks_die_on_free_card() -> None:
    devices = [die("dev-0", "1", index=0, used=1, count=2), die("dev-1", "1", index=1), die("dev-2", "2", index=2)]
    result = fit(devices, request(1), pod_annotations=MUTEX)
    assert chosen(result) == ["dev-2"]
    assert result.reason == ""


def test_mutex_die_mode_rejects_all_idle_dies_on_an_occupied_card() -> None:
    devices = [die("dev-0", "1", index=0, used=1, count=2), die("dev-1", "1", index=1)]
    result = fit(devices, request(1), pod_annotations=MUTEX)
    assert (result.ok, result.reason) == (False, "2/2 ExclusiveDeviceAllocateConflict")


def test_fit_fail_partial_allocation_allocated_cards_insufficient_request() -> None:
    devices = [usage("dev-0", index=0, count=100, totalmem=1280, totalcore=100),
               usage("dev-1", index=1, count=100, totalmem=1280, totalcore=100)]
    result = fit(devices, request(3, memreq=512, coresreq=20))
    assert (result.ok, result.reason) == (False, "2/2 AllocatedCardsInsufficientRequest")


def test_fit_fail_card_not_health() -> None:
    result = fit([usage("dev-0", health=False)], request(1))
    assert (result.ok, result.reason) == (False, "1/1 CardNotHealth")


# ------------------------------------------------------------------------------------ TestDevices_AddResourceUsage
def test_add_resource_usage(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", [{"id": "dev-0", "count": 3, "devmem": 1024, "type": "Vastai",
                                        "health": True}]))
    engine.upsert_pod(running_pod("first", "n", "dev-0,Vastai,0,0:;"))
    dev = engine.nodes["n"].by_uuid["dev-0"]
    assert (dev.used, dev.usedcores, dev.usedmem) == (1, 0, 0)
    pod = make_pod(container(limits={VA: "1"}), name="second")
    engine.reserve(pod, engine.schedule(pod))
    assert (dev.used, dev.usedcores, dev.usedmem) == (2, 0, 0)


# ------------------------------------------------------------------------------------ TestComputeBestCombination
def dev(n: int, aic: str) -> ContainerDevice:
    return ContainerDevice(f"dev{n}", "Vastai", 0, 0, idx=n, custom_info={"AIC": aic})


SIX = [dev(1, "1"), dev(2, "1"), dev(3, "1"), dev(4, "2"), dev(5, "2"), dev(6, "3")]


@pytest.mark.parametrize(("name", "nums", "given", "expected"), [
    ("single AIC group, sufficient to meet demand", 2, [dev(1, "1"), dev(2, "1"), dev(3, "1")], ["dev1", "dev2"]),
    ("multiple AIC groups, select by count after sorting", 3, SIX, ["dev1", "dev2", "dev3"]),
    ("multiple AIC groups, need to take across groups", 4, SIX, ["dev1", "dev2", "dev3", "dev4"]),
    ("request number exceeds available devices", 5, [dev(1, "1"), dev(2, "1"), dev(3, "2")],
     ["dev1", "dev2", "dev3"]),
])
def test_compute_best_combination(name: str, nums: int, given: list[ContainerDevice], expected: list[str]) -> None:
    assert [d.uuid for d in best_combination(nums, given)] == expected


def test_health_patch_is_the_requesting_mark(clock: Clock) -> None:
    # The "Unknown" case's need_update: the scheduler writes its Requesting_<now> mark (HAMi's CheckHealth patch).
    engine = make_engine(clock=clock)
    status = engine.upsert_node(make_node("n", [{"id": "7-0", "count": 1, "type": "Vastai", "health": True}],
                                          annotations={HANDSHAKE: "Unknown"}))
    assert status.patch == {HANDSHAKE: requesting(T0)}
