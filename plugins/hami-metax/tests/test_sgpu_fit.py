"""MetaX sGPU fit (vendors G.2; TestMetaxSDevices_Fit, TestCheckAppClass, TestCheckDeviceQos,
TestPrioritizeExclusiveDevices, TestPrioritizeOnlineDevices)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from metax_testlib import backends, candidate, chosen, make_pod, sgpu_container, sreq, usage

from hami_core.plugins.types import ContainerDevice, DeviceRequest, DeviceUsage, FitResult, GpuPolicy
from hami_metax import sgpu as mx

APP = mx.APP_CLASS
QOS = mx.QOS_POLICY


def fit(devices: list[DeviceUsage], request: DeviceRequest, annotations: Mapping[str, str] | None = None,
        **kwargs: object) -> FitResult:
    return mx.sgpu_fit(devices, request, dict(annotations or {}), **kwargs)


# ------------------------------------------------------------------------------------ TestMetaxSDevices_Fit
def test_fit_success_takes_the_last_device() -> None:
    result = fit([usage("dev-0"), usage("dev-1")], sreq(memreq=64, cores=50))
    assert chosen(result) == ["dev-1"]
    (dev,) = result.devices
    assert (dev.type, dev.usedmem, dev.usedcores, dev.idx) == ("Metax-SGPU", 64, 50, 0)


@pytest.mark.parametrize(("device", "request_", "annotations", "classes", "reason"), [
    (usage("dev-0"), sreq(memreq=512, cores=50), {}, {}, "1/1 CardInsufficientMemory"),
    (usage("dev-0", totalmem=1024, usedcores=100), sreq(memreq=512, cores=50), {}, {}, "1/1 CardInsufficientCore"),
    (usage("dev-0"), sreq(memreq=512, cores=50, type="OtherType"), {}, {}, "1/1 CardTypeMismatch"),
    (usage("dev-0", used=1, usedmem=64, usedcores=10), sreq(memreq=512, cores=50), {APP: "online"},
     {"dev-0": (0, 0)}, "1/1 CardAppClassMismatch"),                                  # online task, normal card
    (usage("dev-0", used=1, usedmem=64, usedcores=10), sreq(memreq=512, cores=50), {},
     {"dev-0": (1, 0)}, "1/1 CardAppClassMismatch"),                                  # normal task, online card
    (usage("dev-0", health=False), sreq(memreq=512, cores=50), {}, {}, "1/1 CardUnhealthy"),
    (usage("dev-0", used=100, totalmem=1280), sreq(memreq=512, cores=50), {}, {}, "1/1 CardTimeSlicingExhausted"),
    (usage("dev-0", totalmem=1280), sreq(memreq=512, cores=120), {}, {}, "1/1 CardInsufficientCore"),  # no clamp
    (usage("dev-0", used=20, totalmem=1280), sreq(memreq=512, cores=100), {}, {},
     "1/1 ExclusiveDeviceAllocateConflict"),
    (usage("dev-1", totalmem=1280), sreq(2, memreq=512, cores=50), {"metax-tech.com/use-gpuuuid": "dev-0"}, {},
     "1/1 CardUuidMismatch"),
    (usage("dev-0", totalmem=1280), sreq(2, memreq=512, cores=50), {"metax-tech.com/nouse-gpuuuid": "dev-0"}, {},
     "1/1 CardUuidMismatch"),
    (usage("dev-0", used=20, totalmem=1280, usedcores=100), sreq(memreq=512, cores=0), {}, {},
     "1/1 CardComputeUnitsExhausted"),
    (usage("dev-0", used=20, totalmem=1280, usedcores=10), sreq(2, memreq=512, cores=20), {}, {},
     "1/1 AllocatedCardsInsufficientRequest"),
])
def test_fit_failures(device: DeviceUsage, request_: DeviceRequest, annotations: dict,
                      classes: dict, reason: str) -> None:
    result = fit([device], request_, annotations, classes=classes)
    assert not result.ok
    assert result.reason == reason


def test_fit_memory_percentage() -> None:
    result = fit([usage("dev-0", used=20, totalmem=1280, usedcores=10)], sreq(pct=10, cores=20))
    assert result.devices == (ContainerDevice("dev-0", "Metax-SGPU", 128, 20, 0),)


def test_mutex_policy_rejects_used_device() -> None:
    device = usage("dev-0", used=1)
    assert fit([device], sreq(memreq=64, cores=50), mutex=True).reason == "1/1 ExclusiveDeviceAllocateConflict"
    _, sgpu = backends()
    pod = make_pod(sgpu_container(), annotations={"hami.io/gpu-scheduler-policy": "mutex"})
    mutex = GpuPolicy(gpu="mutex", gpu_tokens=("mutex",))
    (result,) = sgpu.hami_filter_nodes(pod, sreq(memreq=64, cores=50), [candidate([device])], mutex)
    assert result.reason == "1/1 ExclusiveDeviceAllocateConflict"
    # HAMi v2.10 reads the policy as a chain (PR #2621): "mutex" anywhere in it refuses a busy device.
    for gpu in ("mutex,numa", "binpack,mutex"):
        chain = GpuPolicy(gpu=gpu, gpu_tokens=tuple(gpu.split(",")))
        (result,) = sgpu.hami_filter_nodes(pod, sreq(memreq=64, cores=50), [candidate([device])], chain)
        assert result.reason == "1/1 ExclusiveDeviceAllocateConflict", gpu


def test_every_device_is_checked_and_counted() -> None:
    devices = [usage("a", health=False), usage("b", totalmem=32), usage("c", used=100), usage("d", totalmem=32)]
    result = fit(devices, sreq(memreq=64, cores=50))
    assert result.reasons == ("1/4 CardTimeSlicingExhausted", "1/4 CardUnhealthy", "2/4 CardInsufficientMemory")


def test_online_pods_skip_the_core_checks_and_book_no_cores() -> None:
    full = usage("dev-0", used=1, usedcores=100, totalmem=1280)
    annotations = {APP: "online"}
    result = fit([full], sreq(memreq=512, cores=60), annotations, classes={"dev-0": (1, 0)})
    assert result.devices == (ContainerDevice("dev-0", "Metax-SGPU", 512, 0, 0),)
    # Memory still counts.
    assert fit([full], sreq(memreq=2048), annotations, classes={"dev-0": (1, 0)}).reason == (
        "1/1 CardInsufficientMemory")


# ------------------------------------------------------------------------------------ app class matrix
@pytest.mark.parametrize(("request_class", "used", "online", "offline", "ok"), [
    ("online", 0, 0, 0, True),      # idle device fit
    ("", 1, 1, 0, False),           # normal task unfit online device
    ("", 1, 0, 1, False),           # normal task unfit offline device
    ("", 1, 0, 0, True),            # normal task fit normal device
    ("online", 1, 0, 0, False),     # online task unfit normal device
    ("online", 2, 1, 1, True),      # online task fit online/offline device
    ("offline", 2, 1, 1, False),    # offline task unfit online device
    ("offline", 1, 0, 1, True),
    ("offline", 1, 0, 0, False),
    ("", 0, 3, 0, True),            # idle is idle, whatever is remembered
])
def test_check_app_class(request_class: str, used: int, online: int, offline: int, ok: bool) -> None:
    assert mx.check_app_class(request_class, used, online, offline) is ok
    device = usage("GPU-123", used=used, totalmem=1280)
    annotations = {APP: request_class} if request_class else {}
    result = fit([device], sreq(memreq=64, cores=10), annotations, classes={"GPU-123": (online, offline)})
    assert result.ok is ok
    if not ok:
        assert result.reason == "1/1 CardAppClassMismatch"


# ------------------------------------------------------------------------------------ QoS
@pytest.mark.parametrize(("used", "cores", "device_qos", "ok"), [
    (0, 50, "burst-share", True),    # check no use device
    (2, 100, "burst-share", True),   # check request exclusive
    (2, 50, "burst-share", False),   # check fail
    (2, 50, "best-effort", True),    # check pass
    (2, 50, "", True),
])
def test_check_qos(used: int, cores: int, device_qos: str, ok: bool) -> None:
    assert mx.check_qos("best-effort", used, cores, device_qos) is ok
    device = usage("GPU-123", used=used, totalmem=1280, qos=device_qos)
    result = fit([device], sreq(memreq=64, cores=cores), {QOS: "best-effort"})
    # An exclusive request passes the QoS check, then meets the busy card.
    expected = {True: "", False: "1/1 CardQosPolicyMismatch"}[ok] if cores != 100 else (
        "1/1 ExclusiveDeviceAllocateConflict")
    assert result.reason == expected


def test_qos_sources_in_order_jittery_then_this_cycle_then_registration() -> None:
    device = usage("GPU-1", used=1, qos="burst-share")
    annotations = {QOS: "best-effort"}
    request = sreq(memreq=64, cores=50)
    assert not fit([device], request, annotations).ok
    assert fit([device], request, annotations, current_qos={"GPU-1": "best-effort"}).ok
    assert fit([device], request, annotations, jittery={"GPU-1": "best-effort"}).ok
    assert not fit([device], request, annotations, current_qos={"GPU-1": "best-effort"},
                   jittery={"GPU-1": "fixed-share"}).ok
    # Online pods are not QoS-checked.
    assert fit([device], request, {APP: "online"}, classes={"GPU-1": (1, 0)}).ok


def test_pod_without_qos_annotation_only_fits_unset_qos() -> None:
    assert not fit([usage("GPU-1", used=1, qos="best-effort")], sreq(memreq=64, cores=50)).ok
    assert fit([usage("GPU-1", used=1, qos="")], sreq(memreq=64, cores=50)).ok


# ------------------------------------------------------------------------------------ what the fit hands on
def test_chosen_devices_carry_what_scoring_and_patching_need() -> None:
    device = usage("GPU-1", used=1, qos="fixed-share", zone=2)
    result = fit([device], sreq(memreq=64, cores=50), {QOS: "fixed-share"}, classes={"GPU-1": (0, 0)},
                 current_qos={"GPU-1": "fixed-share"}, topology_aware=True)
    assert result.devices[0].custom_info == {"QosPolicy": "fixed-share", "LinkZone": 2,
                                             mx.INFO_POD_CLASSES: (0, 0), mx.INFO_TOPOLOGY_AWARE: True}


# ------------------------------------------------------------------------------------ prioritisation
def zoned(*pairs: tuple[str, int]) -> list[DeviceUsage]:
    return [usage(uuid, zone=zone) for uuid, zone in pairs]


@pytest.mark.parametrize(("devices", "need", "expected"), [
    (zoned(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2)), 1, ["GPU-5"]),
    (zoned(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)), 2, ["GPU-1", "GPU-2"]),
    (zoned(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2), ("GPU-8", 2)), 4,
     ["GPU-5", "GPU-6", "GPU-7", "GPU-8"]),                                        # best result
    (zoned(("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)), 4,
     ["GPU-1", "GPU-2", "GPU-5", "GPU-6"]),                                        # general result
    (zoned(("GPU-5", 0), ("GPU-6", 0), ("GPU-7", 0)), 2, ["GPU-5", "GPU-6"]),      # no MetaLink
    (zoned(("GPU-3", 0), ("GPU-4", 0), ("GPU-7", 1), ("GPU-8", 1)), 2, ["GPU-7", "GPU-8"]),
    (zoned(("GPU-3", 0), ("GPU-4", 0), ("GPU-6", 1), ("GPU-7", 1), ("GPU-8", 1)), 4,
     ["GPU-6", "GPU-7", "GPU-8", "GPU-3"]),                                        # bad result
    (zoned(("GPU-1", 1), ("GPU-2", 2)), 2, ["GPU-1", "GPU-2"]),                    # not more than needed
    (zoned(("GPU-1", -1), ("GPU-2", 3), ("GPU-3", 3)), 1, ["GPU-2"]),              # negative zone = none
])
def test_prioritize_exclusive(devices: list[DeviceUsage], need: int, expected: list[str]) -> None:
    assert [d.id for d in mx.prioritize_exclusive(devices, need)] == expected


ONLINE_CASES = [
    # prioritize idle device
    ({"GPU-1": (0, 0), "GPU-2": (1, 0), "GPU-3": (2, 0), "GPU-4": (1, 1), "GPU-5": (2, 1), "GPU-6": (0, 1),
      "GPU-7": (0, 2)}, "GPU-1"),
    # prioritize onlyOnline device
    ({"GPU-1": (1, 0), "GPU-2": (2, 0), "GPU-3": (3, 1), "GPU-4": (0, 2)}, "GPU-1"),
    # prioritize online&offline device
    ({"GPU-1": (3, 0), "GPU-2": (1, 1), "GPU-3": (2, 1), "GPU-4": (0, 1), "GPU-5": (0, 2)}, "GPU-2"),
    # prioritize onlyOffline device
    ({"GPU-1": (0, 1), "GPU-2": (0, 2)}, "GPU-1"),
]


@pytest.mark.parametrize(("classes", "expected"), ONLINE_CASES)
def test_prioritize_online(classes: dict, expected: str) -> None:
    devices = [usage(uuid) for uuid in classes]
    assert [d.id for d in mx.prioritize_online(devices, 1, classes)] == [expected]


def test_online_pod_prefers_devices_with_fewer_online_pods() -> None:
    # Candidates are collected from the end: c (preferred by policy), b, a.
    devices = [usage("a", used=1), usage("b", used=2), usage("c", used=3)]
    classes = {"a": (1, 0), "b": (0, 2), "c": (2, 1)}
    assert chosen(fit(devices, sreq(memreq=8), {APP: "online"}, classes=classes)) == ["a"]
    # An offline pod is refused where an online pod runs.
    assert chosen(fit(devices, sreq(memreq=8, cores=10), {APP: "offline"}, classes=classes)) == ["b"]


def test_exclusive_pod_without_app_class_keeps_a_metalink_zone() -> None:
    devices = [usage("z1-a", zone=1), usage("z1-b", zone=1), usage("z2-a", zone=2), usage("z2-b", zone=2),
               usage("z2-c", zone=2)]
    # Candidates from the end: z2-c, z2-b, z2-a, z1-b, z1-a; the smaller zone holds 2.
    assert chosen(fit(devices, sreq(2, pct=100, cores=100))) == ["z1-b", "z1-a"]
    # Not exclusive: the first candidates in policy order.
    assert chosen(fit(devices, sreq(2, pct=50, cores=50))) == ["z2-c", "z2-b"]
    # An app class turns the zone preference off.
    assert chosen(fit(devices, sreq(2, pct=100, cores=100), {APP: "offline"})) == ["z2-c", "z2-b"]


# ------------------------------------------------------------------------------------ the filter hook
def test_earlier_app_containers_set_the_device_qos_for_this_cycle() -> None:
    _, sgpu = backends()
    pod = make_pod(sgpu_container("a", cores=30), sgpu_container("b", cores=30), annotations={QOS: "best-effort"})
    # Container "a" already got GPU-1 in this cycle: used=1 is the pod's own.
    device = usage("GPU-1", used=1, usedcores=30, qos="fixed-share")
    earlier = {"Metax-SGPU": [(ContainerDevice("GPU-1", "Metax-SGPU", 128, 30),), ()]}
    (result,) = sgpu.hami_filter_nodes(pod, sreq(pct=100, cores=30), [candidate([device], allocated=earlier)],
                                       GpuPolicy())
    assert chosen(result) == ["GPU-1"]
    assert result.devices[0].custom_info["QosPolicy"] == "best-effort"
    # Without that container the registered QoS applies.
    (result,) = sgpu.hami_filter_nodes(pod, sreq(pct=100, cores=30), [candidate([device])], GpuPolicy())
    assert result.reason == "1/1 CardQosPolicyMismatch"


def test_exclusive_earlier_container_clears_the_device_qos() -> None:
    _, sgpu = backends()
    pod = make_pod(sgpu_container("a"), sgpu_container("b", mem=1, cores=0), annotations={QOS: "burst-share"})
    device = usage("GPU-1", used=1, usedcores=100, totalmem=4096, qos="fixed-share")
    earlier = {"Metax-SGPU": [(ContainerDevice("GPU-1", "Metax-SGPU", 1024, 100),), ()]}
    (result,) = sgpu.hami_filter_nodes(pod, sreq(memreq=1024, cores=0), [candidate([device], allocated=earlier)],
                                       GpuPolicy())
    # QoS "" fits anything; the card's compute is exhausted by the exclusive container.
    assert result.reason == "1/1 CardComputeUnitsExhausted"


def test_pod_classes_come_from_state_and_ignore_the_pod_itself() -> None:
    _, sgpu = backends()
    sgpu.pods.record("uid-other", "online", ["GPU-1"])
    sgpu.pods.record("uid-p", "offline", ["GPU-1"])   # this pod's earlier reservation
    pod = make_pod(sgpu_container(mem=1), annotations={APP: "online"})
    (result,) = sgpu.hami_filter_nodes(pod, sreq(memreq=1024), [candidate([usage("GPU-1", used=1,
                                                                                  totalmem=4096)])], GpuPolicy())
    assert result.devices[0].custom_info[mx.INFO_POD_CLASSES] == (1, 0)


def test_idle_devices_forget_stale_pod_classes() -> None:
    _, sgpu = backends()
    sgpu.pods.record("uid-gone", "online", ["GPU-1", "GPU-2"])
    pod = make_pod(sgpu_container(mem=1))
    devices = [usage("GPU-1", totalmem=4096), usage("GPU-2", used=1, totalmem=4096)]
    (result,) = sgpu.hami_filter_nodes(pod, sreq(2, memreq=1024, cores=10), [candidate(devices)], GpuPolicy())
    # GPU-1 is idle: the normal pod fits it and the stale entry is gone; GPU-2 still counts the online pod.
    assert result.reasons == ("1/2 AllocatedCardsInsufficientRequest", "1/2 CardAppClassMismatch")
    assert sgpu.pods.pods_on("GPU-1") == frozenset()
    assert sgpu.pods.pods_on("GPU-2") == frozenset({"uid-gone"})


def test_init_containers_do_not_count_as_this_cycle_usage() -> None:
    _, sgpu = backends()
    sgpu.pods.record("uid-other", "online", ["GPU-1"])
    pod = make_pod(sgpu_container("app", mem=1), init=[sgpu_container("init", mem=1)], annotations={APP: "online"})
    # used=1 is the other pod's; the init container's placement is not in the device's usage.
    earlier = {"Metax-SGPU": [(ContainerDevice("GPU-1", "Metax-SGPU", 1024, 0),), ()]}
    cand = candidate([usage("GPU-1", used=1, totalmem=4096)], allocated=earlier)
    (result,) = sgpu.hami_filter_nodes(pod, sreq(memreq=1024), [cand], GpuPolicy())
    assert chosen(result) == ["GPU-1"]
