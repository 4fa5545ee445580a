"""Admission and request generation: HAMi ``MutateAdmission`` / ``GenerateResourceRequests`` for Vastai, through
``Engine.admit`` and ``Engine.requests``. A request is whole devices: ``{Nums n, Memreq 0, pct 100, cores 0}``."""

from __future__ import annotations

from typing import Any

import pytest
from vastai_testlib import VA, container, make_engine, make_pod, va_container

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import AdmissionDenied
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import container_request

MAX_INT32 = 2**31 - 1


def first(engine: Engine, ctr: dict[str, Any]) -> DeviceRequest | None:
    return container_request(engine, ctr, "Vastai")


def whole(nums: int) -> DeviceRequest:
    return DeviceRequest("Vastai", nums, 0, 100, 0)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return make_engine()


@pytest.mark.parametrize(("count", "nums"), [("1", 1), ("4", 4), (4, 4), ("1000m", 1), ("2k", 2000),
                                             (str(MAX_INT32), MAX_INT32)])
def test_count_is_the_number_of_whole_devices(engine: Engine, count: Any, nums: int) -> None:
    assert first(engine, container(limits={VA: count})) == whole(nums)


@pytest.mark.parametrize("count", ["0", "-1", "1.5", "500m", "1e20", "abc", "", None, [1],
                                   str(MAX_INT32 + 1), str(2**32), str(-(2**31))])
def test_a_count_that_is_not_a_positive_int32_asks_nothing(engine: Engine, count: Any) -> None:
    # HAMi: AsInt64 fails, or int32(n) <= 0 (2**31 narrows to -2**31, 2**32 to 0): Nums is not > 0, no request.
    assert first(engine, container(limits={VA: count})) is None


@pytest.mark.parametrize(("count", "nums"), [(str(2**32 + 1), 1), (str(2**33 + 5), 5), (str(-(2**32) + 3), 3)])
def test_a_count_beyond_int32_keeps_its_low_32_bits(engine: Engine, count: str, nums: int) -> None:
    # HAMi's int32(n) cast, never range-checked: a huge count can ask for a few devices.
    assert first(engine, container(limits={VA: count})) == whole(nums)


def test_limits_win_over_requests(engine: Engine) -> None:
    assert first(engine, container(limits={VA: "1"}, requests={VA: "3"})) == whole(1)
    # An unreadable limit does not fall back to the request (HAMi looks at requests only when the limit is absent).
    assert first(engine, container(limits={VA: "x"}, requests={VA: "3"})) is None


def test_memory_and_core_like_resources_are_ignored(engine: Engine) -> None:
    ctr = container(limits={VA: "2", "vastaitech.com/va-memory": "1024", "vastaitech.com/va-core": "50"})
    assert first(engine, ctr) == whole(2)
    assert first(engine, container(limits={"vastaitech.com/va-memory": "1024"})) is None


def test_init_and_app_containers_in_hamis_order(engine: Engine) -> None:
    pod = make_pod(va_container("app", 2), container("sidecar"), init=[va_container("init")])
    reqs = engine.requests(pod)
    assert (reqs.init_count, reqs.names) == (1, ("init", "app", "sidecar"))
    assert reqs.containers == ({"Vastai": whole(1)}, {"Vastai": whole(2)}, {})


# ------------------------------------------------------------------------------------ admission
def test_admission_changes_nothing_but_the_scheduler_name(engine: Engine) -> None:
    pod = make_pod(va_container(num=2), container("sidecar"))
    out = engine.admit(pod)
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert out["spec"]["containers"] == pod["spec"]["containers"]
    assert "schedulerName" not in pod["spec"]


def test_admission_counts_only_the_count_in_limits(engine: Engine) -> None:
    assert "schedulerName" not in engine.admit(make_pod(container(requests={VA: "1"})))["spec"]
    assert "schedulerName" not in engine.admit(make_pod(container(limits={"cpu": "1"})))["spec"]


def test_admission_denies_privileged_vastai_pods(engine: Engine) -> None:
    pod = make_pod(va_container(), container("priv", securityContext={"privileged": True}), name="priv")
    with pytest.raises(AdmissionDenied, match="container priv is privileged"):
        engine.admit(pod)
