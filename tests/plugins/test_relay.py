"""The per-backend hook relay: a backend object's hooks run for that backend alone; wrappers of cross-cutting
plugins still see every backend; a plugin that routes by itself keeps working, with a deprecation warning."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from hami_core import hookimpl
from hami_core.engine.facade import Engine
from hami_core.plugins import (
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    FitResult,
    Mutation,
    NodeScore,
    ResourceNames,
    ScoreCandidate,
    StandardBackend,
)
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.relay import RoutedHooks, is_backend_object, warn_legacy
from hami_core.testing import factories
from hami_core.wire.nodes import encode_node_devices_json as encode_node_devices

T0 = 1_700_000_000.0


@dataclass(frozen=True, slots=True)
class Npu(StandardBackend):
    """A standard backend that counts the calls of two of its hooks (in its own state)."""

    calls: list[str] = field(default_factory=list, compare=False, repr=False)
    default_cores: ClassVar[int] = 0

    # an override without @hookimpl: the relay treats every hami_* method of a backend object as its hook
    def hami_container_request(self, container: Mapping[str, Any]) -> DeviceRequest | None:
        self.calls.append(f"request:{container.get('name')}")
        return StandardBackend.hami_container_request(self, container)

    def hami_node_devices(self, node: Mapping[str, Any]) -> Sequence[DeviceInfo]:
        self.calls.append(f"devices:{node['metadata']['name']}")
        return StandardBackend.hami_node_devices(self, node)


@dataclass(frozen=True, slots=True)
class ScoredNpu(Npu):
    def hami_score_nodes(self, candidates: Sequence[ScoreCandidate]) -> list[NodeScore | None]:
        self.calls.append(f"score:{len(candidates)}")
        return [NodeScore(1.0) for _ in candidates]


def _npu(cls: type[Npu], name: str) -> Npu:
    lower = name.lower()
    return cls(name=name, vendor=lower, resource_names=ResourceNames(f"{lower}.example.com/npu",
                                                                     f"{lower}.example.com/npumem"),
               register_annotation=f"hami.io/node-{lower}-register",
               to_allocate_annotation=f"hami.io/{lower}-devices-to-allocate",
               allocated_annotation=f"hami.io/{lower}-devices-allocated", lock_annotation="hami.io/mutex.lock")


class Declares:
    """A vendor plugin that only declares backend objects."""

    def __init__(self, name: str, *backends: DeviceBackend) -> None:
        self.__name__ = name
        self.backends = backends

    @hookimpl
    def hami_device_backends(self) -> Sequence[DeviceBackend]:
        return self.backends


def _node(name: str, *backends: Npu) -> dict[str, Any]:
    annotations = {b.register_annotation: encode_node_devices(
        [DeviceInfo(id=f"{name}-{b.name}-0", count=4, devmem=16000, devcore=100, type=b.name, health=True)])
        for b in backends if b.register_annotation}
    return factories.node(name, annotations=annotations)


def _engine(*plugins: object) -> Engine:
    return Engine({}, plugins=get_plugin_manager(load_entrypoints=False, plugins=plugins), clock=lambda: T0)


def _pod(backend: Npu, name: str = "p") -> dict[str, Any]:
    return factories.pod(factories.device_container(backend.resource_names, 1, 1000, name=name), name=name)


def test_a_backend_objects_hooks_run_for_it_alone() -> None:
    a, b = _npu(Npu, "AAA"), _npu(Npu, "BBB")
    engine = _engine(Declares("vendor-a", a), Declares("vendor-b", b))
    engine.upsert_node(_node("n1", a, b))
    ea, eb = engine.backends["AAA"], engine.backends["BBB"]
    assert is_backend_object(ea) and ea.plugin == "vendor-a"
    assert ea.calls == ["devices:n1"] and eb.calls == ["devices:n1"]

    decision = engine.schedule(_pod(a, "c"))
    assert decision.node == "n1"
    assert [d.uuid for d in decision.devices["AAA"][0]] == ["n1-AAA-0"]
    assert ea.calls == ["devices:n1", "request:c"] and eb.calls == ["devices:n1", "request:c"]
    # the standard codec wrote the allocation under AAA's keys only
    assert set(decision.annotations) >= {"hami.io/aaa-devices-to-allocate", "hami.io/aaa-devices-allocated"}
    assert not any(k.startswith("hami.io/bbb") for k in decision.annotations)


def test_a_backend_score_runs_only_for_pods_requesting_it() -> None:
    a, b = _npu(ScoredNpu, "AAA"), _npu(Npu, "BBB")
    engine = _engine(Declares("vendor-a", a), Declares("vendor-b", b))
    engine.upsert_node(_node("n1", a, b))
    engine.upsert_node(_node("n2", a, b))
    ea = engine.backends["AAA"]
    engine.schedule(_pod(b), limit=1)
    assert not [c for c in ea.calls if c.startswith("score")]  # BBB's pod: AAA's score is not asked
    engine.schedule(_pod(a), limit=1)
    assert [c for c in ea.calls if c.startswith("score")] == ["score:2"]  # every feasible node scored


def test_cross_cutting_wrappers_still_see_every_backend() -> None:
    a = _npu(Npu, "AAA")
    seen: list[str] = []

    class Veto:
        __name__ = "veto"

        @hookimpl(wrapper=True)
        def hami_filter_nodes(self, backend: DeviceBackend, candidates: Sequence[Any]) -> Any:
            results = yield
            seen.append(backend.name)
            return [r if c.node.name != "n1" else FitResult.unschedulable("vetoed")
                    for r, c in zip(results, candidates, strict=True)]

    engine = _engine(Declares("vendor-a", a), Veto())
    engine.upsert_node(_node("n1", a))
    engine.upsert_node(_node("n2", a))
    decision = engine.schedule(_pod(a))
    assert seen == ["AAA"] and decision.node == "n2"


def test_a_plain_backend_object_gets_the_defaults_for_hooks_it_lacks() -> None:
    @dataclass(frozen=True, slots=True)
    class Minimal(DeviceBackend):
        """Implements admission only: codec, lock and health come from the built-ins."""

        def hami_mutate_container(self, container: Mapping[str, Any]) -> Mutation:
            return Mutation(True)

    backend = Minimal(name="MIN", vendor="min", resource_names=ResourceNames("min.example.com/x"),
                      allocated_annotation="hami.io/min-allocated")
    pm = get_plugin_manager(load_entrypoints=False, plugins=[Declares("min", backend)])
    (registered,) = pm.backends({})
    hooks = RoutedHooks(pm, [registered])
    assert hooks.hami_mutate_container(backend=registered, pod={}, container={}) == Mutation(True)
    pod = {"metadata": {"annotations": {"hami.io/min-allocated": "u1,MIN,10,0:;"}}}
    decoded = hooks.hami_decode_allocation(backend=registered, pod=pod)
    assert [(d.uuid, d.usedmem) for d in decoded[0]] == [("u1", 10)]


def test_a_legacy_routing_plugin_works_and_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("hami_core.plugins.relay._warned", set())
    legacy = DeviceBackend(name="OLD", vendor="old", resource_names=ResourceNames("old.example.com/x"))

    class Legacy:
        __name__ = "legacy-vendor"

        @hookimpl
        def hami_device_backends(self) -> list[DeviceBackend]:
            return [legacy]

        @hookimpl
        def hami_container_request(self, backend: DeviceBackend, container: Mapping[str, Any]) -> Any:
            if backend.name != "OLD":
                return None
            return DeviceRequest("OLD", 1, 0, 100, 0) if container.get("name") == "uses" else None

    with pytest.warns(DeprecationWarning, match=r"legacy-vendor.*routes per-backend hooks itself.*"
                                                r"hami_container_request.*StandardBackend"):
        pm = get_plugin_manager(load_entrypoints=False, plugins=[Legacy()])
        (registered,) = pm.backends({})
    hooks = RoutedHooks(pm, [registered])
    assert hooks.hami_container_request(backend=registered, pod={}, container={"name": "uses"}) == \
        DeviceRequest("OLD", 1, 0, 100, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pm.backends({})  # once per process and plugin


def test_warn_legacy_is_silent_for_backend_objects() -> None:
    a = _npu(Npu, "AAA")
    pm = get_plugin_manager(load_entrypoints=False, plugins=[Declares("vendor-a", a)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_legacy("vendor-a", "'vendor-a'", pm, [a])
