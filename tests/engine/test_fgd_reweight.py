"""The fgd growth cache across mix versions: per-class deltas re-weighted when only the weights move.

For device choices that do not depend on the mix (GPU policy binpack/spread, and pods without devices) the policy
keeps, per request signature and table row, every class's unweighted growth (``class_deltas``) and re-weights it
for a new mix version, computing only the classes new to the mix. These tests pin that this never changes a
figure: the cached growth equals a fresh computation exactly, across versions whose weights move, whose classes
come, go and come back, with rows changing and new rows appearing in between, and under a tiny memory bound.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from core_helpers import acme, acme_device, make_node, make_pod, scheduled
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_core.engine.workload import Shape
from hami_core.plugins.types import DeviceInfo, DeviceUsage, NodeBatch
from hami_core.policies.fgd.fragmentation import DeviceArrays, Mix, MixState, class_deltas, placement_delta
from hami_core.policies.fgd.growth import FgdState, _ClassCache, node_growth
from hami_core.policies.fgd.mix import Workload
from hami_core.policies.fgd.rowstore import RowStore
from hami_core.policies.fgd.score import quantised_score

TYPES = ("ACME-X1", "ACME-Y2")


class _Node:
    """A node as the policy reads it (devices per backend, host totals and usage): an in-test stand-in for the
    engine's node state."""

    def __init__(self, devices: list[DeviceUsage], cpu: float) -> None:
        self.devices = {"ACME": devices}
        self.host_total = (cpu, 1e9)
        self.host_used = [0.0, 0.0]


def _device(i: int, used_milli: int, type: str, slots: int = 4) -> DeviceUsage:
    d = DeviceUsage(DeviceInfo(id=f"g{i}", index=i, count=slots, devmem=1000, devcore=100, type=type, numa=0,
                               health=True))
    if used_milli:
        d.used, d.usedcores, d.usedmem = 1, used_milli // 10, used_milli
    return d


def _node(rng: random.Random, mixing: bool = True) -> _Node:
    node_type = rng.choice(TYPES)
    mixed = mixing and rng.random() < 0.2  # a few nodes mix device types: those are computed class by class
    devs = [_device(j, rng.choice([0, 0, 100, 300, 500, 700, 1000]), rng.choice(TYPES) if mixed else node_type)
            for j in range(rng.randint(1, 4))]
    return _Node(devs, rng.choice([4000.0, 16000.0, 64000.0]))


def _class_pool(rng: random.Random) -> list[tuple[Shape, float, float]]:
    """Candidate classes (shape, CPU, memory); some constrained to a device type."""
    pool = []
    for _ in range(14):
        cores = rng.choice([10, 30, 50, 100])
        use = rng.choice([(), (), ("Y2",)])
        pool.append((Shape("ACME", rng.choice([1, 1, 1, 2]), cores, 0, cores, use),
                     float(rng.choice([0, 2000, 8000])), float(rng.choice([0, 2048]))))
    return list(dict.fromkeys(pool))


def _workload(version: int, rng: random.Random, pool: list[tuple[Shape, float, float]]) -> Workload:
    chosen = rng.sample(pool, rng.randint(1, min(8, len(pool))))
    weights = [rng.random() + 0.01 for _ in chosen]
    total = sum(weights)
    return Workload(version, tuple((s, w / total, cpu, mem) for (s, cpu, mem), w in zip(chosen, weights, strict=True)))


SIGNATURES: list[tuple[tuple[Shape, ...], str, tuple[int, int]]] = [
    ((Shape("ACME", 1, 30, 0, 30),), "binpack", (1000, 0)),
    ((Shape("ACME", 1, 50, 0, 50),), "spread", (0, 0)),
    ((Shape("ACME", 2, 100, 0, 100),), "binpack", (2000, 512)),
    ((Shape("ACME", 1, 20, 0, 20), Shape("ACME", 1, 40, 0, 40)), "binpack", (500, 0)),  # two containers
    ((Shape("ACME", 1, 50, 0, 50, ("Y2",)),), "binpack", (0, 0)),
    ((), "binpack", (3000, 1024)),  # no device: CPU and memory only
    ((Shape("ACME", 1, 30, 0, 30),), "fgd", (1000, 0)),  # weighted device choice: recomputed per version
]


def _check(state: FgdState, nodes: list[_Node], rows: np.ndarray, stamps: np.ndarray, workload: Workload) -> None:
    for shapes, select, host in SIGNATURES:
        batch_nodes = [nodes[r] for r in rows.tolist()]
        batch = NodeBatch(batch_nodes, None, rows=rows, generations=stamps[rows], shapes=shapes, workload=workload,
                          cache={})
        cached = state.growth(batch, workload, select, (1, 1, 1), host)
        fresh = node_growth(batch_nodes, shapes, workload, select, (1, 1, 1), host)
        assert np.array_equal(cached, fresh), (shapes, select, workload.version)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 100_000), cache_bytes=st.sampled_from([1 << 30, 1]))
def test_reweighted_cache_equals_fresh_across_versions(seed: int, cache_bytes: int) -> None:
    """Exact equality with a fresh computation over ten mix versions, rows changing and appearing in between, and
    batches of every row or a subset (``cache_bytes=1``: every other signature evicted at once)."""
    rng = random.Random(seed)
    pool = _class_pool(rng)
    nodes = [_node(rng) for _ in range(rng.randint(2, 9))]
    stamps = np.arange(1, len(nodes) + 1, dtype=np.int64)
    next_stamp = len(nodes) + 1
    state = FgdState(cache_bytes)
    for version in range(1, 11):
        workload = _workload(version, rng, pool)
        for _ in range(rng.randint(1, 3)):  # decisions at this version
            if rng.random() < 0.3:
                rows = np.array(sorted(rng.sample(range(len(nodes)), rng.randint(1, len(nodes)))), dtype=np.intp)
            else:
                rows = np.arange(len(nodes), dtype=np.intp)
            _check(state, nodes, rows, stamps, workload)
            for r in rng.sample(range(len(nodes)), rng.randint(0, 2)):  # a placement or two change rows
                d = rng.choice(nodes[r].devices["ACME"])
                d.used, d.usedcores, d.usedmem = d.used + 1, min(d.usedcores + 20, 100), min(d.usedmem + 200, 1000)
                nodes[r].host_used[0] += 1000
                stamps[r] = next_stamp
                next_stamp += 1
        if rng.random() < 0.3:  # a node joins the table
            nodes.append(_node(rng))
            stamps = np.append(stamps, next_stamp)
            next_stamp += 1
    if cache_bytes == 1:
        assert len(state.by_signature) == 1


def test_only_new_classes_are_computed_and_weights_only_versions_keep_row_state(monkeypatch: Any) -> None:
    """A version that only moves the weights computes nothing per row (the row store keeps the mix state, the
    signature re-weights its deltas); one that adds a class computes that class alone."""
    rng = random.Random(3)
    nodes = [_node(rng, mixing=False) for _ in range(6)]
    rows = np.arange(6, dtype=np.intp)
    stamps = np.arange(1, 7, dtype=np.int64)
    # c is a's shape with a CPU request: a new class of a known base (what a device books)
    a, b, c = (Shape("ACME", 1, 30, 0, 30), 0.0, 0.0), (Shape("ACME", 1, 100, 0, 100), 0.0, 0.0), \
        (Shape("ACME", 1, 30, 0, 30), 2000.0, 0.0)
    shapes = (Shape("ACME", 1, 20, 0, 20),)
    state = FgdState()

    def growth(workload: Workload) -> np.ndarray:
        batch = NodeBatch([nodes[i] for i in range(6)], None, rows=rows, generations=stamps, shapes=shapes,
                          workload=workload, cache={})
        return state.growth(batch, workload, "binpack", (1, 1, 1), (0, 0))

    growth(Workload(1, ((a[0], 0.5, 0.0, 0.0), (b[0], 0.5, 0.0, 0.0))))
    calls: list[int] = []
    real_of, real_deltas = MixState.of, class_deltas

    def counting_of(dev: DeviceArrays, mix: Mix) -> MixState:
        calls.append(len(mix))
        return real_of(dev, mix)

    deltas_calls: list[int] = []

    def counting_deltas(dev: DeviceArrays, request: Shape, mix: Mix, **kw: Any) -> Any:
        deltas_calls.append(len(mix))
        return real_deltas(dev, request, mix, **kw)

    monkeypatch.setattr(MixState, "of", staticmethod(counting_of))
    monkeypatch.setattr("hami_core.policies.fgd.growth.class_deltas", counting_deltas)
    moved = Workload(2, ((a[0], 0.2, 0.0, 0.0), (b[0], 0.8, 0.0, 0.0)))
    reweighted = growth(moved)
    assert calls == [] and deltas_calls == []  # nothing recomputed: re-weighted
    added = Workload(3, ((a[0], 0.2, 0.0, 0.0), (b[0], 0.5, 0.0, 0.0), (c[0], 0.3, c[1], c[2])))
    with_new = growth(added)
    assert deltas_calls == []  # one-device request: the new class from the cached per-base figures
    assert calls == [3]  # the row store's state for the new class set, once
    monkeypatch.undo()
    assert np.array_equal(reweighted, node_growth(nodes, shapes, moved, "binpack"))
    assert np.array_equal(with_new, node_growth(nodes, shapes, added, "binpack"))


@pytest.mark.parametrize("seed", range(40))
def test_class_deltas_weighted_equal_placement_delta(seed: int) -> None:
    """``weight @ class_deltas`` is :func:`placement_delta` (summed in another order: within 1e-6 milli per device,
    the same score), and a subset of classes gets exactly its rows of the full deltas."""
    rng = random.Random(seed)
    nodes = [_node(rng) for _ in range(rng.randint(1, 8))]
    dev = DeviceArrays.build([n.devices["ACME"] for n in nodes], {t: i for i, t in enumerate(TYPES)},
                             np.array([(n.host_total[0], 1e9) for n in nodes]))
    pool = _class_pool(rng)
    mix = Mix(list(_workload(1, rng, pool).classes), list(TYPES))
    request = Shape("ACME", rng.choice([1, 1, 2, 3]), rng.choice([20, 50, 100]), 0, rng.choice([20, 50, 100]))
    for select in ("binpack", "spread"):
        host = (rng.choice([0, 2000, 8000]), 0)
        reference = placement_delta(dev, request, mix, select=select, host_need=host)
        deltas, alive, picks = class_deltas(dev, request, mix, select=select, host_need=host)
        weighted = np.where(alive, mix.weight @ deltas, np.inf)
        assert np.array_equal(np.isinf(weighted), np.isinf(reference))
        finite = np.isfinite(reference)
        assert np.all(np.abs(weighted[finite] - reference[finite]) <= 1e-6 * request.nums + 1e-9)
        for steps in (25, 100):
            assert np.array_equal(quantised_score(np.round(weighted, 6), steps), quantised_score(reference, steps))
        some = sorted(rng.sample(range(len(mix)), rng.randint(1, len(mix))))
        part, _, _ = class_deltas(dev, request, mix.subset(some), select=select, host_need=host, picks=picks)
        assert np.array_equal(np.where(alive, part, 0.0), np.where(alive, deltas[some], 0.0))


def test_row_store_keeps_state_when_only_weights_move() -> None:
    rng = random.Random(5)
    nodes = [_node(rng) for _ in range(4)]
    store = RowStore("ACME")
    rows, stamps = np.arange(4, dtype=np.intp), np.arange(1, 5, dtype=np.int64)
    store.refresh(rows, stamps, nodes)
    one = [(Shape("ACME", 1, 30, 0, 30), 0.25, 0.0, 0.0), (Shape("ACME", 1, 100, 0, 100), 0.75, 0.0, 0.0)]
    first = store.state(rows, store.mix_for(1, one))
    n_ok = first.n_ok.copy()
    built = store._state_stamp.copy()
    two = [(s, 1 - w, cpu, mem) for s, w, cpu, mem in one]
    mix = store.mix_for(2, two)
    assert np.array_equal(store._state_stamp, built)  # not invalidated
    kept = store.state(rows, mix)
    assert np.array_equal(kept.n_ok, n_ok)
    assert np.array_equal(kept.weighted, MixState.of(store.view(rows), mix).weighted)
    three = [*two, (Shape("ACME", 1, 50, 0, 50), 0.1, 0.0, 0.0)]
    store.mix_for(3, three)
    assert (store._state_stamp == -1).all()  # a new class set: rebuilt on next use


def test_cache_memory_is_bounded() -> None:
    """Least recently used signatures are dropped once the caches exceed ``cache_bytes``."""
    rng = random.Random(9)
    nodes = [_node(rng) for _ in range(50)]
    rows, stamps = np.arange(50, dtype=np.intp), np.arange(1, 51, dtype=np.int64)
    workload = _workload(1, rng, _class_pool(rng))
    state = FgdState(cache_bytes=20_000)
    for cores in range(5, 100, 5):
        shapes = (Shape("ACME", 1, cores, 0, cores),)
        batch = NodeBatch(nodes, None, rows=rows, generations=stamps, shapes=shapes, workload=workload, cache={})
        state.growth(batch, workload, "binpack", (1, 1, 1), (0, 0))
        assert sum(c.nbytes for c in state.by_signature.values()) <= 20_000 or len(state.by_signature) == 1
    assert 1 <= len(state.by_signature) < 19
    newest = next(reversed(state.by_signature))
    assert newest[0] == (Shape("ACME", 1, 95, 0, 95),)
    assert all(isinstance(c, _ClassCache) for c in state.by_signature.values())


@pytest.mark.parametrize("seed", range(8))
def test_two_backends_equal_fresh_across_versions(seed: int) -> None:
    """A pod asking two backends, and pods without devices under a mix of two backends: each backend's classes are
    cached and re-weighted on their own, and the sum equals a fresh computation exactly."""
    rng = random.Random(seed)
    nodes = []
    for _ in range(rng.randint(2, 7)):
        node = _node(rng)
        node.devices["BETA"] = [_device(j, rng.choice([0, 300, 700]), "BETA-Z9") for j in range(rng.randint(0, 3))]
        nodes.append(node)
    rows, stamps = np.arange(len(nodes), dtype=np.intp), np.arange(1, len(nodes) + 1, dtype=np.int64)
    pool = _class_pool(rng) + [(Shape("BETA", 1, c, 0, c), float(cpu), 0.0) for c in (20, 60) for cpu in (0, 4000)]
    signatures = [((Shape("ACME", 1, 30, 0, 30), Shape("BETA", 1, 40, 0, 40)), (1000, 0)),
                  ((Shape("BETA", 1, 60, 0, 60),), (0, 0)), ((), (2000, 512))]
    state = FgdState()
    for version in range(1, 8):
        workload = _workload(version, rng, pool)
        for shapes, host in signatures:
            batch = NodeBatch(nodes, None, rows=rows, generations=stamps, shapes=shapes, workload=workload, cache={})
            cached = state.growth(batch, workload, "binpack", (1, 1, 1), host)
            assert np.array_equal(cached, node_growth(nodes, shapes, workload, "binpack", (1, 1, 1), host))
        r = rng.randrange(len(nodes))
        for d in nodes[r].devices["BETA"][:1]:
            d.used, d.usedcores, d.usedmem = d.used + 1, min(d.usedcores + 10, 100), min(d.usedmem + 100, 1000)
        stamps[r] = stamps.max() + 1


@pytest.mark.parametrize(("configured", "expected"), [(None, 256 * 2**20), (1, 2**20), (0, 0)])
def test_cache_bound_comes_from_config(make_engine: Any, configured: int | None, expected: int) -> None:
    """``scheduler.fgd.cacheMiB`` bounds the policy's caches in the engine that uses it (default 256 MiB); with 0
    nothing is kept between decisions, and decisions stay the same."""
    fgd: dict[str, Any] = {"workload": [{"backend": "ACME", "cores": 50, "memory": 500}]}
    if configured is not None:
        fgd["cacheMiB"] = configured
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                    "fgd": fgd}})
    for n in range(3):
        engine.upsert_node(make_node(f"n{n}", [acme_device(0, devmem=1000, id=f"n{n}-g0")]))
    engine.upsert_pod(scheduled(make_pod("run"), "n1", "n1-g0,ACME,300,30:;"))
    assert engine.schedule(make_pod("p", acme(1, 100, 10)), limit=1).node == "n1"
    state = engine.plugin_cache["fgd"]
    assert isinstance(state, FgdState) and state.cache_bytes == expected
    assert len(state.by_signature) == 1  # the last signature is kept whatever the bound
