"""Admission and request generation: HAMi ``MutateAdmission`` / ``GenerateResourceRequests`` for DCU
(vendors E.4, E.5, J.2, J.3), through ``Engine.admit`` and ``Engine.requests``."""

from __future__ import annotations

from typing import Any

import pytest
from hygon_testlib import DCUCORES, DCUMEM, DCUNUM, container, dcu_container, make_engine, make_pod

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import AdmissionDenied
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import container_request

MAX_INT32 = 2**31 - 1


def first(engine: Engine, ctr: dict[str, Any]) -> DeviceRequest | None:
    """The DCU request of a one-container pod, or None when HAMi would produce ``Nums == 0``."""
    return container_request(engine, ctr, "DCU")


def req(nums: int, memreq: int, pct: int, cores: int) -> DeviceRequest:
    return DeviceRequest("DCU", nums, memreq, pct, cores)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return make_engine()


# ------------------------------------------------------------------------------------ E.4 / E.5 examples
def test_bare_count_is_whole_exclusive_cards(engine: Engine) -> None:
    # examples/hygon/use_exclusive_card.yaml: `hygon.com/dcunum: 2` alone = two exclusive whole DCUs.
    assert first(engine, dcu_container(num=2)) == req(2, 0, 100, 100)


def test_vdcu_example(engine: Engine) -> None:
    assert first(engine, dcu_container(num=1, mem=2000, cores=60)) == req(1, 2000, 0, 60)


def test_e5_cores_absent_default_to_100(engine: Engine) -> None:
    assert first(engine, dcu_container(mem=1024)) == req(1, 1024, 0, 100)


def test_e5_memory_absent_is_percentage_100(engine: Engine) -> None:
    assert first(engine, dcu_container(cores=1)) == req(1, 0, 100, 1)


def test_explicit_zero_memory_is_whole_card_memory(engine: Engine) -> None:
    assert first(engine, dcu_container(mem=0, cores=30)) == req(1, 0, 100, 30)


def test_limits_then_requests() -> None:
    engine = make_engine()
    # Upstream test: count/cores/memory in both; limits win.
    both = container(limits={DCUNUM: "1", DCUCORES: "1", DCUMEM: "1024"},
                     requests={DCUNUM: "3", DCUCORES: "50", DCUMEM: "4096"})
    assert first(engine, both) == req(1, 1024, 0, 1)
    # Count in limits only: memory and cores fall back to requests.
    fallback = container(limits={DCUNUM: "1"}, requests={DCUNUM: "1", DCUCORES: "1", DCUMEM: "1024"})
    assert first(engine, fallback) == req(1, 1024, 0, 1)
    # Count in requests only still yields a request (admission does not count it, see below).
    assert first(engine, container(requests={DCUNUM: "2", DCUMEM: "100"})) == req(2, 100, 0, 100)


def test_no_count_no_request(engine: Engine) -> None:
    assert first(engine, container(limits={DCUMEM: "1024", DCUCORES: "50"})) is None
    assert first(engine, container()) is None
    assert first(engine, container(limits={"nvidia.com/gpu": "1"})) is None


# ------------------------------------------------------------------------------------ dropped requests
@pytest.mark.parametrize("count", ["0", "-1", "1.5", "500m", str(MAX_INT32 + 1), "3Gi", "1e20", "abc"])
def test_count_outside_1_to_maxint32_or_not_an_integer_drops_the_request(engine: Engine, count: str) -> None:
    # E.5: oversized count → empty request.
    assert first(engine, container(limits={DCUNUM: count, DCUMEM: "1024"})) is None


@pytest.mark.parametrize("count", ["1000m", "2", str(MAX_INT32)])
def test_count_edge_values_that_are_integers(engine: Engine, count: str) -> None:
    request = first(engine, container(limits={DCUNUM: count}))
    assert request is not None
    assert request.nums == {"1000m": 1, "2": 2}.get(count, MAX_INT32)


@pytest.mark.parametrize("cores", ["-1", "-100", str(MAX_INT32 + 1), "4Gi"])
def test_cores_out_of_range_drop_the_request(engine: Engine, cores: str) -> None:
    # E.5: negative cores → empty request.
    assert first(engine, dcu_container(mem=1024, cores=cores)) is None


def test_cores_above_100_are_kept_in_the_request_and_clamped_in_fit(engine: Engine) -> None:
    assert first(engine, dcu_container(cores=250)) == req(1, 0, 100, 250)


@pytest.mark.parametrize("cores", ["0.5", "500m", "bogus"])
def test_non_integer_cores_keep_the_default(engine: Engine, cores: str) -> None:
    assert first(engine, dcu_container(mem=1024, cores=cores)) == req(1, 1024, 0, 100)


@pytest.mark.parametrize("mem", ["-1", str(MAX_INT32 + 1), "16Gi", "16.0Gi", "3G"])
def test_memory_out_of_range_drops_the_request(engine: Engine, mem: str) -> None:
    # J.3: Hygon drops only on out-of-range/negative values ("16.0Gi" is a whole number of bytes, too big).
    assert first(engine, dcu_container(mem=mem, cores=50)) is None


@pytest.mark.parametrize("mem", ["1.5", "500m", "1.0001Ki", "1e30", "bogus"])
def test_non_integer_memory_is_ignored_and_books_the_whole_card(engine: Engine, mem: str) -> None:
    # J.3: a non-integer quantity (Go AsInt64 fails, also beyond int64) falls back to whole-card memory.
    assert first(engine, dcu_container(mem=mem, cores=50)) == req(1, 0, 100, 50)


def test_memory_edge_values(engine: Engine) -> None:
    assert first(engine, dcu_container(mem=MAX_INT32)) == req(1, MAX_INT32, 0, 100)
    assert first(engine, dcu_container(mem="2Ki")) == req(1, 2048, 0, 100)


def test_memory_factor_overflow_drops_the_request() -> None:
    engine = make_engine({"memoryFactor": 1024})
    limit = MAX_INT32 // 1024
    assert first(engine, dcu_container(mem=limit)) == req(1, limit * 1024, 0, 100)
    assert first(engine, dcu_container(mem=limit + 1)) is None
    # A non-integer quantity is still ignored, not scaled.
    assert first(engine, dcu_container(mem="0.5")) == req(1, 0, 100, 100)


def test_init_and_app_containers_in_hamis_order(engine: Engine) -> None:
    pod = make_pod(dcu_container("app", mem=1000, cores=10), container("sidecar"),
                   init=[dcu_container("init", num=2)])
    reqs = engine.requests(pod)
    assert reqs.init_count == 1
    assert reqs.names == ("init", "app", "sidecar")
    assert reqs.containers == ({"DCU": req(2, 0, 100, 100)}, {"DCU": req(1, 1000, 0, 10)}, {})


# ------------------------------------------------------------------------------------ admission (E.4)
def test_admission_changes_nothing_but_the_scheduler_name(engine: Engine) -> None:
    pod = make_pod(dcu_container(num=1), container("sidecar"))
    out = engine.admit(pod)
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert out["spec"]["containers"] == pod["spec"]["containers"]
    assert "runtimeClassName" not in out["spec"]
    assert "schedulerName" not in pod["spec"]  # the input is not modified


def test_admission_counts_only_the_count_in_limits(engine: Engine) -> None:
    in_requests = make_pod(container(requests={DCUNUM: "1"}))
    assert "schedulerName" not in engine.admit(in_requests)["spec"]
    memory_only = make_pod(container(limits={DCUMEM: "1024", DCUCORES: "30"}))
    out = engine.admit(memory_only)
    assert "schedulerName" not in out["spec"]
    assert out["spec"]["containers"][0]["resources"]["limits"] == {DCUMEM: "1024", DCUCORES: "30"}


def test_admission_of_an_init_container(engine: Engine) -> None:
    out = engine.admit(make_pod(container("app"), init=[dcu_container("init")]))
    assert out["spec"]["schedulerName"] == "hami-scheduler"


def test_admission_denies_privileged_dcu_pods(engine: Engine) -> None:
    pod = make_pod(dcu_container(), container("priv", securityContext={"privileged": True}), name="priv")
    with pytest.raises(AdmissionDenied, match="container priv is privileged"):
        engine.admit(pod)


def test_admission_denies_a_preset_node_name(engine: Engine) -> None:
    with pytest.raises(AdmissionDenied, match="pod has node assigned"):
        engine.admit(make_pod(dcu_container(), nodeName="n1"))
