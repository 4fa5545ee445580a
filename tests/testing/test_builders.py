"""hami_core.testing.builders: each builder makes what a plugin's tests expect, and the engine reads it so.

The fit and engine checks run the example third-party plugin (examples/hami-example-vendor, ``hami_acme``),
on ``sys.path`` through pytest's ``pythonpath`` (pyproject.toml), so a plain checkout runs them too.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

import pytest

import hami_acme.plugin
from hami_acme import backend as acme
from hami_core.plugins.errors import PluginError
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    ContainerDevice,
    DeviceRequest,
    FilterCode,
    FitCandidate,
    FitResult,
    GpuPolicy,
    NodeView,
    QuotaEntry,
    QuotaView,
    ResourceNames,
)
from hami_core.testing import (
    T0,
    Clock,
    FakeNode,
    candidate,
    chosen,
    container,
    device_container,
    engine_with,
    fit_one,
    gpu_policy,
    local_time,
    node,
    plugin_manager,
    pod,
    request,
    requesting,
    running_pod,
    usage,
)
from hami_core.testing.conformance import NOW
from hami_core.wire import keys
from hami_core.wire.handshake import parse_handshake

ALLOCATED = "hami.io/acme-devices-allocated"
REGISTER = "hami.io/node-acme-register"
#: The ACME backend with its default configuration.
ACME = acme.AcmeBackend.from_config(acme.AcmeConfig())
HANDSHAKE = "hami.io/node-handshake-acme"


def acme_node(name: str = "n1", cards: int = 2, devmem: int = 1024) -> dict[str, Any]:
    register = [{"id": f"A{i}", "index": i, "count": 4, "devmem": devmem, "devcore": 100, "type": "ACME-X1",
                 "health": True} for i in range(cards)]
    return node(name, annotations={REGISTER: json.dumps(register)})


def booked(engine: Any, name: str = "n1") -> list[tuple[str, int, int, int]]:
    return [(d.id, d.used, d.usedmem, d.usedcores) for d in engine.nodes[name].devices["ACME"]]


class Recorder:
    """A stand-in filter function (a test double, not a vendor's fit) that records what it was handed."""

    def __init__(self, results: Sequence[Any] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.results = results

    def full(self, backend: Any, pod: Any, request: Any, candidates: Any, policy: Any, quota: Any) -> Any:
        self.calls.append({"backend": backend, "pod": pod, "request": request, "candidates": candidates,
                           "policy": policy, "quota": quota})
        return self.results if self.results is not None else [FitResult.unschedulable("1/1 CardInsufficientMemory")]

    def short(self, request: Any, candidates: Any) -> Any:
        self.calls.append({"request": request, "candidates": candidates})
        return [FitResult.unschedulable("1/1 CardInsufficientMemory")]

    def anything(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        return [FitResult.unschedulable("1/1 CardInsufficientMemory")]


# ------------------------------------------------------------------------------------------ clock and time
def test_clock_is_settable_and_starts_where_the_conformance_suite_runs() -> None:
    clock = Clock()
    assert clock() == T0 == NOW
    clock.now += 61
    assert clock() == T0 + 61
    assert Clock(5.0)() == 5.0


def test_the_engine_writes_its_handshake_mark_at_the_clock_time_in_the_requesting_format() -> None:
    clock = Clock()
    engine = engine_with(hami_acme.plugin, config={"acme": {}}, clock=clock)
    assert engine.upsert_node(acme_node()).patch[HANDSHAKE] == requesting(T0)
    clock.now += 3600
    assert engine.upsert_node(acme_node("n2")).patch[HANDSHAKE] == requesting(T0 + 3600)


@pytest.mark.parametrize("t", [T0, T0 + 0.75, 0.0, 1_900_000_123.0])
def test_requesting_reads_back_as_its_local_time(t: float) -> None:
    mark = parse_handshake(requesting(t))
    assert mark.state == "requesting"
    assert mark.time == datetime.fromtimestamp(int(t))
    assert requesting(t) == "Requesting_" + local_time(t)


def test_a_requesting_mark_older_than_60_seconds_makes_a_node_stale() -> None:
    """The use the builders are for: a node whose mark was written at T0 is judged at ``clock.now``."""
    clock = Clock(T0 + 30)
    engine = engine_with(hami_acme.plugin, config={"acme": {}}, clock=clock)
    marked = acme_node()
    marked["metadata"]["annotations"][HANDSHAKE] = requesting(T0)
    fresh = engine.upsert_node(marked)
    clock.now = T0 + 61
    stale = engine.upsert_node(marked)
    assert (fresh.devices, fresh.unhealthy) == ({"ACME": 2}, {})
    assert stale.devices.get("ACME", 0) == 0 and "ACME" in stale.unhealthy


# ------------------------------------------------------------------------------------------ engines
def test_plugin_manager_holds_the_given_plugins_and_no_installed_ones() -> None:
    # hami_acme is installed with an entry point; only passing it registers it.
    assert "ACME" not in engine_with(config={"acme": {}}).backends
    pm = plugin_manager(hami_acme.plugin)
    assert pm.is_registered(hami_acme.plugin)
    assert set(engine_with(hami_acme.plugin, config={"acme": {}}).backends) == {"ACME"}


def test_engine_with_sets_config_scheduler_and_default_clock_without_touching_the_inputs() -> None:
    config = {"acme": {"resourceCountName": "acme.com/card"}}
    scheduler = {"nodeSchedulerPolicy": "spread"}
    before = copy.deepcopy((config, scheduler))
    engine = engine_with(hami_acme.plugin, config=config, scheduler=scheduler)
    assert engine.backends["ACME"].resource_names.count == "acme.com/card"
    assert engine.config.scheduler.node_scheduler_policy == "spread"
    assert engine.clock() == T0
    assert (config, scheduler) == before


# ------------------------------------------------------------------------------------------ fit inputs
def test_usage_maps_its_words_onto_the_device_and_its_bookings() -> None:
    dev = usage("A0", vendor="ACME", index=3, count=4, totalmem=1024, totalcore=50, used=1, usedmem=256,
                usedcores=10, numa=1, mode="hami-core", custom_info={"k": 1}, pair_scores={"A1": 50})
    assert (dev.id, dev.index, dev.count, dev.totalmem, dev.totalcore) == ("A0", 3, 4, 1024, 50)
    assert (dev.used, dev.usedmem, dev.usedcores, dev.numa, dev.mode, dev.health) == (1, 256, 10, 1, "hami-core", True)
    assert (dev.type, dev.info.vendor, dev.info.devmem, dev.info.devcore) == ("ACME", "ACME", 1024, 50)
    assert dev.info.custom_info == {"k": 1} and dev.info.pair_scores == {"A1": 50}
    card = usage("A1", vendor="ACME", type="ACME-X1", health=False)
    assert (card.type, card.info.vendor, card.health) == ("ACME-X1", "ACME", False)
    assert (card.count, card.totalmem, card.totalcore, card.used) == (100, 128, 100, 0)


def test_usage_refuses_an_impossible_device_naming_the_field() -> None:
    with pytest.raises(PluginError, match=r"DeviceInfo 'A0'.*count must be >= 0"):
        usage("A0", vendor="ACME", count=-1)


def test_request_takes_cores_before_the_percentage() -> None:
    assert request("ACME", 2, 4096, 25, 50) == DeviceRequest("ACME", 2, 4096, mem_percentage=50, coresreq=25)
    assert request("ACME") == DeviceRequest("ACME", 1, 0, MEM_PERCENTAGE_UNSET, 0)
    with pytest.raises(PluginError, match=r"DeviceRequest\('ACME'\).*nums must be > 0"):
        request("ACME", 0)


@pytest.mark.parametrize(("gpu", "tokens"), [("spread", ("spread",)), ("binpack, numa", ("binpack", "numa")),
                                             ("mutex,,topology-aware ", ("mutex", "topology-aware"))])
def test_gpu_policy_splits_the_gpu_policy_into_tokens(gpu: str, tokens: tuple[str, ...]) -> None:
    policy = gpu_policy(gpu, node="spread", numa_bind=True)
    assert policy == GpuPolicy(node="spread", gpu=gpu, gpu_tokens=tokens, numa_bind=True)
    assert all(policy.has(t) for t in tokens) and not policy.has("other")
    assert gpu_policy() == GpuPolicy()


def test_fake_node_is_a_node_view_with_its_own_mappings() -> None:
    first, second = FakeNode(), FakeNode(annotations={"a": "b"})
    for name in NodeView.__annotations__:
        assert hasattr(first, name), name
    assert first.annotations == {} and second.annotations == {"a": "b"}
    assert first.labels is not FakeNode().labels


def test_candidate_keeps_the_device_order_and_the_pods_earlier_devices() -> None:
    devices = [usage("A0", vendor="ACME"), usage("A1", vendor="ACME")]
    earlier = {"ACME": ((ContainerDevice("A1", "ACME", 64, 0),),)}
    cand = candidate(devices, node_annotations={"k": "v"}, allocated=earlier)
    assert [d.id for d in cand.devices] == ["A0", "A1"] and cand.devices is not devices
    assert cand.node.annotations == {"k": "v"} and cand.allocated == earlier
    own = FakeNode(name="n9")
    assert candidate(devices, node=own).node is own


# ------------------------------------------------------------------------------------------ fit_one
def test_fit_one_hands_the_hook_arguments_by_name() -> None:
    rec = Recorder()
    devices = [usage("A0", vendor="ACME"), usage("A1", vendor="ACME")]
    quota = QuotaView("default", {"acme.com/npu-mem": QuotaEntry(10)})
    result = fit_one(rec.full, "backend", devices, request("ACME", 1, 64), pod_annotations={"p": "1"},
                     node_annotations={"n": "2"}, quota=quota)
    assert result.code is FilterCode.UNSCHEDULABLE
    (call,) = rec.calls
    (cand,) = call["candidates"]
    assert isinstance(cand, FitCandidate) and [d.id for d in cand.devices] == ["A0", "A1"]
    assert cand.node.annotations == {"n": "2"} and cand.allocated == {}
    assert call["pod"]["metadata"]["annotations"] == {"p": "1"} and len(call["pod"]["spec"]["containers"]) == 1
    assert (call["backend"], call["request"].memreq, call["policy"], call["quota"]) == ("backend", 64, gpu_policy(),
                                                                                        quota)


def test_fit_one_passes_only_what_the_function_names_and_everything_to_kwargs() -> None:
    rec = Recorder()
    the_pod = pod(name="given")
    fit_one(rec.short, None, [usage("A0", vendor="ACME")], request("ACME"), pod=the_pod)
    assert set(rec.calls[0]) == {"request", "candidates"}
    fit_one(rec.anything, "b", [], request("ACME"), pod=the_pod, policy=gpu_policy("binpack"))
    assert set(rec.calls[1]) == {"backend", "pod", "request", "candidates", "policy", "quota"}
    assert rec.calls[1]["pod"] == the_pod and rec.calls[1]["policy"].gpu == "binpack"
    bound = partial(lambda config, request, candidates: [FitResult.unschedulable(f"1/1 {config}")], "CardTypeMismatch")
    assert fit_one(bound, None, [], request("ACME")).reason == "1/1 CardTypeMismatch"


def test_fit_one_says_when_the_filter_does_not_answer_for_one_node() -> None:
    with pytest.raises(AssertionError, match="does not own the backend"):
        fit_one(lambda request: None, None, [], request("ACME"))
    with pytest.raises(AssertionError, match="returned 2 results for 1 candidate"):
        fit_one(Recorder([FitResult.unschedulable("x")] * 2).full, None, [], request("ACME"))
    with pytest.raises(AssertionError, match="not a FitResult"):
        fit_one(Recorder(["yes"]).full, None, [], request("ACME"))


def test_fit_one_runs_a_real_fit_from_the_last_device() -> None:
    devices = [usage("A0", vendor="ACME"), usage("A1", vendor="ACME", usedmem=100)]
    # The last device is preferred while it fits; 64 MiB no longer fit on A1 (100 of 128 MiB booked).
    assert chosen(fit_one(ACME.hami_filter_nodes, ACME, devices, request("ACME", 1, 16))) == ["A1"]
    assert chosen(fit_one(ACME.hami_filter_nodes, ACME, devices, request("ACME", 1, 64))) == ["A0"]
    assert chosen(fit_one(ACME.hami_filter_nodes, ACME, devices, request("ACME", 2, 16))) == ["A1", "A0"]
    refused = fit_one(ACME.hami_filter_nodes, ACME, devices, request("ACME", 1, 200))
    assert not refused.ok and "CardInsufficientMemory" in refused.reason


def test_fit_one_takes_the_backend_hook_method() -> None:
    backend = engine_with(hami_acme.plugin, config={"acme": {}}).backends["ACME"]
    devices = [usage("A0", vendor="ACME"), usage("A1", vendor="ACME")]
    assert chosen(fit_one(backend.hami_filter_nodes, backend, devices, request("ACME"))) == ["A1"]
    mutex = fit_one(backend.hami_filter_nodes, backend, [usage("A0", vendor="ACME", used=1)],
                    request("ACME", 1, 16), policy=gpu_policy("mutex"))
    assert not mutex.ok
    # a request of another type never lands on an ACME card
    other = fit_one(backend.hami_filter_nodes, backend, devices, request("OTHER"))
    assert not other.ok and "CardTypeMismatch" in other.reason


def test_chosen_gives_the_uuids_in_order_or_the_reason() -> None:
    ok = FitResult.success((ContainerDevice("A1", "ACME", 1, 0), ContainerDevice("A0", "ACME", 1, 0)))
    assert chosen(ok) == ["A1", "A0"]
    with pytest.raises(AssertionError, match="1/2 CardInsufficientMemory"):
        chosen(FitResult.unschedulable("1/2 CardInsufficientMemory"))


# ------------------------------------------------------------------------------------------ pods
def test_running_pod_is_bound_running_and_carries_its_allocation() -> None:
    placed = running_pod("old", "n1", {ALLOCATED: "A1,ACME,512,25:;"}, containers=2, init=1, uid="u1",
                         annotations={"extra": "x"})
    assert placed["spec"]["nodeName"] == "n1" and placed["status"] == {"phase": "Running"}
    assert placed["metadata"]["annotations"] == {keys.VGPU_NODE: "n1", ALLOCATED: "A1,ACME,512,25:;", "extra": "x"}
    assert [c["name"] for c in placed["spec"]["containers"]] == ["c0", "c1"]
    assert [c["name"] for c in placed["spec"]["initContainers"]] == ["i0"]
    assert placed["metadata"]["uid"] == "u1"
    given = running_pod("p", "n1", {}, containers=[container("x", limits={"acme.com/npu": 1})])
    assert given["spec"]["containers"][0]["resources"] == {"limits": {"acme.com/npu": "1"}}


def test_the_engine_books_a_running_pod_and_releases_it() -> None:
    engine = engine_with(hami_acme.plugin, config={"acme": {}})
    engine.upsert_node(acme_node())
    placed = running_pod("old", "n1", {ALLOCATED: "A1,ACME,512,25:;"})
    engine.upsert_pod(placed)
    assert booked(engine) == [("A0", 0, 0, 0), ("A1", 1, 512, 25)]
    big = pod(container(limits={"acme.com/npu": 1, "acme.com/npu-mem": 768}))
    assert engine.schedule(big).annotations[ALLOCATED].startswith("A0,")
    engine.remove_pod(placed)
    assert booked(engine) == [("A0", 0, 0, 0), ("A1", 0, 0, 0)]


def test_container_keeps_quantities_as_given_when_asked() -> None:
    assert container(limits={"acme.com/npu": 1})["resources"] == {"limits": {"acme.com/npu": "1"}}
    raw = container(limits={"acme.com/npu": 1}, requests={"acme.com/npu-mem": None}, as_strings=False)
    assert raw["resources"] == {"limits": {"acme.com/npu": 1}, "requests": {"acme.com/npu-mem": None}}


def test_device_container_asks_the_backend_for_what_it_reads() -> None:
    engine = engine_with(hami_acme.plugin, config={"acme": {"resourceMemoryName": "acme.com/mem"}})
    names = engine.backends["ACME"].resource_names
    ctr = device_container(names, 2, 4096, 25, name="w")
    assert ctr["name"] == "w" and ctr["resources"] == {"limits": {"acme.com/npu": "2", "acme.com/mem": "4096",
                                                                  "acme.com/npu-cores": "25"}}
    got = engine.requests(pod(ctr, device_container(names))).containers
    assert got == ({"ACME": request("ACME", 2, 4096, 25)}, {"ACME": request("ACME", 1, 0, 0, pct=100)})


def test_device_container_refuses_a_quantity_the_backend_has_no_resource_for() -> None:
    names = ResourceNames("acme.com/npu", "acme.com/npu-mem")
    assert device_container(names, mem=1)["resources"]["limits"] == {"acme.com/npu": "1", "acme.com/npu-mem": "1"}
    with pytest.raises(ValueError, match=r"cores=25 given but the backend counting 'acme.com/npu' has no cores"):
        device_container(names, cores=25)
    with pytest.raises(ValueError, match="no pct resource"):
        device_container(names, pct=50)
