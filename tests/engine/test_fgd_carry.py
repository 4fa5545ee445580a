"""The row store's mix state carried across mix versions whose classes change by a few
(``RowStore.mix_for`` / ``RowStore._carry``).

The online mix's versions mostly add or drop a class or two; the store keeps the kept classes' and bases' figures
and computes only the new classes on the current rows. These tests pin that the carried state is the state computed
afresh, field for field and bit for bit (random nodes, one or two device types, type-constrained classes, changed
rows between versions), and that a version with most classes new starts afresh.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hami_core.engine.workload import Shape
from hami_core.plugins.types import DeviceInfo, DeviceUsage
from hami_core.policies.fgd.fragmentation import MixState
from hami_core.policies.fgd.mix import Workload
from hami_core.policies.fgd.rowstore import RowStore


class _Node:
    def __init__(self, devices: list[DeviceUsage], cpu: float, mem: float) -> None:
        self.devices = {"ACME": devices}
        self.host_total = (cpu, mem)
        self.host_used = [0.0, 0.0]


def _device(i: int, used_milli: int, type: str) -> DeviceUsage:
    d = DeviceUsage(DeviceInfo(id=f"g{i}", index=i, count=4, devmem=1000, devcore=100, type=type, numa=i % 2,
                               health=True))
    if used_milli:
        d.used, d.usedcores, d.usedmem = 1 + used_milli // 600, used_milli // 10, used_milli
    return d


def _node(rng: random.Random, mixed: bool) -> _Node:
    kind = rng.choice(["ACME-X1", "ACME-Y2"])
    devs = [_device(j, rng.choice([0, 0, 200, 500, 700, 1000]),
                    rng.choice(["ACME-X1", "ACME-Y2"]) if mixed else kind) for j in range(rng.randint(0, 6))]
    return _Node(devs, rng.choice([2000.0, 6000.0, 64000.0]), rng.choice([4096.0, 1e9]))


def _class(rng: random.Random) -> tuple[Shape, float, float]:
    cores = rng.choice([0, 10, 20, 30, 50, 70, 100])
    shape = Shape("ACME", rng.choice([1, 1, 2]), cores, 0, cores, rng.choice([(), (), ("Y2",), ("X1",)]))
    return shape, float(rng.choice([0, 2000, 8000])), float(rng.choice([0, 2048]))


def _workload(version: int, classes: list[tuple[Shape, float, float]], rng: random.Random) -> Workload:
    weights = [rng.random() + 0.01 for _ in classes]
    total = sum(weights)
    return Workload(version, tuple((s, w / total, cpu, mem) for (s, cpu, mem), w in zip(classes, weights,
                                                                                         strict=True)))


def _assert_state_equal(got: MixState, want: MixState) -> None:
    for f in MixState.__slots__:
        a, b = getattr(got, f), getattr(want, f)
        assert a.shape == b.shape, f
        assert a.dtype == b.dtype, f
        if f == "weighted":
            # a BLAS dot product (``weight @ frag``) whose last bits depend on how many rows it runs over (its
            # blocking), in the store as in a fresh computation: equal to the fresh sum but for rounding
            assert np.allclose(a, b, rtol=1e-14, atol=1e-12), f
        else:
            assert np.array_equal(a, b), f  # exact: the carried figures are the fresh ones


@pytest.mark.parametrize("seed", range(24))
def test_carried_state_equals_a_fresh_one(seed: int) -> None:
    rng = random.Random(seed)
    mixed = seed % 3 == 2
    nodes = [_node(rng, mixed) for _ in range(14)]
    store = RowStore("ACME")
    rows = np.arange(len(nodes), dtype=np.intp)
    stamps = np.arange(1, len(nodes) + 1, dtype=np.int64)
    store.refresh(rows, stamps, nodes)
    classes = list(dict.fromkeys(_class(rng) for _ in range(8)))
    carried = 0
    for version in range(1, 9):
        mix = store.mix_for(version, _workload(version, classes, rng).for_backend("ACME"))
        before = store._state  # the carried (or reset) state, before any row is rebuilt
        got = store.state(rows, mix)
        _assert_state_equal(got, MixState.of(store.view(rows), mix))
        carried += before is not None
        # the next version: a class or two dropped or added; a node or two changed between versions
        for _ in range(rng.randint(1, 2)):
            if len(classes) > 2 and rng.random() < 0.5:
                classes.pop(rng.randrange(len(classes)))
            else:
                classes = list(dict.fromkeys([*classes, _class(rng)]))
        for i in rng.sample(range(len(nodes)), rng.randint(0, 2)):
            nodes[i] = _node(rng, mixed)
            stamps[i] += 100
        store.refresh(rows, stamps, nodes)
    assert carried  # some versions were carried, not rebuilt


def test_a_version_with_most_classes_new_starts_afresh() -> None:
    rng = random.Random(7)
    nodes = [_node(rng, False) for _ in range(6)]
    store = RowStore("ACME")
    rows = np.arange(len(nodes), dtype=np.intp)
    store.refresh(rows, np.arange(1, 7, dtype=np.int64), nodes)
    first = [(Shape("ACME", 1, c, 0, c, ()), 0.0, 0.0) for c in (10, 20, 30)]
    mix = store.mix_for(1, _workload(1, first, rng).for_backend("ACME"))
    store.state(rows, mix)
    one_new = [*first[:2], (Shape("ACME", 1, 40, 0, 40, ()), 0.0, 0.0)]
    mix = store.mix_for(2, _workload(2, one_new, rng).for_backend("ACME"))
    assert store._state is not None  # one class of three new: carried
    _assert_state_equal(store.state(rows, mix), MixState.of(store.view(rows), mix))
    all_new = [(Shape("ACME", 1, c, 0, c, ()), 0.0, 0.0) for c in (60, 70, 80)]
    mix = store.mix_for(3, _workload(3, all_new, rng).for_backend("ACME"))
    assert store._state is None  # every class new: afresh
    _assert_state_equal(store.state(rows, mix), MixState.of(store.view(rows), mix))
