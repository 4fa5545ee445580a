"""Admission (HAMi ``MutateAdmission``, vendors C.5 and the C.9 vectors)."""

from __future__ import annotations

from typing import Any

import pytest
from ascend_testlib import HAMI_CORE, chip_section, container, make_engine, make_pod, npu_container, res

from hami_core.plugins.errors import AdmissionFailed

A = "Ascend910A"
C = "Ascend910C"
B3 = "Ascend910B3"


def admit(pod: dict[str, Any], vnpus: dict[str, Any] | None = None) -> dict[str, Any]:
    return make_engine(vnpus).admit(pod)


def resources(pod: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return pod["spec"]["containers"][i]["resources"]


# ------------------------------------------------------------------------------------ 910A templates
def test_template_memory_is_rounded_up_in_limits_and_requests() -> None:
    out = admit(make_pod(npu_container(A, 1, 3000)))
    assert resources(out) == {"limits": {res(A): "1", res(A, "memory"): "4369"},
                              "requests": {res(A, "memory"): "4369"}}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_exact_template_memory_is_kept() -> None:
    out = admit(make_pod(npu_container(A, 1, 8738)))
    assert resources(out)["limits"][res(A, "memory")] == "8738"


def test_memory_between_templates_and_capacity_is_the_whole_card() -> None:
    pod = make_pod(container("c", limits={res(A): "1", res(A, "memory"): "20000"},
                             requests={res(A, "memory"): "20000"}))
    out = admit(pod)
    assert resources(out) == {"limits": {res(A): "1", res(A, "memory"): "32768"},
                              "requests": {res(A, "memory"): "32768"}}


def test_no_memory_books_the_whole_card() -> None:
    out = admit(make_pod(npu_container(A, 1)))
    assert resources(out)["requests"] == {res(A, "memory"): "32768"}
    assert resources(out)["limits"][res(A, "memory")] == "32768"


def test_memory_above_capacity_is_rejected() -> None:
    with pytest.raises(AdmissionFailed, match=r"huawei\.com/Ascend910A-memory 40000 is invalid"):
        admit(make_pod(npu_container(A, 2, 40000)))


def test_vnpu_slices_are_for_single_npu_containers() -> None:
    # HAMi returns (true, error): the container requests the chip, but the pod is refused.
    with pytest.raises(AdmissionFailed, match="vNPU not supported for multiple devices"):
        admit(make_pod(npu_container(A, 2, 8738)))
    whole = admit(make_pod(npu_container(A, 2, 32768)))
    assert resources(whole)["limits"] == {res(A): "2", res(A, "memory"): "32768"}
    assert resources(admit(make_pod(npu_container(A, 2))))["requests"] == {res(A, "memory"): "32768"}


def test_container_without_the_count_in_limits_is_not_touched() -> None:
    requests_only = container("r", requests={res(A): "1"})
    other = container("cpu", limits={"cpu": "1"})
    out = admit(make_pod(requests_only, other))
    assert out["spec"]["containers"] == [requests_only, other]
    assert "schedulerName" not in out["spec"]


def test_overwrite_env_blanks_visible_devices_in_other_containers() -> None:
    vnpus = {"configs": [chip_section(A, overwriteEnv=True)]}
    out = admit(make_pod(npu_container(A, 1), container("sidecar")), vnpus)
    assert "env" not in out["spec"]["containers"][0]
    assert out["spec"]["containers"][1]["env"] == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]
    again = make_engine(vnpus).admit(out)
    assert again["spec"]["containers"][1]["env"] == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]


def test_runtime_class_is_set_when_configured_and_unset() -> None:
    vnpus = {"configs": [chip_section(A, runtimeClassName="ascend")]}
    assert admit(make_pod(npu_container(A, 1)), vnpus)["spec"]["runtimeClassName"] == "ascend"
    assert admit(make_pod(npu_container(A, 1), runtimeClassName="kata"), vnpus)["spec"]["runtimeClassName"] == "kata"
    assert "runtimeClassName" not in admit(make_pod(container("cpu")), vnpus)["spec"]
    assert "runtimeClassName" not in admit(make_pod(npu_container(A, 1)))["spec"]


def test_malformed_quantity_is_an_admission_error() -> None:
    with pytest.raises(AdmissionFailed, match=r"container c: huawei\.com/Ascend910A-memory: invalid quantity"):
        admit(make_pod(npu_container(A, 1, "lots")))


# ------------------------------------------------------------------------------------ 910C super pods
def test_910c_super_pod_request_of_one_becomes_a_module() -> None:
    pod = make_pod(container("c", limits={res(C): "1"}, requests={res(C): "1"}))
    out = admit(pod)
    assert resources(out)["limits"] == {res(C): "2", res(C, "memory"): "65536"}
    assert resources(out)["requests"] == {res(C): "2", res(C, "memory"): "65536"}
    limits_only = admit(make_pod(npu_container(C, 1)))
    assert resources(limits_only)["requests"] == {res(C, "memory"): "65536"}
    assert resources(limits_only)["limits"][res(C)] == "2"


def test_910c_super_pod_refuses_other_odd_counts() -> None:
    with pytest.raises(AdmissionFailed, match=r"Ascend910C device request must be 1 or 2\*n, got 3"):
        admit(make_pod(npu_container(C, 3)))
    assert resources(admit(make_pod(npu_container(C, 4))))["limits"][res(C)] == "4"


def test_910c_without_super_pod_keeps_counts() -> None:
    vnpus = {"configs": [chip_section(C, superPod=False)]}
    out = admit(make_pod(npu_container(C, 1, 16384)), vnpus)
    assert resources(out)["limits"] == {res(C): "1", res(C, "memory"): "16384"}
    odd = admit(make_pod(npu_container(C, 3)), vnpus)
    assert resources(odd)["limits"] == {res(C): "3", res(C, "memory"): "65536"}


# ------------------------------------------------------------------------------------ soft split
def test_hami_core_pod_keeps_raw_memory_and_cores() -> None:
    out = admit(make_pod(npu_container(B3, 1, 15360, cores=20), annotations=HAMI_CORE))
    assert resources(out) == {"limits": {res(B3): "1", res(B3, "memory"): "15360", res(B3, "core"): "20"},
                              "requests": {res(B3, "memory"): "15360"}}


def test_hami_core_pod_without_memory_gets_the_allocatable_memory() -> None:
    out = admit(make_pod(npu_container(B3, 2), annotations=HAMI_CORE))
    assert resources(out)["requests"] == {res(B3, "memory"): "65536"}
    several = admit(make_pod(npu_container(B3, 2, 15360), annotations=HAMI_CORE))
    assert resources(several)["limits"][res(B3, "memory")] == "15360"


def test_without_annotation_and_without_templates_memory_is_the_whole_card() -> None:
    vnpus = {"configs": [chip_section(B3, templates=[], memoryAllocatable=32768)]}
    out = admit(make_pod(npu_container(B3, 1, 15360)), vnpus)
    assert resources(out)["limits"][res(B3, "memory")] == "32768"


@pytest.mark.parametrize("cores", ["10", "25"])
def test_hard_split_refuses_core_requests(cores: str) -> None:
    with pytest.raises(AdmissionFailed, match=r"huawei\.com/Ascend910B3-core is only supported in hami-core"):
        admit(make_pod(npu_container(B3, 1, 16384, cores=cores)))


def test_hard_split_refuses_core_given_in_requests() -> None:
    pod = make_pod(container("c", limits={res(B3): "1"}, requests={res(B3, "core"): "10"}))
    with pytest.raises(AdmissionFailed, match="only supported in hami-core"):
        admit(pod)


@pytest.mark.parametrize(("cores", "annotations"), [("0", None), (None, None), ("10", HAMI_CORE)])
def test_core_requests_that_are_allowed(cores: str | None, annotations: dict | None) -> None:
    out = admit(make_pod(npu_container(B3, 1, 16384, cores=cores), annotations=annotations))
    assert resources(out)["limits"][res(B3, "memory")] == "16384"


def test_byte_quantities_are_not_mib() -> None:
    # Memory is in MiB: "16Gi" is 17179869184 MiB, beyond any chip.
    with pytest.raises(AdmissionFailed, match=r"huawei\.com/Ascend910A-memory 17179869184 is invalid"):
        admit(make_pod(npu_container(A, 1, "16Gi")))
