"""ResourceQuota support in the engine (spec §11): limits from quota objects, usage from the ledger, the filter-time
check inside the NVIDIA and Cambricon fits, and the admission pre-check. Real plugins, no stand-ins."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import gpu_pod, make_engine, nvidia_node

import hami_cambricon.plugin
import hami_nvidia.plugin
from hami_core import hookimpl
from hami_core.engine.facade import Engine
from hami_core.engine.quota import QuotaUsage
from hami_core.plugins.errors import AdmissionDenied
from hami_core.plugins.manager import get_plugin_manager

MEM, CORES = "nvidia.com/gpumem", "nvidia.com/gpucores"


def rq(name: str, hard: dict[str, Any], namespace: str = "team") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name, "namespace": namespace},
            "spec": {"hard": hard}}


def used(engine: Engine, resource: str = MEM, namespace: str = "team") -> int:
    return engine.quotas.used(namespace, resource)


def bound(pod: dict[str, Any], decision_annotations: dict[str, str], node: str) -> dict[str, Any]:
    """The pod as the watch shows it after filter's patch and bind (annotations, nodeName, a new version)."""
    out = {**pod, "metadata": {**pod["metadata"], "annotations": dict(decision_annotations), "resourceVersion": "7"},
           "spec": {**pod["spec"], "nodeName": node}}
    return out


def reserve(engine: Engine, pod: dict[str, Any]) -> Any:
    decision = engine.schedule(pod)
    assert decision.ok, decision.failed
    engine.reserve(pod, decision)
    return decision


# ------------------------------------------------------------------------------------------------ limits
def test_only_limits_keys_of_managed_resources_with_exact_integers_count(caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine()
    with caplog.at_level(logging.WARNING, logger="hami.engine.quota"):
        engine.upsert_quota(rq("q", {f"limits.{MEM}": "10k", f"requests.{CORES}": "50", "limits.cpu": "4",
                                     f"limits.{CORES}": "1.5", "limits.nvidia.com/gpu": "2"}))
        engine.upsert_quota(rq("q", {f"limits.{MEM}": "10k", f"limits.{CORES}": "1.5"}))  # resync: no new warning
    assert engine.quotas.limit("team", MEM) == 10000
    assert engine.quotas.limit("team", CORES) is None  # not a whole number: ignored
    assert engine.quotas.limit("team", "cpu") is None and engine.quotas.limit("team", "nvidia.com/gpu") is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "team/q" in warnings[0] and f"limits.{CORES}" in warnings[0] and "1.5" in warnings[0]


@pytest.mark.parametrize("bad", ["abc", "-5", "", None, "10Mi5"])
def test_unparsable_quantity_is_ignored_with_a_warning_not_a_crash(bad: Any, caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine()
    with caplog.at_level(logging.WARNING, logger="hami.engine.quota"):
        engine.upsert_quota(rq("q", {f"limits.{MEM}": bad, f"limits.{CORES}": "40"}))
    assert engine.quotas.limit("team", MEM) is None
    assert engine.quotas.limit("team", CORES) == 40  # the good key of the same object still counts
    assert any(f"team/q: spec.hard[limits.{MEM}]" in r.getMessage() for r in caplog.records)


def test_malformed_objects_do_not_crash() -> None:
    engine = make_engine()
    for obj in ({}, {"metadata": None}, {"spec": None}, {"spec": {"hard": ["x"]}}, {"spec": {"hard": {3: "1"}}}):
        engine.upsert_quota(obj)
        engine.remove_quota(obj)
    assert engine.quota_usage() == []


def test_last_processed_wins_and_delete_falls_back_and_keeps_usage() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1"))
    engine.upsert_quota(rq("a", {f"limits.{MEM}": "10000"}))
    engine.upsert_quota(rq("b", {f"limits.{MEM}": "20000"}))
    assert engine.quotas.limit("team", MEM) == 20000
    engine.upsert_quota(rq("a", {f"limits.{MEM}": "5000"}))  # updated later: now it wins
    assert engine.quotas.limit("team", MEM) == 5000
    reserve(engine, gpu_pod("p", mem=4000, namespace="team"))
    engine.remove_quota(rq("a", {}))
    assert engine.quotas.limit("team", MEM) == 20000  # b still limits the namespace
    engine.remove_quota(rq("b", {}))
    assert engine.quotas.limit("team", MEM) is None and not engine.quotas.limited("team")
    assert used(engine) == 4000  # usage is the engine's own, kept across quota deletes
    assert engine.quota_usage() == [QuotaUsage("team", CORES, 0, None), QuotaUsage("team", MEM, 4000, None)]


def test_update_that_drops_a_key_unlimits_it() -> None:
    engine = make_engine()
    engine.upsert_quota(rq("a", {f"limits.{MEM}": "100", f"limits.{CORES}": "10"}))
    engine.upsert_quota(rq("a", {f"limits.{CORES}": "20"}))
    assert (engine.quotas.limit("team", MEM), engine.quotas.limit("team", CORES)) == (None, 20)


# ------------------------------------------------------------------------------------------------ filter
def test_second_pod_over_the_memory_limit_is_refused_until_the_first_leaves() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1"))
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "10000"}))
    first = gpu_pod("a", mem=8000, namespace="team")
    reserve(engine, first)
    assert used(engine) == 8000
    second = gpu_pod("b", mem=8000, namespace="team")
    decision = engine.schedule(second)
    assert not decision.ok
    assert decision.failed == {"n1": "2/2 ResourceQuotaNotFit"}
    assert engine.schedule(gpu_pod("c", mem=8000, namespace="other")).ok  # other namespaces are not limited
    engine.remove_pod(first)
    assert used(engine) == 0
    assert engine.schedule(second).ok


def test_core_limit_and_zero_limit_blocks() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1"))
    engine.upsert_quota(rq("q", {f"limits.{CORES}": "50"}))
    assert engine.schedule(gpu_pod("a", mem=100, cores=50, namespace="team")).ok
    assert engine.schedule(gpu_pod("a", mem=100, cores=51, namespace="team")).failed == {
        "n1": "2/2 ResourceQuotaNotFit"}
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "0"}))
    assert engine.schedule(gpu_pod("a", mem=1, namespace="team")).failed == {"n1": "2/2 ResourceQuotaNotFit"}


def test_quota_is_checked_before_capacity() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1", gpus=1, mem=1000))
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "500"}))
    assert engine.schedule(gpu_pod("a", mem=2000, namespace="team")).failed == {"n1": "1/1 ResourceQuotaNotFit"}


def test_memory_limit_counts_times_the_memory_factor() -> None:
    pm = get_plugin_manager(load_entrypoints=False, plugins=[hami_nvidia.plugin])
    engine = Engine({"nvidia": {"memoryFactor": 2}}, plugins=pm)
    engine.upsert_node(nvidia_node("n1"))
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "4000"}))  # 4000 units = 8000 MiB
    reserve(engine, gpu_pod("a", mem=3000, namespace="team"))  # books 6000 MiB
    assert used(engine) == 6000
    assert engine.schedule(gpu_pod("b", mem=1000, namespace="team")).ok  # 8000 <= 8000
    assert not engine.schedule(gpu_pod("b", mem=1001, namespace="team")).ok


def test_percentage_memory_is_charged_its_resolved_size() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1", gpus=1, mem=20000))
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "9999"}))
    pod = gpu_pod("a", namespace="team")
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "50"
    assert engine.schedule(pod).failed == {"n1": "1/1 ResourceQuotaNotFit"}  # 50 % of 20000 = 10000 > 9999
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "10000"}))
    assert engine.schedule(pod).ok


def _multi(name: str, app: list[int], init: list[int] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    def ctr(i: int, mem: int, prefix: str) -> dict[str, Any]:
        return {"name": f"{prefix}{i}", "image": "x",
                "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}}}

    pod = gpu_pod(name, namespace="team")
    pod["spec"]["containers"] = [ctr(i, m, "c") for i, m in enumerate(app)]
    if init:
        pod["spec"]["initContainers"] = [ctr(i, m, "i") for i, m in enumerate(init)]
    return pod


def test_hypothetical_usage_adds_app_containers_and_peaks_init_containers() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1", gpus=1))
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "10000"}))
    # two app containers share the card: 6000 + 6000 > 10000, refused at the second container
    assert engine.schedule(_multi("a", [6000, 6000])).failed == {"n1": "1/1 ResourceQuotaNotFit"}
    # an init container runs before the app ones: max(8000, 6000) on the card fits 10000
    decision = engine.schedule(_multi("b", [6000], init=[8000]))
    assert decision.ok
    engine.reserve(_multi("b", [6000], init=[8000]), decision)
    assert used(engine) == 8000  # booked collapsed, as the fit counted it
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "7999"}))
    engine.unreserve(_multi("b", [6000], init=[8000]))
    assert engine.schedule(_multi("b", [6000], init=[8000])).failed == {"n1": "1/1 ResourceQuotaNotFit"}


def test_rescheduling_a_reserved_pod_does_not_count_its_own_reservation() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1"))
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "8000"}))
    pod = gpu_pod("a", mem=8000, namespace="team")
    reserve(engine, pod)
    assert engine.schedule(pod).ok  # HAMi drops the pod's reservation (and its quota usage) when re-filtering
    reserve(engine, pod)
    assert used(engine) == 8000


def test_reason_cache_does_not_keep_a_quota_reason_after_the_quota_changes() -> None:
    engine = make_engine()
    for i in range(4):
        engine.upsert_node(nvidia_node(f"n{i}", gpus=1, mem=10000))
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "100"}))
    big = gpu_pod("big", mem=9000, namespace="team")
    assert set(engine.schedule(big, limit=1).failed.values()) == {"1/1 ResourceQuotaNotFit"}
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "100000"}))
    assert engine.schedule(big, limit=1).ok


def test_cambricon_enforces_the_engine_quota_in_units_of_256_mib() -> None:
    pm = get_plugin_manager(load_entrypoints=False, plugins=[hami_cambricon.plugin])
    engine = Engine({"cambricon": {}}, plugins=pm)
    engine.upsert_node({"metadata": {"name": "m1"}, "status": {"capacity": {
        "cambricon.com/mlu.smlu.vcore": "100", "cambricon.com/mlu.smlu.vmemory": "160"}}})  # one 40960 MiB card
    engine.upsert_quota(rq("q", {"limits.cambricon.com/mlu.smlu.vmemory": "50"}))  # 12800 MiB
    whole = {"metadata": {"name": "w", "namespace": "team", "uid": "w"},
             "spec": {"containers": [{"name": "c", "resources": {"limits": {"cambricon.com/vmlu": "1"}}}]}}
    assert engine.schedule(whole).failed == {"m1": "1/1 ResourceQuotaNotFit"}
    part = {"metadata": {"name": "p", "namespace": "team", "uid": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {
                "cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "50",
                "cambricon.com/mlu.smlu.vcore": "10"}}}]}}
    decision = engine.schedule(part)
    assert decision.ok
    engine.reserve(part, decision)
    assert engine.quotas.used("team", "cambricon.com/mlu.smlu.vmemory") == 12800
    other = {**part, "metadata": {"name": "o", "namespace": "team", "uid": "o"}}
    assert engine.schedule(other).failed == {"m1": "1/1 ResourceQuotaNotFit"}


# ------------------------------------------------------------------------------------------------ usage
def test_usage_is_never_doubled_or_lost_through_the_booking_paths() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1"))
    pod = gpu_pod("a", mem=3000, cores=10, namespace="team")
    decision = reserve(engine, pod)
    engine.reserve(pod, decision)  # reserve twice
    assert (used(engine), used(engine, CORES)) == (3000, 10)
    engine.upsert_pod(bound(pod, dict(decision.annotations), "n1"))  # the watch sees it bound
    engine.upsert_pod(bound(pod, dict(decision.annotations), "n1"))
    assert (used(engine), used(engine, CORES)) == (3000, 10)
    engine.unreserve(pod)
    engine.unreserve(pod)
    assert (used(engine), used(engine, CORES)) == (0, 0)
    engine.upsert_pod(bound(pod, dict(decision.annotations), "n1"))
    done = bound(pod, dict(decision.annotations), "n1")
    done["status"] = {"phase": "Succeeded"}
    engine.upsert_pod(done)
    engine.remove_pod(pod)
    assert (used(engine), used(engine, CORES)) == (0, 0)


def test_init_containers_done_shrinks_the_charge_to_app_containers() -> None:
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1", gpus=1))
    pod = _multi("b", [6000], init=[8000])
    decision = reserve(engine, pod)
    running = bound(pod, dict(decision.annotations), "n1")
    engine.upsert_pod(running)
    assert used(engine) == 8000
    running["metadata"]["resourceVersion"] = "8"
    running["status"] = {"phase": "Running",
                         "initContainerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}
    engine.upsert_pod(running)
    assert used(engine) == 6000


OPS = st.lists(st.tuples(st.sampled_from(["reserve", "bind", "unreserve", "remove", "finish"]),
                         st.integers(0, 3)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_used_always_equals_what_the_ledger_holds(ops: list[tuple[str, int]]) -> None:
    """Whatever the order of reserve / watch updates / unreserve / remove / finish, Used is the sum of the namespace's
    bookings (nothing doubled, nothing leaked) and never negative."""
    engine = make_engine()
    engine.upsert_node(nvidia_node("n1", gpus=4))
    pods = [gpu_pod(f"p{i}", mem=1000 * (i + 1), cores=5 * (i + 1), namespace="team" if i % 2 else "ops")
            for i in range(4)]
    last: dict[int, Any] = {}
    version = 10
    for op, i in ops:
        pod = pods[i]
        version += 1
        if op == "reserve":
            decision = engine.schedule(pod)
            if decision.ok:
                engine.reserve(pod, decision)
                last[i] = dict(decision.annotations)
        elif op in ("bind", "finish") and i in last:
            obj = bound(pod, last[i], "n1")
            obj["metadata"]["resourceVersion"] = str(version)
            if op == "finish":
                obj["status"] = {"phase": "Failed"}
            engine.upsert_pod(obj)
        elif op == "unreserve":
            engine.unreserve(pod)
        elif op == "remove":
            engine.remove_pod(pod)
        for ns in ("team", "ops"):
            for resource, field in ((MEM, "usedmem"), (CORES, "usedcores")):
                want = sum(getattr(d, field) for b in engine.ledger.bookings.values() if b.namespace == ns
                           for devs in b.devices.values() for d in devs)
                assert engine.quotas.used(ns, resource) == want >= 0
    device_mem = sum(d.usedmem for devs in engine.nodes["n1"].devices.values() for d in devs)
    assert device_mem == used(engine, MEM, "team") + used(engine, MEM, "ops")


# ------------------------------------------------------------------------------------------------ admission
def test_admission_denies_a_pod_whose_request_alone_exceeds_the_quota() -> None:
    engine = make_engine()
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "10000", f"limits.{CORES}": "100"}))
    engine.admit(gpu_pod("ok", gpus=2, mem=5000, namespace="team"))  # 2 x 5000 = 10000
    with pytest.raises(AdmissionDenied, match=r"^exceeding resource quota$") as exc:
        engine.admit(gpu_pod("big", gpus=2, mem=5001, namespace="team"))
    assert exc.value.code == 403
    with pytest.raises(AdmissionDenied, match="exceeding resource quota"):
        engine.admit(gpu_pod("cores", mem=10, cores=101, namespace="team"))
    engine.admit(gpu_pod("elsewhere", gpus=2, mem=9000, namespace="other"))


def test_admission_counts_percentage_memory_as_zero_and_init_containers_as_a_peak() -> None:
    engine = make_engine()
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "10000"}))
    pct = gpu_pod("pct", namespace="team")
    pct["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "100"
    engine.admit(pct)
    engine.admit(_multi("peak", [6000], init=[9000, 10000]))  # max(6000, 10000)
    with pytest.raises(AdmissionDenied):
        engine.admit(_multi("sum", [6000, 5000], init=[100]))


def test_admission_uses_the_review_namespace_and_skips_other_schedulers() -> None:
    engine = make_engine()
    engine.upsert_quota(rq("q", {f"limits.{MEM}": "100"}))
    pod = gpu_pod("a", mem=200)
    del pod["metadata"]["namespace"]
    with pytest.raises(AdmissionDenied):
        engine.admit(pod, namespace="team")
    engine.admit(pod, namespace="other")
    foreign = gpu_pod("f", mem=200, namespace="team")
    foreign["spec"]["schedulerName"] = "volcano"
    assert engine.admit(foreign) == foreign
    usage_before = engine.quota_usage()
    assert all(u.used == 0 for u in usage_before)  # admission books nothing


def test_quota_view_reaches_plugins_only_where_limited() -> None:
    seen: list[Any] = []

    class Spy:
        @hookimpl(wrapper=True)
        def hami_filter_nodes(self, quota: Any) -> Any:
            seen.append(quota)
            return (yield)

    pm = get_plugin_manager(load_entrypoints=False, plugins=[hami_nvidia.plugin, Spy()])
    engine = Engine({"nvidia": {}}, plugins=pm)
    engine.upsert_node(nvidia_node("n1"))
    engine.schedule(gpu_pod("a", mem=10, namespace="free"))
    engine.upsert_quota(rq("q", {f"limits.{CORES}": "7"}))
    engine.schedule(gpu_pod("a", mem=10, namespace="team"))
    assert seen[0] is None
    assert seen[1].namespace == "team" and dict(seen[1].entries) == {CORES: engine.quotas.view("team").entries[CORES]}
    assert (seen[1].position, seen[1].init_count) == (0, 0)
