"""Fuzz every vendor plugin's decoders through the engine (the path the scheduler takes): node registration
annotations, labels and capacities, pod allocation annotations, container resource quantities and pod
annotations. Each input yields a value or a :class:`~hami_core.plugins.errors.HamiError`, never another
exception; an allocation that cannot be decoded quarantines its node."""

from __future__ import annotations

from typing import Any

import pytest
from fuzz_helpers import all_vendor_engine, annotation_keys, annotation_values, quantity_values, resource_names
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.engine.facade import Engine, NodeStatus
from hami_core.plugins.errors import HamiError
from hami_core.wire import keys

ENGINE = all_vendor_engine()
BACKENDS = sorted(ENGINE.backends)
#: One test per vendor plugin; each example draws one of its backends (Ascend alone has seven alike).
VENDORS = sorted({b.vendor for b in ENGINE.backends.values()})
NODE = "fuzz-node"
_SETTINGS = settings(max_examples=15, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


def _declared(backend: str) -> list[str]:
    b = ENGINE.backends[backend]
    return [k for k in (b.register_annotation, b.handshake_annotation, b.to_allocate_annotation,
                        b.allocated_annotation, b.use_uuid_annotation, b.nouse_uuid_annotation,
                        b.use_type_annotation, b.nouse_type_annotation, b.lock_annotation) if k]


@st.composite
def _annotations(draw: st.DrawFn, backend: str) -> dict[str, str]:
    """Random values for this backend's declared keys (each present or not) and a few keys of any vendor."""
    out = {k: draw(annotation_values) for k in _declared(backend) if draw(st.booleans())}
    out.update(draw(st.dictionaries(st.sampled_from(annotation_keys()), annotation_values, max_size=4)))
    return out


def _request_pod(backend: str, name: str = "probe") -> dict[str, Any]:
    limits = {ENGINE.backends[backend].resource_names.count: "1"}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}, "status": {"phase": "Pending"}}


def _tolerated(call: Any, *args: Any, **kwargs: Any) -> Any:
    """Run a decoder path; a HamiError is a clear, typed refusal and fine. Anything else fails the test."""
    try:
        return call(*args, **kwargs)
    except HamiError as exc:
        assert str(exc).strip(), f"{type(exc).__name__} without a message"
        return exc


@pytest.mark.parametrize("vendor", VENDORS)
@_SETTINGS
@given(data=st.data())
def test_node_registration_yields_devices_or_a_clear_error(vendor: str, data: st.DataObject) -> None:
    backend = data.draw(st.sampled_from([n for n in BACKENDS if ENGINE.backends[n].vendor == vendor]))
    engine = Engine(ENGINE.config, plugins=ENGINE.plugins, clock=ENGINE.clock)
    node = {"kind": "Node", "metadata": {
        "name": NODE, "annotations": data.draw(_annotations(backend)),
        "labels": data.draw(st.dictionaries(st.sampled_from(annotation_keys()) | st.text(max_size=10),
                                            annotation_values, max_size=3))},
        "status": {field: data.draw(st.dictionaries(st.sampled_from(resource_names()), quantity_values, max_size=3))
                   for field in ("capacity", "allocatable")}}
    status = _tolerated(engine.upsert_node, node)
    if isinstance(status, NodeStatus):
        # whatever was decoded must be schedulable against without crashing the fit or the scores
        decision = _tolerated(engine.schedule, _request_pod(backend), [NODE])
        if not isinstance(decision, HamiError) and decision.ok:
            _tolerated(engine.reserve, _request_pod(backend), decision)


@pytest.mark.parametrize("vendor", VENDORS)
@_SETTINGS
@given(data=st.data())
def test_pod_allocation_annotations_decode_or_quarantine(vendor: str, data: st.DataObject) -> None:
    backend = data.draw(st.sampled_from([n for n in BACKENDS if ENGINE.backends[n].vendor == vendor]))
    engine = Engine(ENGINE.config, plugins=ENGINE.plugins, clock=ENGINE.clock)
    annos = data.draw(_annotations(backend))
    annos[keys.VGPU_NODE] = NODE
    pod = _request_pod(backend, "victim")
    pod["metadata"]["annotations"] = annos
    pod["spec"]["nodeName"] = NODE
    pod["status"]["phase"] = data.draw(st.sampled_from(["Pending", "Running"]))
    engine.upsert_pod(pod)  # never raises: undecodable allocations quarantine the node
    state = engine.nodes.get(NODE)
    if state is not None and state.quarantine:
        assert all(NODE in r or "victim" in r for r in state.quarantine.values()), state.quarantine
    engine.remove_pod(pod)
    assert state is None or not state.quarantine


@pytest.mark.parametrize("vendor", VENDORS)
@_SETTINGS
@given(data=st.data())
def test_container_requests_and_admission_decode_or_refuse(vendor: str, data: st.DataObject) -> None:
    backend = data.draw(st.sampled_from([n for n in BACKENDS if ENGINE.backends[n].vendor == vendor]))
    b = ENGINE.backends[backend]
    names = [n for n in resource_names() if n.split("/", 1)[0] == b.resource_names.count.split("/", 1)[0]]
    limits = data.draw(st.dictionaries(st.sampled_from(names), quantity_values, min_size=1, max_size=4))
    requests = data.draw(st.dictionaries(st.sampled_from(names), quantity_values, max_size=2))
    pod = _request_pod(backend, "req")
    pod["metadata"]["annotations"] = data.draw(_annotations(backend))
    pod["spec"]["containers"][0]["resources"] = {"limits": limits, "requests": requests}
    if data.draw(st.booleans()):
        pod["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": dict(limits)}}]
    _tolerated(ENGINE.requests, pod)
    _tolerated(ENGINE.admit, pod)
    _tolerated(ENGINE.schedule, pod, [])


# Regression: vendors that build their devices from a node capacity built one object per unit, so a capacity of
# 10**15 (a bad status, a typo) hung the scheduler's node feed and ate its memory. Found by the fuzz test above.
@pytest.mark.parametrize(("backend", "resource"), [
    ("Metax-GPU", "metax-tech.com/gpu"), ("GCU", "enflame.com/gcu"), ("kunlun", "kunlunxin.com/xpu"),
    ("MLU", "cambricon.com/mlu.smlu.vcore"), ("Mthreads", "mthreads.com/sgpu-core")])
def test_absurd_capacity_is_refused_not_expanded(backend: str, resource: str) -> None:
    engine = Engine(ENGINE.config, plugins=ENGINE.plugins, clock=ENGINE.clock)
    capacity = {resource: "1000000000", "cambricon.com/mlu.smlu.vmemory": "1", "mthreads.com/sgpu-memory": "1"}
    status = engine.upsert_node({"kind": "Node", "metadata": {"name": NODE}, "status": {"capacity": capacity}})
    assert backend not in status.devices
    assert f"status.capacity[{resource}]" in status.errors[backend]
    assert "more than the 1024 a node can hold" in status.errors[backend]
    # a real count still registers
    capacity[resource] = {"MLU": "800", "Mthreads": "128"}.get(backend, "8")
    status = engine.upsert_node({"kind": "Node", "metadata": {"name": NODE}, "status": {"capacity": capacity}})
    assert status.devices[backend] == 8
