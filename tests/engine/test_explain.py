"""The explanation (hami_core.engine.explain) names the check each device truly fails, for several vendors, and its
verdict per node is the real filter's (a property test on random clusters)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hami_nvidia.plugin
from hami_core.engine.config import load_config
from hami_core.engine.explain import CHECKS, NothingToExplain, explain
from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim.loader import bundled, load_objects
from hami_core.wire import keys
from hami_core.wire.reasons import Reason, parse_reasons

ORDER = [name for name, _ in CHECKS]


def nvidia_engine() -> Engine:
    return Engine({"nvidia": {}}, plugins=get_plugin_manager(load_entrypoints=False, plugins=[hami_nvidia.plugin]))


def nvidia_node(name: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    devs = [{"index": i, "count": 10, "devmem": 24576, "devcore": 100, "type": "NVIDIA A10", "mode": "hami-core",
             "health": True, **d} for i, d in enumerate(devices)]
    return {"kind": "Node", "metadata": {"name": name, "annotations": {keys.NODE_NVIDIA_REGISTER: json.dumps(devs)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(10 * len(devs))}}}


def gpu_pod(name: str, *, gpus: int = 1, mem: int | None = None, cores: int | None = None,
            annotations: dict[str, str] | None = None, containers: int = 1) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    if mem is not None:
        limits["nvidia.com/gpumem"] = str(mem)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                                        "annotations": dict(annotations or {})},
            "spec": {"containers": [{"name": f"c{i}", "resources": {"limits": dict(limits)}}
                                    for i in range(containers)]}}


def place(engine: Engine, pod: dict[str, Any]) -> None:
    decision = engine.schedule(pod)
    assert decision.ok, decision.failed
    engine.reserve(pod, decision)


def devices_of(explanation: Any, node: str, position: int = 0) -> dict[str, Any]:
    entry = next(n for n in explanation.nodes if n.name == node)
    request = next(r for r in entry.requests if r.position == position)
    return {d.id: d for d in request.devices}


def test_each_nvidia_device_names_its_own_failing_check() -> None:
    engine = nvidia_engine()
    engine.upsert_node(nvidia_node("n", [
        {"id": "sick", "health": False},
        {"id": "t4", "type": "NVIDIA T4"},
        {"id": "small", "devmem": 4000},
        {"id": "busy"},
        {"id": "one-share", "count": 1},
        {"id": "free"},
    ]))
    # take every core of "busy" and the only share of "one-share"
    place(engine, gpu_pod("hog", cores=100, mem=1000, annotations={keys.NVIDIA_USE_GPUUUID: "busy"}))
    place(engine, gpu_pod("sharer", mem=1000, annotations={keys.NVIDIA_USE_GPUUUID: "one-share"}))
    pod = gpu_pod("p", gpus=2, mem=8000, cores=50, annotations={keys.NVIDIA_USE_GPUTYPE: "A10"})

    explanation = explain(engine, pod)

    devices = devices_of(explanation, "n")
    failed = {uuid: d.failed_check for uuid, d in devices.items()}
    assert failed == {"sick": "health", "t4": "type", "small": "memory", "busy": "cores", "one-share": "split",
                      "free": None}
    small = devices["small"]
    statuses = {c.name: c.status for c in small.checks}
    memory_at = ORDER.index("memory")
    assert all(statuses[n] == "pass" for n in ORDER[:memory_at])
    assert statuses["memory"] == "fail" and all(statuses[n] == "not reached" for n in ORDER[memory_at + 1:])
    assert "needs 8000 MiB, 4000 of 4000 MiB free" in next(c.detail for c in small.checks if c.name == "memory")
    node = explanation.nodes[0]
    # two devices needed, one fits: the node-level reason is the filter's, word for word
    assert not node.fits and node.reason == node.filter_reason
    assert parse_reasons(node.reason)[Reason.AllocatedCardsInsufficientRequest] == 1
    assert explanation.node is None


def test_uuid_selector_fails_the_other_devices_at_the_uuid_check() -> None:
    engine = nvidia_engine()
    engine.upsert_node(nvidia_node("n", [{"id": "a"}, {"id": "b"}, {"id": "c", "health": False}]))
    explanation = explain(engine, gpu_pod("p", mem=1000, annotations={keys.NVIDIA_USE_GPUUUID: "b"}))
    failed = {uuid: d.failed_check for uuid, d in devices_of(explanation, "n").items()}
    assert failed == {"a": "uuid", "b": None, "c": "health"}  # health is checked before the selector
    assert explanation.node == "n"
    chosen = [d.id for d in devices_of(explanation, "n").values() if d.chosen]
    assert chosen == ["b"]


def test_a_fitting_node_shows_the_devices_and_score_the_filter_chose() -> None:
    engine = nvidia_engine()
    engine.upsert_node(nvidia_node("a", [{"id": "a0"}, {"id": "a1"}]))
    engine.upsert_node(nvidia_node("b", [{"id": "b0", "devmem": 2000}]))
    place(engine, gpu_pod("earlier", mem=10000, annotations={keys.NVIDIA_USE_GPUUUID: "a1"}))
    pod = gpu_pod("p", mem=4000)
    decision = engine.schedule(pod, limit=1)
    explanation = explain(engine, pod)
    assert explanation.node == decision.node == "a"
    a = next(n for n in explanation.nodes if n.name == "a")
    assert a.fits and a.chosen and a.score == pytest.approx(decision.scores["a"])
    picked = [d.id for d in a.requests[0].devices if d.chosen]
    assert picked == [d.uuid for d in decision.devices["NVIDIA"][0]]
    b = next(n for n in explanation.nodes if n.name == "b")
    assert not b.fits and b.reason == "1/1 CardInsufficientMemory" and b.score is None


def test_a_later_container_sees_what_the_earlier_ones_took() -> None:
    engine = nvidia_engine()
    engine.upsert_node(nvidia_node("n", [{"id": "only"}]))
    explanation = explain(engine, gpu_pod("p", mem=16000, containers=2))
    node = explanation.nodes[0]
    assert [r.fits for r in node.requests] == [True, False]
    second = node.requests[1].devices[0]
    assert second.failed_check == "memory"
    assert "8576 of 24576 MiB free" in next(c.detail for c in second.checks if c.name == "memory")
    assert node.reason == node.filter_reason == "1/1 CardInsufficientMemory"


def test_a_pod_without_managed_devices_has_nothing_to_explain() -> None:
    engine = nvidia_engine()
    engine.upsert_node(nvidia_node("n", [{"id": "a"}]))
    pod = {"metadata": {"name": "cpu", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}
    with pytest.raises(NothingToExplain, match="pod default/cpu requests no device"):
        explain(engine, pod)


def test_unregistered_and_unknown_nodes_get_the_filters_reason() -> None:
    engine = nvidia_engine()
    engine.upsert_node(nvidia_node("n", [{"id": "a"}]))
    engine.upsert_node({"kind": "Node", "metadata": {"name": "cpu"}})
    explanation = explain(engine, gpu_pod("p", mem=1000), ["n", "cpu", "ghost"])
    reasons = {n.name: n.reason for n in explanation.nodes}
    assert reasons == {"n": "", "cpu": "node unregistered", "ghost": "node unregistered"}


# ------------------------------------------------------------------------------------------------ other vendors

def bundled_engine(prefix: str) -> Engine:
    engine = Engine(load_config(yaml.safe_load(bundled("device-config.yaml"))))
    for node in load_objects(bundled("cluster.yaml"), source="cluster.yaml", kind="Node"):
        if node["metadata"]["name"].startswith(prefix):
            engine.upsert_node(node)
    return engine


def vendor_pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def test_metax_sgpu_memory_and_cores() -> None:
    engine = bundled_engine("metax-sgpu")
    # vmemory is in GiB: 100 is more than a 64 GiB card
    too_big = engine.admit(vendor_pod("big", {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "100"}))
    explanation = explain(engine, too_big)
    node = explanation.nodes[0]
    checks = {d.failed_check for r in node.requests for d in r.devices}
    assert checks == {"memory"} and not node.fits and node.reason == node.filter_reason
    # fill every card's compute, then a pod asking for cores fails at the cores check
    for i in range(4):
        place(engine, engine.admit(vendor_pod(f"hog{i}", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "100",
                                                          "metax-tech.com/vmemory": "1"})))
    wants_cores = engine.admit(vendor_pod("c", {"metax-tech.com/sgpu": "1", "metax-tech.com/vcore": "10",
                                                "metax-tech.com/vmemory": "1"}))
    node = explain(engine, wants_cores).nodes[0]
    assert {d.failed_check for r in node.requests for d in r.devices} <= {"cores", "exclusive"}
    assert not node.fits and node.reason == node.filter_reason


def test_ascend_cards_whose_memory_is_booked() -> None:
    engine = bundled_engine("ascend")
    limits = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "40000"}
    for i in range(8):
        place(engine, engine.admit(vendor_pod(f"p{i}", limits)))
    explanation = explain(engine, engine.admit(vendor_pod("late", limits)))
    node = explanation.nodes[0]
    devices = node.requests[0].devices
    assert len(devices) == 8 and {d.failed_check for d in devices} == {"memory"}
    assert node.reason == node.filter_reason == "8/8 CardInsufficientMemory"


# ------------------------------------------------------------------------------------------------ property

device = st.fixed_dictionaries({
    "devmem": st.sampled_from([4000, 8000, 24576]),
    "count": st.integers(1, 3),
    "health": st.booleans(),
    "type": st.sampled_from(["NVIDIA A10", "NVIDIA T4"]),
})
node_devices = st.lists(device, min_size=0, max_size=4)
cluster = st.lists(node_devices, min_size=1, max_size=16)
request = st.fixed_dictionaries({
    "gpus": st.integers(1, 3),
    "mem": st.sampled_from([None, 1000, 6000, 20000]),
    "cores": st.sampled_from([None, 0, 30, 100]),
    "type": st.sampled_from([None, "A10", "T4"]),
})
earlier = st.lists(st.tuples(st.sampled_from([1000, 6000]), st.sampled_from([0, 50, 100])), max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster, request, earlier)
def test_the_explanation_agrees_with_the_filter(nodes: list[list[dict[str, Any]]], req: dict[str, Any],
                                                 before: list[tuple[int, int]]) -> None:
    engine = nvidia_engine()
    for i, devs in enumerate(nodes):
        if devs:
            engine.upsert_node(nvidia_node(f"n{i:02d}", [{"id": f"g{i}-{j}", **d} for j, d in enumerate(devs)]))
        else:
            engine.upsert_node({"kind": "Node", "metadata": {"name": f"n{i:02d}"}})
    for k, (mem, cores) in enumerate(before):  # some usage first, where it fits
        pod = gpu_pod(f"e{k}", mem=mem, cores=cores)
        decision = engine.schedule(pod, limit=1)
        if decision.ok:
            engine.reserve(pod, decision)
    annotations = {keys.NVIDIA_USE_GPUTYPE: req["type"]} if req["type"] else {}
    pod = gpu_pod("p", gpus=req["gpus"], mem=req["mem"], cores=req["cores"], annotations=annotations)

    real = engine.schedule(pod)  # every node's verdict (the vectorised fit from 12 candidates on)
    explanation = explain(engine, pod)

    assert explanation.node == real.node
    for node in explanation.nodes:
        assert node.fits == (node.name in real.nodes), node.name
        assert node.reason == ("" if node.fits else real.failed[node.name]), node.name
        words = parse_reasons(node.reason)
        if node.fits or not words or not node.requests:
            continue
        # a standard fit walks every device when it fails: each device's first failing check is one count of the
        # node's reason, and the devices that passed are the AllocatedCardsInsufficientRequest
        devices = node.requests[0].devices
        per_device = Counter(next(iter(parse_reasons(d.reason))) if d.reason else
                             Reason.AllocatedCardsInsufficientRequest for d in devices)
        assert per_device == Counter(words), node.name
