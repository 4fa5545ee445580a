"""Mutation fuzz of real allocation annotations: schedule a pod for real, then damage the annotations the
decision wrote (flip, drop and insert characters) and feed the pod back as the watch would. The engine either
books a decodable allocation or quarantines the node (no new pods there); it never raises, and the booking
disappears with the pod."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fuzz_helpers import all_vendor_engine
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sched_helpers import nvidia_node

from hami_core.engine.facade import Engine
from hami_core.testing.factories import container, node, pod
from hami_core.wire import keys

_SETTINGS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
ENGINE = all_vendor_engine()

#: vendor -> (a node with two devices, the limits of a pod that fits on it)
CASES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "NVIDIA": (nvidia_node("n"), {"nvidia.com/gpu": 2, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 10}),
    "GCU": (node("n", allocatable={"enflame.com/gcu": 2}), {"enflame.com/gcu": 1}),
    "kunlun": (node("n", allocatable={"kunlunxin.com/xpu": 8}), {"kunlunxin.com/xpu": 1}),
    "Metax-GPU": (node("n", allocatable={"metax-tech.com/gpu": 2}), {"metax-tech.com/gpu": 1}),
    "MLU": (node("n", allocatable={"cambricon.com/mlu.smlu.vcore": 200, "cambricon.com/mlu.smlu.vmemory": 384}),
            {"cambricon.com/vmlu": 1, "cambricon.com/mlu.smlu.vmemory": 20, "cambricon.com/mlu.smlu.vcore": 10}),
}


def _scheduled(backend: str) -> tuple[Engine, dict[str, Any]]:
    engine = Engine(ENGINE.config, plugins=ENGINE.plugins, clock=ENGINE.clock)
    node_obj, limits = CASES[backend]
    status = engine.upsert_node(json.loads(json.dumps(node_obj)))
    assert status.devices.get(backend), status
    p = pod(container(limits=limits), name="victim")
    decision = engine.schedule(p, ["n"])
    assert decision.ok, decision
    p["metadata"].setdefault("annotations", {}).update(decision.annotations)
    p["metadata"]["annotations"][keys.VGPU_NODE] = "n"
    p["spec"]["nodeName"] = "n"
    p["status"] = {"phase": "Running"}
    return engine, p


def _mutate(text: str, data: st.DataObject) -> str:
    chars = list(text)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "drop", "insert"]))
        i = data.draw(st.integers(0, max(len(chars) - 1, 0)))
        junk = data.draw(st.sampled_from([",", ":", ";", "-", "0", "9", "x", " ", "", "-1", "99999999999"]))
        if op == "insert" or not chars:
            chars.insert(i, junk)
        elif op == "drop":
            del chars[i]
        else:
            chars[i] = junk
    return "".join(chars)


@pytest.mark.parametrize("backend", sorted(CASES))
@_SETTINGS
@given(data=st.data())
def test_damaged_allocation_is_booked_or_quarantines(backend: str, data: st.DataObject) -> None:
    engine, victim = _scheduled(backend)
    annos = victim["metadata"]["annotations"]
    damaged = [k for k in annos if k not in (keys.VGPU_NODE,) and data.draw(st.booleans())] or [
        next(k for k in annos if k != keys.VGPU_NODE)]
    for key in damaged:
        annos[key] = _mutate(annos[key], data)
    engine.upsert_pod(victim)
    state = engine.nodes["n"]
    event("quarantined" if state.quarantine else "booked")
    # a booked allocation never gives memory or slots back (a negative amount would let the next pod over-allocate);
    # negative cores are HAMi's own int32 arithmetic, booked as HAMi books them (hami-nvidia's test_fit.py)
    assert all(u.used >= 0 and u.usedmem >= 0 for u in state.by_uuid.values())
    if state.quarantine:
        assert "victim" in next(iter(state.quarantine.values()))
        assert not engine.schedule(pod(container(limits=CASES[backend][1]), name="next"), ["n"]).ok
    engine.remove_pod(victim)
    assert not state.quarantine
    # with the damaged pod gone, the node is whole again: the same pod fits as it did at first
    assert engine.schedule(pod(container(limits=CASES[backend][1]), name="again"), ["n"]).ok
