"""Admission and request generation (vendors D.3, J.2, J.3; scheduler §4.3)."""

from __future__ import annotations

from typing import Any

import pytest
from cambricon_testlib import MLU, VCORE, VMEMORY, VMLU, container, make_engine, make_pod, mlu_container

from hami_core.plugins.errors import AdmissionDenied
from hami_core.plugins.types import DeviceRequest

# HAMi's device_test.go configures these names.
HAMI_TEST_NAMES = {"resourceCountName": MLU, "resourceMemoryName": VMEMORY, "resourceCoreName": VCORE}


def request_of(limits: dict[str, str] | None = None, requests: dict[str, str] | None = None,
               section: dict[str, Any] | None = None) -> DeviceRequest | None:
    engine = make_engine(HAMI_TEST_NAMES if section is None else section)
    reqs = engine.requests(make_pod(container(limits=limits, requests=requests)))
    return reqs.containers[0].get("MLU")


# ------------------------------------------------------------------------------------ vendors D.7 vectors
def test_count_memory_and_cores() -> None:
    both = {MLU: "1", VMEMORY: "1000", VCORE: "2"}
    assert request_of(both, both) == DeviceRequest("MLU", 1, 256000, 0, 2)


def test_cores_default_to_a_whole_card() -> None:
    assert request_of({MLU: "1", VMEMORY: "1000"}) == DeviceRequest("MLU", 1, 256000, 0, 100)


def test_memory_omitted_books_the_whole_memory() -> None:
    assert request_of({MLU: "1", VCORE: "2"}) == DeviceRequest("MLU", 1, 0, 100, 2)


@pytest.mark.parametrize("memory", ["16Gi", "16.0Gi"])
def test_byte_scale_memory_drops_the_request(memory: str) -> None:
    assert request_of({MLU: "1", VMEMORY: memory}) is None


# ------------------------------------------------------------------------------------ more of HAMi's table
def test_bare_count_is_an_exclusive_whole_card() -> None:
    # examples/mlu/allocate_whole.yaml: cambricon.com/vmlu: 1 alone.
    assert request_of({VMLU: "1"}, section={}) == DeviceRequest("MLU", 1, 0, 100, 100)


def test_requests_are_read_when_limits_are_absent() -> None:
    assert request_of(requests={MLU: "2", VMEMORY: "10", VCORE: "30"}) == DeviceRequest("MLU", 2, 2560, 0, 30)


def test_limits_win_over_requests() -> None:
    assert request_of({MLU: "1", VMEMORY: "4"}, {MLU: "3", VMEMORY: "8", VCORE: "5"}) == DeviceRequest(
        "MLU", 1, 1024, 0, 5)


@pytest.mark.parametrize("count", ["0", "-1", "2147483648", "1.5", "two"])
def test_unusable_counts_give_no_request(count: str) -> None:
    assert request_of({MLU: count}) is None


def test_max_int32_count_is_accepted() -> None:
    assert request_of({MLU: "2147483647"}) == DeviceRequest("MLU", 2147483647, 0, 100, 100)


@pytest.mark.parametrize(("memory", "memreq"), [("8388607", 8388607 * 256), ("0", 0), ("1k", 256000)])
def test_memory_range(memory: str, memreq: int) -> None:
    req = request_of({MLU: "1", VMEMORY: memory})
    assert req is not None
    assert (req.memreq, req.mem_percentage) == (memreq, 100 if memreq == 0 else 0)


@pytest.mark.parametrize("memory", ["8388608", "-1", "0.5"])
def test_memory_out_of_range_or_fractional_drops_the_request(memory: str) -> None:
    assert request_of({MLU: "1", VMEMORY: memory}) is None


def test_fractional_cores_keep_the_whole_card_default() -> None:
    assert request_of({MLU: "1", VMEMORY: "4", VCORE: "500m"}) == DeviceRequest("MLU", 1, 1024, 0, 100)


def test_cores_above_100_are_kept_for_fit_to_clamp() -> None:
    assert request_of({MLU: "1", VCORE: "120"}) == DeviceRequest("MLU", 1, 0, 100, 120)


def test_other_vendors_resources_are_not_mlu() -> None:
    assert request_of({"nvidia.com/gpu": "1", VMEMORY: "4"}) is None


def test_init_containers_come_first() -> None:
    engine = make_engine()
    reqs = engine.requests(make_pod(container("app"), init=[mlu_container("init", mem=4, cores=10)]))
    assert reqs.init_count == 1
    assert reqs.containers == ({"MLU": DeviceRequest("MLU", 1, 1024, 0, 10)}, {})


# ------------------------------------------------------------------------------------ admission
def test_admission_marks_mlu_pods_and_changes_nothing_else() -> None:
    pod = make_pod(mlu_container(mem=20, cores=10), container("sidecar"))
    out = make_engine().admit(pod)
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert out["spec"]["containers"] == pod["spec"]["containers"]
    assert "schedulerName" not in pod["spec"]


def test_count_only_in_requests_is_not_an_mlu_pod_at_admission() -> None:
    # HAMi's MutateAdmission looks at limits only; GenerateResourceRequests still reads requests.
    engine = make_engine()
    pod = make_pod(container(requests={VMLU: "1"}))
    assert "schedulerName" not in engine.admit(pod)["spec"]
    assert engine.requests(pod).containers[0] == {"MLU": DeviceRequest("MLU", 1, 0, 100, 100)}


def test_memory_without_count_is_not_an_mlu_pod() -> None:
    pod = make_pod(container(limits={VMEMORY: "4"}))
    assert "schedulerName" not in make_engine().admit(pod)["spec"]


def test_privileged_mlu_pod_is_denied() -> None:
    pod = make_pod({**mlu_container(), "securityContext": {"privileged": True}}, name="priv")
    with pytest.raises(AdmissionDenied, match="privileged"):
        make_engine().admit(pod)


def test_pod_with_node_name_is_denied() -> None:
    with pytest.raises(AdmissionDenied, match="node assigned"):
        make_engine().admit(make_pod(mlu_container(), nodeName="n1"))
