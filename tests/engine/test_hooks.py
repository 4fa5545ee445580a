"""One test per hook: each ``hami_*`` hook is called by the engine where the contract says, with the
arguments it documents, and its answer changes the outcome."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from core_helpers import ACME_ALLOCATED, ACME_HANDSHAKE, acme, acme_device, make_node, make_pod, scheduled

from hami_core import hookimpl
from hami_core.plugins.errors import PluginError
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import (
    ContainerAllocation,
    DeviceBackend,
    DeviceInfo,
    FitResult,
    HealthReport,
    LockSpec,
    NodeScore,
    ResourceNames,
)


def test_hook_hami_device_backends(make_engine) -> None:
    engine = make_engine({"acme": {}})
    (backend,) = engine.backends.values()
    assert (backend.name, backend.vendor, backend.resource_names.count) == ("ACME", "acme", "acme.com/npu")
    assert backend.plugin  # stamped by the manager
    assert make_engine({"nvidia-only-elsewhere": {}}).backends == {}


def test_hook_hami_node_devices(engine) -> None:
    status = engine.upsert_node(make_node("n", [acme_device(0), acme_device(1, numa=1)]))
    assert status.devices == {"ACME": 2}
    assert [d.vendor for d in engine.nodes["n"].devices["ACME"][0:1] for d in [d.info]] == ["ACME"]


def test_hook_hami_node_health(make_engine) -> None:
    class Sick:
        @hookimpl(tryfirst=True)
        def hami_node_health(self, backend: DeviceBackend, node: Mapping[str, Any], devices, now, state) -> Any:
            state["calls"] = state.get("calls", 0) + 1
            return HealthReport(False, False, {ACME_HANDSHAKE: None}, reason=f"{len(devices)} devices look sick")

    engine = make_engine(None, Sick())
    status = engine.upsert_node(make_node("n", [acme_device(0)]))
    assert status.unhealthy == {"ACME": "1 devices look sick"} and status.devices == {}
    assert status.patch == {ACME_HANDSHAKE: None}


def test_hook_hami_node_removed(make_engine) -> None:
    removed: list[tuple[str, str]] = []

    class Watcher:
        @hookimpl
        def hami_node_removed(self, backend: DeviceBackend, node_name: str, state) -> None:
            removed.append((backend.name, node_name))

    engine = make_engine(None, Watcher())
    engine.upsert_node(make_node("n", [acme_device(0)]))
    engine.remove_node("n")
    engine.remove_node("n")
    assert removed == [("ACME", "n")]


def test_hook_hami_mutate_container(engine) -> None:
    admitted = engine.admit(make_pod("p", acme(1, 100)))
    assert admitted["spec"]["schedulerName"] == "hami-scheduler"


def test_hook_hami_container_request(engine) -> None:
    reqs = engine.requests(make_pod("p", acme(2, 300, 10, name="a"), {"name": "plain"}, init=[acme(1, 5, name="i")]))
    assert reqs.init_count == 1 and reqs.names == ("i", "a", "plain")
    assert [sorted(c) for c in reqs.containers] == [["ACME"], ["ACME"], []]
    assert (reqs.containers[1]["ACME"].nums, reqs.containers[1]["ACME"].memreq) == (2, 300)


def test_hook_hami_container_request_contract_violation(make_engine) -> None:
    class Liar:
        @hookimpl(tryfirst=True)
        def hami_container_request(self, backend: DeviceBackend) -> Any:
            return {"nums": 1}

    engine = make_engine(None, Liar())
    with pytest.raises(PluginError, match="expected a DeviceRequest"):
        engine.requests(make_pod("p", acme(1)))


def test_hook_hami_filter_nodes(make_engine) -> None:
    calls: list[int] = []

    class Veto:
        @hookimpl(wrapper=True)
        def hami_filter_nodes(self, candidates) -> Any:
            results = yield
            calls.append(len(candidates))
            return [FitResult.unschedulable("0/0 VetoedByPolicy") if c.node.name == "b" else r
                    for c, r in zip(candidates, results, strict=True)]

    engine = make_engine(None, Veto())
    for name in ("a", "b", "c"):
        engine.upsert_node(make_node(name, [acme_device(0)]))
    d = engine.schedule(make_pod("p", acme(1, 100)))
    assert calls == [3]  # one call for all candidate nodes
    assert d.failed == {"b": "0/0 VetoedByPolicy"} and set(d.nodes) == {"a", "c"}


def test_hook_hami_score_nodes(make_engine) -> None:
    class PreferC:
        @hookimpl
        def hami_score_nodes(self, candidates, policy) -> Any:
            return [NodeScore(1.0, neutral=True) if c.node.name == "c" else None for c in candidates]

    engine = make_engine(None, PreferC())
    for name in ("a", "b", "c"):
        engine.upsert_node(make_node(name, [acme_device(0)]))
    d = engine.schedule(make_pod("p", acme(1, 100)))
    assert d.node == "c" and d.scores["c"] == 10000.0
    spread = engine.schedule(make_pod("p", acme(1, 100), annotations={"hami.io/node-scheduler-policy": "spread"}))
    # neutral means "higher is better under any policy": negated under spread, so c still wins
    assert spread.node == "c" and spread.scores["c"] == -10000.0


def test_hook_hami_allocation_annotations(make_engine) -> None:
    class Extra:
        @hookimpl
        def hami_allocation_annotations(self, backend: DeviceBackend, devices) -> Any:
            return {"acme.com/profile": ",".join(d.uuid for c in devices for d in c)}

    engine = make_engine(None, Extra())
    engine.upsert_node(make_node("n", [acme_device(0)]))
    d = engine.schedule(make_pod("p", {"name": "cpu"}, acme(1, 100)))
    assert d.annotations["acme.com/profile"] == "dev0"
    assert d.annotations[ACME_ALLOCATED] == ";dev0,ACME,100,0:;"


def test_hook_hami_decode_allocation(engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    engine.upsert_pod(scheduled(make_pod("p", acme(1, 100)), "n", "dev0,ACME,100,7:;"))
    dev = engine.nodes["n"].devices["ACME"][0]
    assert (dev.used, dev.usedmem, dev.usedcores) == (1, 100, 7)


def test_hook_hami_node_lock(engine) -> None:
    (backend,) = engine.backends.values()
    app = engine.requests(make_pod("p", acme(1, 100)))
    assert engine.hook.hami_node_lock(backend=backend, pod={}, requests=app) == LockSpec("hami.io/mutex.lock")
    init_only = engine.requests(make_pod("p", {"name": "cpu"}, init=[acme(1, 100, name="i")]))
    assert engine.hook.hami_node_lock(backend=backend, pod={}, requests=init_only) is None


def test_hook_hami_pod_bound(make_engine) -> None:
    """The extender's bind calls the hook once the Binding exists, with the decision annotations on the pod."""
    from hami_core.cluster.memory import MemoryCluster
    from hami_core.scheduler.extender import Extender

    bound: list[tuple[str, str, bool]] = []

    class Audit:
        @hookimpl
        def hami_pod_bound(self, pod: Mapping[str, Any], node: str) -> None:
            bound.append((pod["metadata"]["name"], node, ACME_ALLOCATED in pod["metadata"]["annotations"]))

    engine = make_engine(None, Audit())
    pod = make_pod("p", acme(1, 100))
    pod["spec"]["schedulerName"] = "hami-scheduler"  # as the webhook admits it: the extender filters only its own pods
    cluster = MemoryCluster([make_node("n", [acme_device(0)])], [pod])
    for node in cluster.list_nodes():
        engine.upsert_node(node)
    extender = Extender(engine, cluster)
    assert extender.filter({"Pod": cluster.get_pod("default", "p"), "NodeNames": ["n"]})["NodeNames"] == ["n"]
    assert bound == []  # filtering alone binds nothing
    assert extender.bind({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": "n"}) == {"Error": ""}
    assert bound == [("p", "n", True)]
    assert cluster.get_pod("default", "p")["spec"]["nodeName"] == "n"


def test_hook_hami_discover_devices() -> None:
    backend = DeviceBackend("ACME", "acme", ResourceNames("acme.com/npu"))

    class Probe:
        @hookimpl
        def hami_discover_devices(self, backend: DeviceBackend) -> Any:
            return [DeviceInfo("dev0", count=4, devmem=1024, devcore=100, type="ACME-X1", health=True)]

    pm = get_plugin_manager(load_entrypoints=False, plugins=[Probe()])
    (dev,) = pm.hook.hami_discover_devices(backend=backend)
    assert (dev.id, dev.count, dev.devmem) == ("dev0", 4, 1024)


def test_hook_hami_allocate() -> None:
    backend = DeviceBackend("ACME", "acme", ResourceNames("acme.com/npu"))

    class Node:
        @hookimpl
        def hami_allocate(self, backend: DeviceBackend, container_index: int, devices) -> Any:
            return ContainerAllocation(env={"ACME_VISIBLE": ",".join(d.uuid for d in devices),
                                            "ACME_CTR": str(container_index)})

    from hami_core.plugins.types import ContainerDevice

    pm = get_plugin_manager(load_entrypoints=False, plugins=[Node()])
    out = pm.hook.hami_allocate(backend=backend, pod={}, container_index=1,
                                devices=[ContainerDevice("dev0", "ACME", 100, 0)])
    assert out.env == {"ACME_VISIBLE": "dev0", "ACME_CTR": "1"}


def test_hook_hami_prescore_nodes(make_engine) -> None:
    import numpy as np

    seen: list[tuple[int, tuple[float, ...]]] = []

    class PreferB:
        @hookimpl
        def hami_prescore_nodes(self, batch, policy) -> Any:
            seen.append((len(batch.nodes), tuple(batch.totals[:, 1])))  # column 1 = split count sum
            return np.array([100.0 if n.name == "b" else 0.0 for n in batch.nodes])

    engine = make_engine(None, PreferB())
    for name in ("a", "b", "c"):
        engine.upsert_node(make_node(name, [acme_device(0)]))
    d = engine.schedule(make_pod("p", acme(1, 100)), limit=1)
    assert d.node == "b" and d.nodes == ("b",) and d.scores == {"b": 100.0}
    assert seen == [(3, (10.0, 10.0, 10.0))]


def test_hook_hami_scheduling_policies(make_engine) -> None:
    from hami_core.plugins.types import PolicyInfo

    class Fgd:
        @hookimpl
        def hami_scheduling_policies(self) -> Any:
            return [PolicyInfo("fgd", "node", "fragmentation gradient descent")]

    names = {(p.kind, p.name) for p in make_engine(None, Fgd()).policies()}
    assert {("node", "binpack"), ("node", "spread"), ("gpu", "mutex"), ("node", "fgd")} <= names
    with pytest.raises(PluginError, match="PolicyInfo"):
        PolicyInfo("a/b", "node")


def test_vendor_placement_scores_only_force_full_evaluation_for_their_pods(make_engine) -> None:
    """A vendor's hami_score_nodes makes its own pods fit every node; other pods stay best-first."""
    calls: list[int] = []

    class OtherVendor:
        @hookimpl
        def hami_device_backends(self, config) -> Any:
            return [DeviceBackend("OTHER", "other", ResourceNames("other.com/x"))]

        @hookimpl
        def hami_score_nodes(self, candidates) -> Any:
            calls.append(len(candidates))
            return None

    engine = make_engine(None, OtherVendor())
    for name in ("a", "b", "c"):
        engine.upsert_node(make_node(name, [acme_device(0)]))
    d = engine.schedule(make_pod("p", acme(1, 100)), limit=1)
    assert d.nodes == (d.node,) and calls == []  # Acme pod: best-first, OTHER's scorer not consulted
