"""Admission, HAMi ``MutateAdmission`` for Mthreads + the webhook around it (vendors H.3, H.7, J.2)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from mthreads_testlib import (
    CORE,
    MEM,
    REQUEST_GPU_NUM,
    VGPU,
    container,
    make_engine,
    make_pod,
    mt_container,
)

from hami_core.plugins.errors import AdmissionDenied, AdmissionFailed
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import container_limits

INVALID = "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"

#: The limits of a pod's i-th app container.
limits = container_limits


def annotations(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


# ------------------------------------------------------------------------------------ whole cards
def test_count_two_without_annotations_creates_them() -> None:
    # H.7: count 2 on a pod without annotations → the annotation map is created.
    pod = make_pod(mt_container(gpus=2))
    assert "annotations" not in pod["metadata"]
    out = make_engine().admit(pod)
    assert limits(out) == {VGPU: "2", CORE: "32", MEM: "192"}
    assert annotations(out) == {REQUEST_GPU_NUM: "2"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert "annotations" not in pod["metadata"]  # the input is not modified


def test_count_above_one_overrides_memory_cores_and_the_annotation() -> None:
    # HAMi "set to resources limit": user values are replaced by whole cards.
    pod = make_pod(mt_container(gpus=3, mem=2, cores=1), annotations={REQUEST_GPU_NUM: "test123", "x": "y"})
    out = make_engine().admit(pod)
    assert limits(out) == {VGPU: "3", CORE: "48", MEM: "288"}
    assert annotations(out) == {REQUEST_GPU_NUM: "3", "x": "y"}


def test_count_in_requests_only_gets_whole_card_limits() -> None:
    out = make_engine().admit(make_pod(container(requests={VGPU: "2"})))
    assert out["spec"]["containers"][0]["resources"] == {"requests": {VGPU: "2"},
                                                         "limits": {CORE: "32", MEM: "192"}}
    assert annotations(out) == {REQUEST_GPU_NUM: "2"}


def test_one_gpu_without_memory_is_a_whole_card() -> None:
    out = make_engine().admit(make_pod(mt_container(gpus=1)))
    assert limits(out) == {VGPU: "1", CORE: "16", MEM: "96"}
    assert annotations(out) == {}


def test_one_gpu_with_cores_but_no_memory_becomes_a_whole_card() -> None:
    # HAMi "don't set to memory limit": accepted, and the card is made whole (cores overwritten to 16).
    out = make_engine().admit(make_pod(mt_container(gpus=1, cores=1)))
    assert limits(out) == {VGPU: "1", CORE: "16", MEM: "96"}


def test_memory_in_requests_only_does_not_count_for_the_single_gpu_check() -> None:
    ctr = container(limits={VGPU: "1"}, requests={MEM: "3"})
    out = make_engine().admit(make_pod(ctr))
    assert out["spec"]["containers"][0]["resources"] == {"limits": {VGPU: "1", CORE: "16", MEM: "96"},
                                                         "requests": {MEM: "3"}}


def test_whole_card_defaults_become_whole_card_requests() -> None:
    # J.2: the webhook writes 96 units / 16 cores per card; requests split them per device.
    engine = make_engine()
    one = engine.requests(engine.admit(make_pod(mt_container(gpus=1))))
    two = engine.requests(engine.admit(make_pod(mt_container(gpus=2))))
    assert one.containers[0] == {"Mthreads": DeviceRequest("Mthreads", 1, 49152, 0, 16)}
    assert two.containers[0] == {"Mthreads": DeviceRequest("Mthreads", 2, 49152, 0, 16)}


def test_fractional_count_is_rounded_up_like_quantity_value() -> None:
    out = make_engine().admit(make_pod(mt_container(gpus="1500m")))
    assert limits(out) == {VGPU: "1500m", CORE: "32", MEM: "192"}
    assert annotations(out) == {REQUEST_GPU_NUM: "2"}


def test_admission_is_idempotent() -> None:
    engine = make_engine()
    for ctr in (mt_container(gpus=1), mt_container(gpus=2), mt_container(gpus=1, mem=8)):
        once = engine.admit(make_pod(ctr))
        assert engine.admit(copy.deepcopy(once)) == once


# ------------------------------------------------------------------------------------ sGPU sizes
@pytest.mark.parametrize("mem", ["2", "4", "8", "16", "32", "64", "96"])
def test_legal_sgpu_memory_sizes_are_kept(mem: str) -> None:
    out = make_engine().admit(make_pod(mt_container(gpus=1, mem=mem, cores=4)))
    assert limits(out) == {VGPU: "1", MEM: mem, CORE: "4"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


@pytest.mark.parametrize("mem", ["3", "0", "1", "128", "1000", "2Ki", "2.5"])
def test_illegal_sgpu_memory_size_is_rejected(mem: str) -> None:
    # H.7: memory 3 → error.
    with pytest.raises(AdmissionFailed) as info:
        make_engine().admit(make_pod(mt_container("sgpu", gpus=1, mem=mem)))
    assert INVALID in str(info.value)
    assert "container sgpu" in str(info.value)
    assert MEM in str(info.value)


# ------------------------------------------------------------------------------------ denials
@pytest.mark.parametrize("ctr", [
    mt_container("zero", gpus=0),
    mt_container("zero", gpus=-1),
    container("zero", requests={VGPU: "0"}),
    container("zero", requests={VGPU: "-2"}),
], ids=["limits-0", "limits-negative", "requests-0", "requests-negative"])
def test_count_must_be_positive(ctr: dict[str, Any]) -> None:
    # H.7: count 0 / negative, in limits or requests only → error.
    with pytest.raises(AdmissionFailed) as info:
        make_engine().admit(make_pod(ctr))
    assert str(info.value) == "container zero: mthreads.com/vgpu must be greater than 0"
    assert info.value.code == 500


def test_unreadable_count_is_rejected() -> None:
    with pytest.raises(AdmissionFailed, match=r"container c: mthreads\.com/vgpu"):
        make_engine().admit(make_pod(mt_container(gpus="many")))


def test_no_count_means_not_requested() -> None:
    # HAMi "don't set to count limit": memory and cores without a count do not make a request.
    pod = make_pod(container(limits={MEM: "2", CORE: "1"}))
    out = make_engine().admit(pod)
    assert out == pod
    assert "schedulerName" not in out["spec"]


def test_privileged_container_with_mthreads_is_denied() -> None:
    ctr = mt_container(gpus=1, mem=4)
    ctr["securityContext"] = {"privileged": True}
    with pytest.raises(AdmissionDenied, match="privileged"):
        make_engine().admit(make_pod(ctr))


def test_init_containers_are_mutated_too() -> None:
    out = make_engine().admit(make_pod(container("app"), init=[mt_container("init", gpus=1)]))
    assert out["spec"]["initContainers"][0]["resources"]["limits"] == {VGPU: "1", CORE: "16", MEM: "96"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"
