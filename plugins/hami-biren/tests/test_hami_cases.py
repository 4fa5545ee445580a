"""Every case of HAMi v2.10.0's ``pkg/device/biren/device_test.go``, same inputs, same expected outcome.

Where hami-core's shape differs from the Go API the test says how: a failed fit carries no devices (HAMi returns the
partial list; its length is the ``AllocatedCardsInsufficientRequest`` count), ``GetNodeDevices`` errors are
:class:`WireFormatError`, and a missing registration is "no devices" rather than an error.
"""

from __future__ import annotations

from typing import Any

import pytest
from biren_testlib import (
    ALLOCATED,
    GPU,
    HANDSHAKE,
    NODE_LOCK,
    NOUSE_UUID,
    REGISTER,
    TO_ALLOCATE,
    USE_UUID,
    Clock,
    container,
    fit,
    gpu_container,
    make_backend,
    make_engine,
    make_pod,
    policy_from,
    request,
    usage,
)

from hami_biren.backend import COMMON_WORD
from hami_core.cluster.memory import MemoryCluster
from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, DeviceInfo, DeviceRequest, DeviceUsage, LockSpec
from hami_core.scheduler.nodelock import NodeLocker
from hami_core.testing import node, pod


# ------------------------------------------------------------------------------------ Test_MutateAdmission
def test_mutate_admission_set_to_resource_limits() -> None:
    ctr = container(limits={GPU: "1"})
    assert make_backend().hami_mutate_container(make_pod(ctr), ctr).requested is True


# ------------------------------------------------------------------------------------ Test_GetNodeDevices
def test_get_node_devices_no_annotation() -> None:
    # HAMi: [] with "annos not found hami.io/node-biren-register"; the core: [] (a node without Biren devices).
    assert make_backend().hami_node_devices(node("n", annotations={})) == []


def test_get_node_devices_exist_biren_device(clock: Clock) -> None:
    raw = '[{"id":"7-0","count":1,"devmem":32768,"type":"Biren","health":true,"devicepairscore":{}}]'
    want = DeviceInfo(id="7-0", index=0, count=1, devmem=32768, devcore=100, type="Biren", numa=0, mode="",
                      health=True)
    assert make_backend().hami_node_devices(node("n", annotations={REGISTER: raw})) == [want]
    # DeviceVendor is the common word: the engine stamps it.
    engine = make_engine(clock=clock)
    assert engine.upsert_node(node("n", annotations={REGISTER: raw})).errors == {}
    (dev,) = engine.nodes["n"].devices[COMMON_WORD]
    assert dev.info.vendor == COMMON_WORD


@pytest.mark.parametrize(("raw", "case"), [(":", "no biren device"),
                                           ("", "node annotations not decode successfully")])
def test_get_node_devices_undecodable(raw: str, case: str) -> None:
    with pytest.raises(WireFormatError, match=f"^{REGISTER}: "):
        make_backend().hami_node_devices(node("n", annotations={REGISTER: raw}))


# ------------------------------------------------------------------------------------ Test_CheckHealth
@pytest.mark.parametrize(("value", "healthy", "need_update"), [
    ("Requesting_2025-01-07 00:00:00", False, False),   # "Requesting state expired"
    ("Unknown", True, True),                             # "Unknown state"
])
def test_check_health(clock: Clock, value: str, healthy: bool, need_update: bool) -> None:
    b = make_backend()
    n = node("n", annotations={REGISTER: '[{"id":"7-0","count":1,"type":"Biren","health":true}]', HANDSHAKE: value})
    report = b.hami_node_health(n, b.hami_node_devices(n), clock())
    assert (report.healthy, report.need_update) == (healthy, need_update)


# ------------------------------------------------------------------------------------ Test_checkType
def test_check_type_the_same_type() -> None:
    assert fit([usage("d0", type="Biren")], request(type="Biren")).ok


def test_check_type_the_different_type() -> None:
    assert fit([usage("d0", type="Biren")], request(type="test")).reason == "1/1 CardTypeMismatch"


# ------------------------------------------------------------------------------------ Test_PatchAnnotations
def test_patch_annotations_exist_device() -> None:
    devices = ((ContainerDevice("test1", COMMON_WORD, 2048, 1, idx=1),),)
    assert make_backend().hami_allocation_annotations(devices) == {TO_ALLOCATE: "test1,Biren,2048,1:;",
                                                                   ALLOCATED: "test1,Biren,2048,1:;"}


def test_patch_annotations_no_device(clock: Clock) -> None:
    # HAMi patches nothing for a pod without Biren devices; the engine asks the hook only for backends a pod uses.
    engine = make_engine(clock=clock)
    engine.upsert_node(node("n", annotations={REGISTER: '[{"id":"a","count":1,"type":"Biren","health":true}]'}))
    decision = engine.schedule(make_pod(container(limits={"cpu": "1"})))
    assert TO_ALLOCATE not in decision.annotations and ALLOCATED not in decision.annotations


# ------------------------------------------------------------------------------------ Test_GenerateResourceRequests
WHOLE = DeviceRequest(COMMON_WORD, 1, 0, 100, 0)


@pytest.mark.parametrize(("resources", "want"), [
    ({"limits": {}, "requests": {}}, None),                          # "don't set to limits and request"
    ({"limits": {GPU: "1"}, "requests": {GPU: "1"}}, WHOLE),         # "set to limits and request"
    ({"limits": {GPU: "1"}}, WHOLE),                                 # "only set to limits"
    ({"requests": {GPU: "1"}}, WHOLE),                               # "only set to request"
])
def test_generate_resource_requests(resources: dict[str, Any], want: DeviceRequest | None) -> None:
    assert make_backend().hami_container_request(container(**resources)) == want


# ------------------------------------------------------------------------------------ LockNode / ReleaseNodeLock
def locked_node(**annotations: str) -> dict[str, Any]:
    return node("testNode", annotations={"test-annotation-key": "test-annotation-value",
                                         TO_ALLOCATE: "some-value", **annotations})


def lock_spec(p: dict[str, Any]) -> LockSpec | None:
    """The lock HAMi's ``LockNode`` / ``ReleaseNodeLock`` would take or release for ``p`` (None: none)."""
    return make_backend().hami_node_lock(make_engine().requests(p))


@pytest.mark.parametrize(("containers", "has_lock"), [
    ([], False),                                                     # "Test with no containers"
    ([container(requests={GPU: "1"})], True),                        # "Test with non-zero resource requests"
])
def test_lock_node(clock: Clock, containers: list[dict[str, Any]], has_lock: bool) -> None:
    cluster = MemoryCluster(nodes=[locked_node()])
    p = pod(*containers, name="lockme")
    p["spec"]["containers"] = containers
    spec = lock_spec(p)
    if spec is not None:
        NodeLocker(cluster, clock=clock).acquire("testNode", p, spec)
    assert (NODE_LOCK in cluster.get_node("testNode")["metadata"]["annotations"]) is has_lock


@pytest.mark.parametrize(("containers", "has_lock"), [
    ([], True),                                                      # "Test with no containers": nothing released
    ([container(requests={GPU: "1"})], False),                       # "Test with non-zero resource requests"
])
def test_release_node_lock(clock: Clock, containers: list[dict[str, Any]], has_lock: bool) -> None:
    cluster = MemoryCluster(nodes=[locked_node(**{NODE_LOCK: "lock-values,default,nozerorr"})])
    p = pod(name="nozerorr", namespace="default")
    p["spec"]["containers"] = containers
    spec = lock_spec(p)
    if spec is not None:
        NodeLocker(cluster, clock=clock).release("testNode", p, spec)
    assert (NODE_LOCK in cluster.get_node("testNode")["metadata"]["annotations"]) is has_lock


# ------------------------------------------------------------------------------------ TestDevices_Fit
def dev(id: str, index: int = 0, **kw: Any) -> DeviceUsage:
    return usage(id, index=index, **kw)


FIT_CASES = [
    ("fit success", [dev("dev-0"), dev("dev-1", 1)], request(1), {}, True, ["dev-1"], ""),
    ("fit fail: type mismatch", [dev("dev-0")], request(1, 512, 50, type="OtherType"), {}, False, [],
     "1/1 CardTypeMismatch"),
    ("fit fail: user assign use uuid mismatch", [dev("dev-1")], request(1), {USE_UUID: "dev-0"}, False, [],
     "1/1 CardUuidMismatch"),
    ("fit fail: user assign no use uuid match", [dev("dev-0")], request(1), {NOUSE_UUID: "dev-0"}, False, [],
     "1/1 CardUuidMismatch"),
    ("fit fail: card overused", [dev("dev-0", used=1)], request(1), {}, False, [], "1/1 CardTimeSlicingExhausted"),
    ("fit fail:  AllocatedCardsInsufficientRequest", [dev("dev-0")], request(2), {}, False, [],
     "1/1 AllocatedCardsInsufficientRequest"),
    ("mutex policy rejects used device", [dev("dev-0", used=1, count=2)], request(1),
     {"hami.io/gpu-scheduler-policy": "mutex"}, False, [], "1/1 ExclusiveDeviceAllocateConflict"),
    ("fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple cards",
     [dev("dev-0", count=100, totalmem=1280, totalcore=100), dev("dev-1", 1, count=100, totalmem=1280, totalcore=100)],
     request(3, 512, 20), {}, False, [], "2/2 AllocatedCardsInsufficientRequest"),
    ("fit fail: CardNotHealth", [dev("dev-0", health=False)], request(1), {}, False, [], "1/1 CardNotHealth"),
]


@pytest.mark.parametrize(("name", "devices", "req", "annos", "want_fit", "want_ids", "want_reason"), FIT_CASES,
                         ids=[c[0] for c in FIT_CASES])
def test_devices_fit(name: str, devices: list[DeviceUsage], req: DeviceRequest, annos: dict[str, str], want_fit: bool,
                     want_ids: list[str], want_reason: str) -> None:
    result = fit(devices, req, pod_annotations=annos, policy=policy_from(annos))
    assert result.ok is want_fit
    assert [d.uuid for d in result.devices] == want_ids
    assert result.reason == want_reason


# ------------------------------------------------------------------------------------ TestDevices_AddResourceUsage
def test_add_resource_usage(clock: Clock) -> None:
    # Used 1 → 2, cores and memory += the container device's (0): through the engine's booking of a placed pod.
    engine = make_engine(clock=clock)
    engine.upsert_node(node("n", annotations={REGISTER: '[{"id":"dev-0","count":4,"type":"Biren","health":true}]'}))
    for name in ("first", "second"):
        engine.upsert_pod(pod(gpu_container(), name=name, uid=name, node_name="n", phase="Running",
                              annotations={ALLOCATED: "dev-0,Biren,0,0:;", "hami.io/vgpu-node": "n"}))
    d = engine.nodes["n"].by_uuid["dev-0"]
    assert (d.used, d.usedcores, d.usedmem) == (2, 0, 0)
