"""Admission and request generation: HAMi ``MutateAdmission`` / ``GenerateResourceRequests`` for Biren, through
``Engine.admit`` and ``Engine.requests``.

A Biren request is always whole devices: ``{Nums n, Memreq 0, MemPercentagereq 100, Coresreq 0}``.
"""

from __future__ import annotations

from typing import Any

import pytest
from biren_testlib import GPU, container, gpu_container, make_engine, make_pod

from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import container_request


def first(engine: Engine, ctr: dict[str, Any]) -> DeviceRequest | None:
    """The Biren request of a one-container pod, or None when HAMi would produce ``Nums <= 0``."""
    return container_request(engine, ctr, "Biren")


def whole(nums: int) -> DeviceRequest:
    return DeviceRequest("Biren", nums, 0, 100, 0)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return make_engine()


def test_default_use_example(engine: Engine) -> None:
    # HAMi's examples/biren/default_use.yaml: `birentech.com/gpu: 1` in limits.
    assert first(engine, gpu_container(num=1)) == whole(1)


def test_limits_win_over_requests(engine: Engine) -> None:
    assert first(engine, container(limits={GPU: "2"}, requests={GPU: "3"})) == whole(2)


@pytest.mark.parametrize("count", ["1000m", "4", "2147483647", 3])
def test_integer_counts(engine: Engine, count: str | int) -> None:
    request = first(engine, container(limits={GPU: count}))
    assert request == whole({"1000m": 1, "4": 4, "2147483647": 2**31 - 1, 3: 3}[count])


@pytest.mark.parametrize("count", ["0", "-1", "1.5", "500m", "abc", "1e30", str(2**32), str(-(2**31))])
def test_counts_that_ask_nothing(engine: Engine, count: str) -> None:
    # Not an int64 integer, or int32(n) <= 0 (2**32 narrows to 0): HAMi's Nums is not > 0.
    assert first(engine, container(limits={GPU: count})) is None


@pytest.mark.parametrize(("count", "nums"), [(str(2**32 + 1), 1), (str(2**31), None), (str(2**33 + 5), 5),
                                             ("4Gi", None), ("3Ki", 3072)])
def test_counts_beyond_int32_wrap_as_go_does(engine: Engine, count: str, nums: int | None) -> None:
    # HAMi converts with int32(n) and never range-checks: the low 32 bits decide (2**31 is negative, 4Gi is 0).
    assert first(engine, container(limits={GPU: count})) == (None if nums is None else whole(nums))


def test_other_resources_are_not_read(engine: Engine) -> None:
    ctr = container(limits={GPU: "1", "birentech.com/gpumem": "1024", "birentech.com/gpucores": "50"})
    assert first(engine, ctr) == whole(1)
    assert first(engine, container(limits={"birentech.com/gpumem": "1024"})) is None
    assert first(engine, container(limits={"nvidia.com/gpu": "1"})) is None


def test_init_and_app_containers_in_hamis_order(engine: Engine) -> None:
    pod = make_pod(gpu_container("app", num=2), container("sidecar"), init=[gpu_container("init")])
    reqs = engine.requests(pod)
    assert reqs.names == ("init", "app", "sidecar")
    assert reqs.containers == ({"Biren": whole(1)}, {"Biren": whole(2)}, {})


# ------------------------------------------------------------------------------------ admission
def test_admission_counts_limits_only(engine: Engine) -> None:
    assert engine.admit(make_pod(gpu_container()))["spec"]["schedulerName"] == "hami-scheduler"
    # The count only in requests: HAMi's MutateAdmission does not see it (the pod keeps its scheduler).
    assert engine.admit(make_pod(container(requests={GPU: "1"})))["spec"].get("schedulerName") is None


def test_admission_changes_no_resource(engine: Engine) -> None:
    pod = make_pod(gpu_container(num=2))
    admitted = engine.admit(pod)
    assert admitted["spec"]["containers"][0]["resources"] == {"limits": {GPU: "2"}}


def test_bad_count_still_routes_the_pod_to_hami(engine: Engine) -> None:
    # MutateAdmission checks only that the key is in limits; the request is then empty and the pod is skipped.
    admitted = engine.admit(make_pod(container(limits={GPU: "0"})))
    assert admitted["spec"]["schedulerName"] == "hami-scheduler"
    assert engine.requests(admitted).containers == ({},)
