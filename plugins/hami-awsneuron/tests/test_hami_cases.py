"""Every case of HAMi v2.10.0's ``pkg/device/awsneuron/device_test.go``, same inputs and outcomes.

Where a Go test calls an unexported helper, the case calls its port (``split_core_request``,
``count_mask_available``, ``graph_select``); ``checkType`` is the type step of the fit. The Go tests build the
device with ``coresPerAWSNeuron`` unset (0) for admission and fit, and set it to 2 for requests and annotations.
"""

from __future__ import annotations

from typing import Any

import pytest
from awsneuron_testlib import (
    ALLOCATED,
    AWS_NEURON_IDS,
    NEURON,
    NEURONCORE,
    PREDICATE_NODE,
    RESOURCE_TYPE,
    container,
    fit,
    gpu_policy,
    make_backend,
    make_pod,
    request,
    usage,
)

from hami_awsneuron.requests import CoreLayout, RequestError, split_core_request
from hami_awsneuron.topology import NODE_TYPE_KEY, count_mask_available, graph_select
from hami_core.plugins import AdmissionFailed, ContainerDevice, DeviceInfo, DeviceRequest
from hami_core.testing import T0, node
from hami_core.testing import usage as kit_usage

INT32_MAX = 2**31 - 1


# ------------------------------------------------------------------------------------------ Test_MutateAdmission
@pytest.mark.parametrize(("limits", "requests", "want", "err"), [
    pytest.param({NEURON: 2}, None, True, None, id="set neuron number"),
    pytest.param(None, {NEURON: 2}, True, None, id="set request-only neuron number"),
    pytest.param(None, {NEURON: INT32_MAX + 1}, False, "aws.amazon.com/neuron must not exceed 2147483647",
                 id="reject request-only neuron number that overflows device count"),
    pytest.param({NEURONCORE: 2}, None, True, None, id="set neuron cores"),
    pytest.param({NEURONCORE: 3}, None, False, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
                 id="reject odd neuron core count greater than one"),
    pytest.param(None, {NEURONCORE: 3}, False, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
                 id="reject request-only odd neuron core count greater than one"),
    pytest.param({NEURONCORE: 0}, None, False, "aws.amazon.com/neuroncore must be greater than 0",
                 id="reject zero neuron core count"),
    pytest.param({NEURONCORE: -2}, None, False, "aws.amazon.com/neuroncore must be greater than 0",
                 id="reject negative neuron core count"),
    pytest.param({NEURONCORE: INT32_MAX * 2 + 2}, None, False, "aws.amazon.com/neuroncore must not exceed 4294967294",
                 id="reject neuron core count that overflows device count"),
    pytest.param({}, None, False, None, id="no neuron devices"),
])
def test_mutate_admission(limits: dict[str, Any] | None, requests: dict[str, Any] | None, want: bool,
                          err: str | None) -> None:
    backend = make_backend()
    ctr = container("c", limits=limits, requests=requests)
    pod = make_pod(ctr)
    if err is None:
        assert backend.hami_mutate_container(pod, ctr).requested is want
        return
    with pytest.raises(AdmissionFailed) as info:
        backend.hami_mutate_container(pod, ctr)
    assert str(info.value) == f"container c: {err}"
    assert info.value.code == 500  # HAMi: admission.Errored(http.StatusInternalServerError, err)


# ------------------------------------------------------------------------------------------ Test_GetNodeDevices
def test_get_node_devices() -> None:
    inf2 = node("test", labels={"node.kubernetes.io/instance-type": "inf2"}, capacity={NEURON: 1, NEURONCORE: 2})
    (device,) = make_backend().hami_node_devices(inf2)
    assert device == DeviceInfo(id="test-AWSNeuron-0", index=0, count=2, devmem=0, devcore=3, type="AWSNeuron",
                                numa=0, health=True, custom_info={NODE_TYPE_KEY: "inf2"})


# ------------------------------------------------------------------------------------------ Test_PatchAnnotations
def _dev(uuid: str, idx: int, cores: int = 3) -> ContainerDevice:
    return ContainerDevice(uuid, "AWSNeuron", 0, cores, idx, custom_info={"awsusageinfo": 3})


@pytest.mark.parametrize(("pod", "devices", "allocated", "ids", "resource_type"), [
    pytest.param(make_pod(container(limits={NEURON: "2"})), ((_dev("test1", 0), _dev("test2", 1)),),
                 # Go's table writes "test1,AWSNeuron,0,2:test2,AWSNeuron,0,3;" but asserts the unset key
                 # result["AWSNeuron"]; the encoder gives every device its own cores and a ':' each.
                 "test1,AWSNeuron,0,3:test2,AWSNeuron,0,3:;", "0,1", None, id="neuron device"),
    pytest.param(make_pod(container(limits={NEURONCORE: "2"})), ((_dev("test1", 0),),),
                 "test1,AWSNeuron,0,3:;", "0,1", NEURONCORE, id="neuroncore device"),
    pytest.param(make_pod(container("app"), init=[container("init", limits={NEURON: "1"})]), ((_dev("test1", 0),), ()),
                 "test1,AWSNeuron,0,3:;;", "0", None, id="init container neuron device"),
])
def test_patch_annotations(pod: dict[str, Any], devices: tuple[tuple[ContainerDevice, ...], ...], allocated: str,
                           ids: str, resource_type: str | None) -> None:
    out = make_backend(cores_per_device=2).hami_allocation_annotations(pod, devices, node="", now=T0)
    assert out[ALLOCATED] == allocated
    assert out[AWS_NEURON_IDS] == ids
    assert out[PREDICATE_NODE] == ""  # Go's input map has no hami.io/vgpu-node: the node is ""
    assert out.get(RESOURCE_TYPE) == resource_type


# ------------------------------------------------------------------------------------------ Test_checkType
@pytest.mark.parametrize(("req_type", "found"), [
    pytest.param("AWSNeuron", True, id="the same type"),
    pytest.param("test111", False, id="the different type"),
])
def test_check_type(req_type: str, found: bool) -> None:
    # checkType(request) is the fit's type step: only an AWSNeuron request passes it.
    result = fit([usage("dev-0")], request(1, 1, type=req_type))
    assert result.ok is found
    if not found:
        assert result.reasons == ("1/1 CardTypeMismatch",)


# ------------------------------------------------------------------------------- Test_GenerateResourceRequests
@pytest.mark.parametrize(("limits", "requests", "want"), [
    pytest.param({NEURON: "1"}, {NEURON: "1"}, DeviceRequest("AWSNeuron", 1, 0, 0, 2), id="allocate neuron device"),
    pytest.param(None, {NEURON: INT32_MAX + 1}, None,
                 id="reject request-only neuron number that overflows device count when admission is bypassed"),
    pytest.param({NEURONCORE: "1"}, {NEURONCORE: "1"}, DeviceRequest("AWSNeuron", 1, 0, 0, 1),
                 id="allocate neuron core"),
    pytest.param({NEURONCORE: "3"}, {NEURONCORE: "3"}, None,
                 id="reject odd neuron core request when admission is bypassed"),
    pytest.param(None, {NEURONCORE: "3"}, None,
                 id="reject request-only odd neuron core request when admission is bypassed"),
    pytest.param({NEURONCORE: "0"}, None, None, id="reject zero neuron core request when admission is bypassed"),
    pytest.param({NEURONCORE: "-2"}, None, None,
                 id="reject negative neuron core request when admission is bypassed"),
    pytest.param({NEURONCORE: INT32_MAX * 2 + 2}, None, None,
                 id="reject neuron core request that overflows device count when admission is bypassed"),
])
def test_generate_resource_requests(limits: dict[str, Any] | None, requests: dict[str, Any] | None,
                                    want: DeviceRequest | None) -> None:
    # Go's empty ContainerDeviceRequest{} (Nums 0) is no request here.
    ctr = container("c", limits=limits, requests=requests)
    assert make_backend(cores_per_device=2).hami_container_request(ctr) == want


# ------------------------------------------------------------------------------------------ Test_splitCoreRequest
@pytest.mark.parametrize(("per_device", "cores", "want", "err"), [
    pytest.param(2, 1, (1, 1), None, id="single core takes one device"),
    pytest.param(2, 2, (1, 2), None, id="a full device is one device"),
    pytest.param(2, 6, (3, 2), None, id="whole devices divide evenly"),
    pytest.param(2, 3, None, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
                 id="odd count above one has no representable shape"),
    # An Inferentia chip has four cores, but only two are addressable.
    pytest.param(4, 4, (2, 2), None, id="per-device cores above the addressable limit are bounded"),
    pytest.param(0, 4, (2, 2), None, id="unknown per-device cores falls back to the addressable limit"),
    # One core per device divides evenly, leaving only the count bound.
    pytest.param(1, INT32_MAX + 1, None,
                 "aws.amazon.com/neuroncore needs 2147483648 devices, which exceeds the maximum of 2147483647",
                 id="device count stays within int32"),
])
def test_split_core_request(per_device: int, cores: int, want: tuple[int, int] | None, err: str | None) -> None:
    layout = CoreLayout(per_device)
    if err is not None:
        with pytest.raises(RequestError) as info:
            split_core_request(cores, layout, NEURONCORE)
        assert str(info.value) == err
        return
    assert split_core_request(cores, layout, NEURONCORE) == want


# ------------------------------------------------------------------------------------------ Test_countMaskAvailable
@pytest.mark.parametrize(("mask", "want"), [(3, 2), (2, 1), (1, 1), (0, 0)], ids=["test 3", "test 2", "test 1",
                                                                                   "test 0"])
def test_count_mask_available(mask: int, want: int) -> None:
    assert count_mask_available(mask) == want


# ------------------------------------------------------------------------------------------ Test_graphSelect
def make_device_usages(node_type: str, used: dict[int, int] | None = None, health: bool = True) -> list[Any]:
    """HAMi's ``makeDeviceUsages``: 16 devices, index = position, ``AWSNodeType`` on the first one only."""
    used = used or {}
    return [kit_usage(f"d{i}", vendor="AWSNeuron", index=i, used=used.get(i, 0), health=health,
                      custom_info={NODE_TYPE_KEY: node_type} if i == 0 else None) for i in range(16)]


@pytest.mark.parametrize(("devices", "count", "want"), [
    pytest.param(make_device_usages("inf2"), 16, list(range(16)), id="full allocate"),
    pytest.param(make_device_usages("trn", {7: 1, 13: 1}), 8, [], id="8 allocate fail"),
    pytest.param(make_device_usages("trn", {7: 1}), 8, list(range(8, 16)), id="8 allocate success"),
    pytest.param(make_device_usages("inf", {5: 1, 14: 1}), 8, list(range(6, 14)), id="8 allocate"),
])
def test_graph_select(devices: list[Any], count: int, want: list[int]) -> None:
    assert graph_select(devices, count) == want


# ------------------------------------------------------------------------------------------ TestDevices_Fit
@pytest.mark.parametrize(("devices", "req", "annos", "policy", "want_ids", "reason"), [
    pytest.param([usage("dev-0", count=2), usage("dev-1", count=12)], request(1, 2), {}, "spread", ["dev-1"], "",
                 id="fit success"),
    pytest.param([usage("dev-0")], request(2, 2), {}, "spread", [], "1/1 NumaNotFit",
                 id="fit fail: memory not enough"),
    pytest.param([usage("dev-0", usedcores=1)], request(1, 2), {}, "spread", [], "1/1 CardInsufficientCore",
                 id="fit fail: core not enough"),
    pytest.param([usage("dev-0")], request(1, 2, type="OtherType"), {}, "spread", [], "1/1 CardTypeMismatch",
                 id="fit fail: type mismatch"),
    pytest.param([usage("dev-1")], request(1, 2), {"aws.amazon.com/use-neuron-uuid": "dev-0"}, "spread", [],
                 "1/1 CardUuidMismatch", id="fit fail: user assign use uuid mismatch"),
    pytest.param([usage("dev-0")], request(1, 2), {"aws.amazon.com/nouse-neuron-uuid": "dev-0"}, "spread", [],
                 "1/1 CardUuidMismatch", id="fit fail: user assign no use uuid match"),
    pytest.param([usage("dev-0", used=2)], request(1, 2), {}, "spread", [], "1/1 CardTimeSlicingExhausted",
                 id="fit fail: card overused"),
    # HAMi reads the mutex policy from hami.io/gpu-scheduler-policy; the engine hands it over as the policy.
    pytest.param([usage("dev-0", used=1)], request(1, 2), {}, "mutex", [], "1/1 ExclusiveDeviceAllocateConflict",
                 id="mutex policy rejects used device"),
    pytest.param([usage("dev-0", 0), usage("dev-1", 1)], request(2, 2), {}, "spread", [], "1/2 NumaNotFit",
                 id="fit fail: NumaNotFit with multiple devices"),
    pytest.param([usage("dev-0", health=False)], request(1, 2), {}, "spread", [], "1/1 CardNotHealth",
                 id="fit fail: CardNotHealth"),
])
def test_fit(devices: list[Any], req: DeviceRequest, annos: dict[str, str], policy: str, want_ids: list[str],
             reason: str) -> None:
    result = fit(devices, req, pod_annotations=annos, policy=gpu_policy(policy))
    assert result.ok is bool(want_ids)
    assert [d.uuid for d in result.devices] == want_ids
    assert result.reason == reason
