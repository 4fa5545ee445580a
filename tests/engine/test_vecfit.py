"""The vectorised standard fit (``hami_core.engine.vecfit``) gives the per-node path's verdicts, exactly.

Two differential properties over random clusters and requests:

* unit: for random device lists, :func:`vecfit.device_order` orders each row as ``sort_devices`` does and
  :func:`vecfit.fit_rows` gives ``standard_fit``'s verdict: the same chosen devices in the same order, or the same
  reason text;
* engine: ``Engine.schedule`` with the vectorised path and with the per-node path (``VECTOR_MIN_NODES`` out of
  reach) decide the same for every pod: node, ranking, scores, devices, annotations, and every failed node's
  reason in the same order (the extender's ``FailedNodes`` map is written in that order).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest
from core_helpers import T0, make_node, make_pod, scheduled
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hami_core import hookimpl
from hami_core.engine import cycle as cycle_module
from hami_core.engine import vecfit
from hami_core.engine.facade import Engine
from hami_core.engine.policy import sort_devices, split_gpu_policy
from hami_core.plugins.fit import standard_fit
from hami_core.plugins.helpers import split_list
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.standard import StandardBackend
from hami_core.plugins.types import (
    MEM_PERCENTAGE_UNSET,
    DeviceBackend,
    DeviceInfo,
    DeviceRequest,
    DeviceUsage,
    FitResult,
    GpuPolicy,
    QuotaView,
    ResourceNames,
)
from hami_core.wire import keys

REGISTER = "vec.example/node-register"
ALLOCATED = "hami.io/vec-devices-allocated"
TO_ALLOCATE = "hami.io/vec-devices-to-allocate"
COUNT, MEM, PCT, CORES = "vec.example/npu", "vec.example/npu-mem", "vec.example/npu-mem-pct", "vec.example/npu-cores"
USE_UUID = "vec.example/use-uuid"
WORD = "VEC"
# a second plain backend, so that pods may request two in one container or across containers
WORD2, REGISTER2, ALLOCATED2 = "VEB", "veb.example/node-register", "hami.io/veb-devices-allocated"
COUNT2, MEM2, CORES2 = "veb.example/npu", "veb.example/npu-mem", "veb.example/npu-cores"
GPU_POLICIES = ["binpack", "spread", "mutex", "numa", "binpack,numa", "numa,spread", "spread,numa,binpack",
                "topology-aware", "fgd", "binpack,mutex", "spread,binpack"]


# ----------------------------------------------------------------------------------------------- backends
@dataclass(frozen=True, slots=True)
class VecBackend(StandardBackend):
    """A backend with nothing but HAMi's generic rules: every plain request takes the vectorised fit."""


@dataclass(frozen=True, slots=True)
class CordonBackend(StandardBackend):
    """A backend whose fit also honours ``hami.io/device-cordon`` (as NVIDIA's does), declaring it for the core."""

    vector_fit: ClassVar[bool | None] = True
    exact_fit_annotations: ClassVar[frozenset[str]] = frozenset({keys.DEVICE_CORDON})

    def hami_filter_nodes(self, pod: Mapping[str, Any], request: DeviceRequest, candidates: Any,
                          policy: GpuPolicy, quota: QuotaView | None) -> list[FitResult]:
        options = self.fit_options(pod, request, policy)
        out = []
        for cand in candidates:
            raw = cand.node.annotations.get(keys.DEVICE_CORDON)
            out.append(standard_fit(cand.devices, request, cordoned=frozenset(split_list(raw)) if raw else (),
                                    **options))
        return out


def _backend(cls: type[StandardBackend]) -> StandardBackend:
    return cls(name=WORD, vendor="vec", resource_names=ResourceNames(COUNT, MEM, PCT, CORES),
               register_annotation=REGISTER, to_allocate_annotation=TO_ALLOCATE, allocated_annotation=ALLOCATED,
               use_uuid_annotation=USE_UUID, lock_annotation="hami.io/mutex.lock", standard_capacity=True)


class VecPlugin:
    __name__ = "vec"

    def __init__(self, backend: StandardBackend) -> None:
        self.backend = backend

    @hookimpl
    def hami_device_backends(self) -> list[DeviceBackend]:
        return [self.backend]


def _engine(cls: type[StandardBackend] = VecBackend, *, second: bool = False) -> Engine:
    plugins: list[object] = [VecPlugin(_backend(cls))]
    if second:
        other = VecPlugin(VecBackend(name=WORD2, vendor="veb", resource_names=ResourceNames(COUNT2, MEM2, "", CORES2),
                                     register_annotation=REGISTER2, allocated_annotation=ALLOCATED2,
                                     to_allocate_annotation="hami.io/veb-devices-to-allocate"))
        other.__name__ = "veb"
        plugins.append(other)
    pm = get_plugin_manager(load_entrypoints=False, plugins=plugins)
    return Engine({}, plugins=pm, clock=lambda: T0)


# ----------------------------------------------------------------------------------------------- unit property
@st.composite
def devices(draw: st.DrawFn) -> list[DeviceUsage]:
    out = []
    for i in range(draw(st.integers(0, 6))):
        devmem = draw(st.sampled_from([0, 1, 100, 8000, 16384]))
        info = DeviceInfo(id=f"d{i}", index=draw(st.integers(0, 7)), count=draw(st.integers(0, 3)), devmem=devmem,
                          devcore=draw(st.sampled_from([0, 1, 50, 100, 200])), type=draw(
                              st.sampled_from(["VEC-A", "VEC-B", WORD])), numa=draw(st.integers(-1, 2)),
                          health=draw(st.booleans() | st.just(True)))
        usage = DeviceUsage(info, used=draw(st.integers(0, 4)), usedmem=draw(st.integers(0, 20000)),
                            usedcores=draw(st.sampled_from([0, 20, 50, 100, 200])))
        out.append(usage)
    return out


requests = st.builds(DeviceRequest, st.just(WORD), st.integers(1, 4), st.sampled_from([0, 1, 4000, 8000, 9000]),
                     st.sampled_from([MEM_PERCENTAGE_UNSET, 0, 1, 50, 100]), st.sampled_from([0, 1, 20, 100, 150]))


@st.composite
def policies(draw: st.DrawFn) -> GpuPolicy:
    gpu = draw(st.sampled_from(GPU_POLICIES))
    weights = draw(st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)).filter(any))
    return GpuPolicy(node="binpack", gpu=gpu, gpu_tokens=split_gpu_policy(gpu), weights=weights)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(devices(), min_size=1, max_size=6), request=requests, policy=policies(),
       other=st.lists(st.builds(DeviceRequest, st.sampled_from(["VEC-A", WORD, "OTHER"]), st.integers(1, 2),
                                st.sampled_from([0, 3000]), st.sampled_from([MEM_PERCENTAGE_UNSET, 0, 30]),
                                st.sampled_from([0, 40])), max_size=2))
def test_rows_match_the_per_node_fit(rows: list[list[DeviceUsage]], request: DeviceRequest, policy: GpuPolicy,
                                     other: list[DeviceRequest]) -> None:
    """Order, chosen devices (and their order) and reason texts equal ``sort_devices`` + ``standard_fit``'s."""
    assume(vecfit.orderable(policy))  # a policy package's token ("fgd") is ordered per node
    container = [request, *other]  # other requests of the same container: a type-named one changes the scores
    grid = vecfit.DeviceGrid(WORD, len(rows))
    for r, devs in enumerate(rows):
        grid.set_row(r, devs, mig=False)
    fit_rows = np.array([r for r, devs in enumerate(rows) if len(devs) >= request.nums], dtype=np.intp)
    order = vecfit.device_order(grid, fit_rows, np.ones(len(fit_rows), dtype=np.int64), policy, container)
    again = vecfit.device_order(grid, fit_rows, np.ones(len(fit_rows), dtype=np.int64), policy, container)
    assert (order == again).all()  # from the cache, when it may be cached
    verdicts = vecfit.fit_rows(grid, fit_rows, order, request, mutex=policy.has("mutex"))
    chosen = iter(verdicts.chosen.tolist())
    reasons = iter(verdicts.reasons)
    for k, r in enumerate(fit_rows.tolist()):
        devs = rows[r]
        expected = sort_devices(devs, container, policy)
        places = order[k][:len(devs)]
        assert [devs[j].id for j in np.argsort(places, kind="stable")] == [d.id for d in expected]
        result = standard_fit(expected, request, mutex=policy.has("mutex"))
        assert bool(verdicts.ok[k]) == result.ok
        if result.ok:
            assert vecfit.chosen_devices(devs, next(chosen), request) == result.devices
        else:
            assert next(reasons) == result.reason
    assert next(chosen, None) is None and next(reasons, None) is None


def test_large_values_are_left_to_the_per_node_path() -> None:
    grid = vecfit.DeviceGrid(WORD, 2)
    small = DeviceUsage(DeviceInfo(id="a", index=0, count=1, devmem=100, devcore=100, type="VEC-A"))
    huge = DeviceUsage(DeviceInfo(id="b", index=0, count=1, devmem=vecfit.EXACT_LIMIT, devcore=100, type="VEC-A"))
    grid.set_row(0, [small], mig=False)
    grid.set_row(1, [huge], mig=False)
    assert grid.exact.tolist() == [False, True]
    grid.set_row(0, [small], mig=True)
    assert grid.exact[0]
    odd = DeviceUsage(small.info)
    odd.usedmem = 0.5  # type: ignore[assignment]  # not an integer: Python's arithmetic, per node
    grid.set_row(0, [odd], mig=False)
    assert grid.exact[0]
    odd.usedmem = 1 << 64
    grid.set_row(0, [odd], mig=False)
    assert grid.exact[0]


# ----------------------------------------------------------------------------------------------- engine property
def _devices(rng: random.Random, n: int, word: str) -> list[dict[str, Any]]:
    return [{"id": f"{word}-n{n}-g{g}", "index": rng.choice([g, g, 0]), "count": rng.choice([0, 1, 2, 10]),
             "devmem": rng.choice([0, 1000, 4000, 8000]), "devcore": rng.choice([0, 50, 100, 100]),
             "type": rng.choice([f"{word}-A", f"{word}-B", word]), "numa": rng.choice([0, 1]),
             "health": rng.random() > 0.1, "mode": "mig" if rng.random() < 0.05 else "hami-core"}
            for g in range(rng.choice([0, 1, 2, 3, 4, 4, 6]))]


def _cluster(engine: Engine, rng: random.Random, nodes: int, *, cordons: bool = False, second: bool = False) -> None:
    for n in range(nodes):
        name = f"node-{n:02d}"
        devs = _devices(rng, n, WORD)
        annotations = {}
        if cordons and devs and rng.random() < 0.3:
            annotations[keys.DEVICE_CORDON] = devs[0]["id"]
        more = _devices(rng, n, WORD2) if second else []
        if more:
            annotations[REGISTER2] = json.dumps(more)
        engine.upsert_node(make_node(name, devs, annotations=annotations, register=REGISTER,
                                     allocatable={COUNT: "10", COUNT2: "10"}))
        for word, key, group in ((WORD, ALLOCATED, devs), (WORD2, ALLOCATED2, more)):
            for g, dev in enumerate(group):
                for k in range(rng.choice([0, 0, 1, 2])):
                    mem, cores = rng.randint(0, max(dev["devmem"], 1)), rng.choice([0, 10, 30, 50, 100])
                    engine.upsert_pod(scheduled(make_pod(f"run-{word}-{n}-{g}-{k}"), name,
                                                f"{dev['id']},{word},{mem},{cores}:;", key=key))


def _container(rng: random.Random, name: str, second: bool = False) -> dict[str, Any]:
    limits: dict[str, str] = {}
    words = rng.choice([(WORD,), (WORD2,), (WORD, WORD2)]) if second else (WORD,)
    for count, memory, pct_name, core_name in [(COUNT, MEM, PCT, CORES) if w == WORD else (COUNT2, MEM2, "", CORES2)
                                               for w in words]:
        limits[count] = str(rng.choice([1, 1, 1, 2, 3]))
        mem = rng.choice([0, 0, 100, 900, 3000, 9000])
        if mem:
            limits[memory] = str(mem)
        pct = rng.choice([None, None, 30, 100])
        if pct is not None and pct_name:
            limits[pct_name] = str(pct)
        cores = rng.choice([None, 0, 20, 60, 100])
        if cores is not None:
            limits[core_name] = str(cores)
    return {"name": name, "resources": {"limits": limits}}


def _pod(rng: random.Random, i: int, second: bool = False) -> dict[str, Any]:
    annotations = {keys.NODE_SCHEDULER_POLICY: rng.choice(["binpack", "spread"]),
                   keys.GPU_SCHEDULER_POLICY: rng.choice(GPU_POLICIES)}
    if rng.random() < 0.3:
        w = [rng.randint(0, 4) for _ in range(3)]
        w[rng.randrange(3)] += 1
        annotations[keys.DEVICE_SCORING_WEIGHTS] = f"slot={w[0]}, core={w[1]}, memory={w[2]}"
    if rng.random() < 0.1:
        annotations[USE_UUID] = "n0-g0,n1-g1"  # a selection: the per-node path
    containers = [_container(rng, f"c{j}", second) for j in range(rng.choice([1, 1, 1, 2, 3]))]
    init = [_container(rng, f"i{j}", second) for j in range(rng.choice([0, 0, 0, 1]))]
    if rng.random() < 0.1:
        containers.append({"name": "plain"})
    return make_pod(f"p{i}", *containers, init=init, annotations=annotations)


def _decide(engine: Engine, pod: Mapping[str, Any], names: list[str] | None, limit: int | None,
            vector: bool) -> tuple[Any, list[tuple[str, str]]]:
    saved = cycle_module.VECTOR_MIN_NODES
    cycle_module.VECTOR_MIN_NODES = 1 if vector else 10**9
    try:
        decision = engine.schedule(pod, names, limit=limit)
    finally:
        cycle_module.VECTOR_MIN_NODES = saved
    return decision, list(decision.failed.items())


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the vectorised fits (the property is void if none ran)."""
    calls = [0]
    real = vecfit.fit_rows

    def spy(*args: Any, **kwargs: Any) -> vecfit.VectorVerdicts:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(vecfit, "fit_rows", spy)
    yield calls


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 100_000), cordons=st.booleans(), second=st.booleans())
def test_schedule_matches_the_per_node_path(counted: list[int], seed: int, cordons: bool, second: bool) -> None:
    """Two engines built alike, one fitting vectorised and one per node, get the same calls and must answer alike
    (two engines, as an engine's answers also depend on its caches: a cached reason is listed before new ones)."""
    nodes = random.Random(seed).randint(1, 14)
    engines = []
    for _ in range(2):
        engine = _engine(CordonBackend if cordons else VecBackend, second=second)
        _cluster(engine, random.Random(seed), nodes, cordons=cordons, second=second)
        engines.append(engine)
    fast_engine, slow_engine = engines
    rng = random.Random(seed + 1)
    for i in range(8):
        pod = _pod(rng, i, second)
        names = None
        if rng.random() < 0.3:
            names = [*rng.sample([f"node-{n:02d}" for n in range(nodes)], rng.randint(0, nodes)), "ghost"]
        limit = rng.choice([None, None, 1, 3])
        fast, fast_failed = _decide(fast_engine, pod, names, limit, vector=True)
        slow, slow_failed = _decide(slow_engine, pod, names, limit, vector=False)
        assert fast == slow
        assert fast_failed == slow_failed
        assert list(fast.scores.items()) == list(slow.scores.items())
        assert list(fast.devices.items()) == list(slow.devices.items())  # backends in the same order too
        if slow.node is not None and rng.random() < 0.6:
            # later pods see it; some are scheduled again (their own reservation)
            fast_engine.reserve(pod, fast)
            slow_engine.reserve(pod, slow)
            if rng.random() < 0.5:
                assert _decide(fast_engine, pod, names, limit, vector=True) == _decide(slow_engine, pod, names,
                                                                                       limit, vector=False)
    assert counted[0] > 0


def test_backends_keep_their_order(counted: list[int]) -> None:
    """An init container's devices (filled in when read) come before those of app containers of another backend
    booked at once (a later app container must see them): the decision lists the backends in the order fitted."""
    decisions = []
    for vector in (True, False):
        engine = _engine(second=True)
        plain = {"index": 0, "count": 4, "devmem": 8000, "devcore": 100, "health": True}
        engine.upsert_node(make_node("node-00", [{**plain, "id": "a", "type": "VEC-A"}], register=REGISTER,
                                     annotations={REGISTER2: json.dumps([{**plain, "id": "b", "type": "VEB-A"}])},
                                     allocatable={COUNT: "4", COUNT2: "4"}))
        app = {"name": "app", "resources": {"limits": {COUNT2: "1", MEM2: "100"}}}
        pod = make_pod("p", app, {**app, "name": "app2"},
                       init=[{"name": "init", "resources": {"limits": {COUNT: "1", MEM: "100"}}}])
        decisions.append(_decide(engine, pod, None, None, vector=vector)[0])
    fast, slow = decisions
    assert counted[0] == 2  # the init container and the first app one (the second sees the first's usage: per node)
    assert fast == slow and list(fast.devices) == list(slow.devices) == [WORD, WORD2]


def test_every_verdict_takes_the_vectorised_fit(counted: list[int]) -> None:
    engine = _engine()
    rng = random.Random(7)
    for n in range(40):
        devs = [{"id": f"n{n}-g{g}", "index": g, "count": 4, "devmem": 8000, "devcore": 100, "type": "VEC-A",
                 "numa": g // 2, "health": True} for g in range(4)]
        engine.upsert_node(make_node(f"node-{n:02d}", devs, register=REGISTER, allocatable={COUNT: "16"}))
        for g in range(4):
            engine.upsert_pod(scheduled(make_pod(f"run-{n}-{g}"), f"node-{n:02d}",
                                        f"n{n}-g{g},{WORD},{rng.randint(0, 8000)},{rng.choice([0, 50])}:;",
                                        key=ALLOCATED))
    pod = make_pod("p", {"name": "c", "resources": {"limits": {COUNT: "2", MEM: "3000", CORES: "30"}}})
    decision = engine.schedule(pod)
    assert counted[0] == 1
    assert decision.node is not None and len(decision.nodes) + len(decision.failed) == 40
    assert decision.annotations[ALLOCATED].count(",VEC,3000,30:") == 2
    uuid = make_pod("q", {"name": "c", "resources": {"limits": {COUNT: "1", MEM: "1"}}},
                    annotations={USE_UUID: "n3-g1"})
    assert engine.schedule(uuid).node == "node-03"
    assert counted[0] == 1  # a UUID selection is fitted per node


def test_watching_hook_calls_keeps_the_per_node_path(counted: list[int]) -> None:
    from hami_core.testing import HookRecorder

    engine = _engine()
    for n in range(30):
        engine.upsert_node(make_node(f"node-{n:02d}", [{"id": f"n{n}", "index": 0, "count": 1, "devmem": 100,
                                                         "devcore": 100, "type": "VEC-A", "health": True}],
                                     register=REGISTER, allocatable={COUNT: "1"}))
    recorder = HookRecorder(engine.plugins)
    try:
        engine.schedule(make_pod("p", {"name": "c", "resources": {"limits": {COUNT: "1"}}}))
    finally:
        recorder.finish_recording()
    assert counted[0] == 0
    assert len(recorder.getcall("hami_filter_nodes").candidates) == 30


def test_vector_fit_options() -> None:
    base = _backend(VecBackend)
    plain = DeviceRequest(WORD, 1, 100, MEM_PERCENTAGE_UNSET, 0)
    policy = GpuPolicy()
    pod: dict[str, Any] = {"metadata": {"annotations": {}}}
    assert base.vector_fit_options(pod, plain, policy, None) == {"mutex": False}
    assert base.vector_fit_options(pod, plain, GpuPolicy(gpu="mutex", gpu_tokens=("mutex",)), None) == {"mutex": True}
    assert base.vector_fit_options(pod, DeviceRequest("OTHER", 1, 0, 100, 0), policy, None) is None
    assert base.vector_fit_options({"metadata": {"annotations": {USE_UUID: "x"}}}, plain, policy, None) is None
    # an override of the fit is the backend's own business unless it says otherwise
    assert _backend(CordonBackend).vector_fit_options(pod, plain, policy, None) == {"mutex": False}

    @dataclass(frozen=True, slots=True)
    class Custom(StandardBackend):
        def hami_filter_nodes(self, pod: Any, request: Any, candidates: Any, policy: Any, quota: Any) -> Any:
            return [FitResult.unschedulable("no") for _ in candidates]

    @dataclass(frozen=True, slots=True)
    class Numa(StandardBackend):
        def fit_options(self, pod: Any, request: Any, policy: GpuPolicy) -> dict[str, Any]:
            return {"mutex": False, "numa_bind": True}

    @dataclass(frozen=True, slots=True)
    class Quota(StandardBackend):
        enforce_quota: ClassVar[bool] = True

    assert _backend(Custom).vector_fit_options(pod, plain, policy, None) is None
    assert _backend(Numa).vector_fit_options(pod, plain, policy, None) is None
    assert _backend(Quota).vector_fit_options(pod, plain, policy, None) == {"mutex": False}
    assert _backend(Quota).vector_fit_options(pod, plain, policy, QuotaView("ns", {})) is None

