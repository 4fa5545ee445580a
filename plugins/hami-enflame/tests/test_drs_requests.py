"""Enflame DRS admission and requests: direct (slices, pct 0) and by spec (memory/cores, pct -1)."""

from __future__ import annotations

import pytest
from enflame_testlib import CORE, DRS, MEM, backends, container, make_engine, make_pod

from hami_core.plugins.errors import AdmissionFailed
from hami_core.plugins.types import DeviceRequest


def test_direct_request_is_one_device_of_n_slices() -> None:
    engine = make_engine()
    got = engine.requests(make_pod(container(limits={DRS: "3"}), container("r", requests={DRS: 1})))
    assert got.containers == ({"Enflame": DeviceRequest("Enflame", 1, 3, 0, 0)},
                              {"Enflame": DeviceRequest("Enflame", 1, 1, 0, 0)})


def test_spec_request_marks_pct_minus_one() -> None:
    _, drs = backends()
    got = drs.hami_container_request(container(limits={MEM: "20480", CORE: "40"}))
    assert got == DeviceRequest("Enflame", 1, 20480, -1, 40)
    assert drs.hami_container_request(container(requests={CORE: "30"})) == DeviceRequest("Enflame", 1, 0, -1, 30)
    # Quantity.Value rounds up; a bad slice count falls through to the spec resources.
    assert drs.hami_container_request(container(limits={DRS: "1.5", MEM: "500m"})) == DeviceRequest(
        "Enflame", 1, 1, -1, 0)


@pytest.mark.parametrize("limits", [{}, {DRS: "0"}, {MEM: "20Gi"}, {DRS: "4294967296"}, {MEM: "-1"}])
def test_dropped_requests(limits: dict) -> None:
    _, drs = backends()
    assert drs.hami_container_request(container(limits=limits)) is None


def test_admission_mirrors_limits_and_requests() -> None:
    engine = make_engine()
    pod = engine.admit(make_pod(container(requests={DRS: "3"}), container("s", limits={MEM: "20", CORE: "50"})))
    assert [c["resources"] for c in pod["spec"]["containers"]] == [
        {"requests": {DRS: "3"}, "limits": {DRS: "3"}},
        {"limits": {MEM: "20", CORE: "50"}, "requests": {MEM: "20", CORE: "50"}},
    ]
    assert engine.admit(pod) == pod


def test_admission_leaves_other_containers_alone() -> None:
    _, drs = backends()
    plain = container(limits={"cpu": "1"})
    assert drs.hami_mutate_container({}, plain).requested is False
    assert plain == container(limits={"cpu": "1"})


@pytest.mark.parametrize(("limits", "message"), [
    ({DRS: "0"}, "enflame.com/drs-gcu must be greater than 0"),
    ({MEM: "0"}, "enflame.com/gcu-memory must be greater than 0"),
    ({CORE: "0"}, r"enflame.com/gcu-core must be in range \(0,100\]"),
    ({MEM: "10", CORE: "101"}, r"enflame.com/gcu-core must be in range \(0,100\]"),
])
def test_admission_denials(limits: dict, message: str) -> None:
    with pytest.raises(AdmissionFailed, match=message):
        make_engine().admit(make_pod(container("worker", limits=limits)))
