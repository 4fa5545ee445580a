"""The fgd policy's growth memo by node state (``hami_core.policies.fgd.rowmemo``) and the device order's shortcut.

Under GPU policy ``fgd`` a signature's growth is computed once per distinct node state (devices, and which classes'
CPU and memory fit before and after the pod) per mix version. These tests pin that sharing never changes a figure:
every node's growth equals its own computation alone, as nodes change (to a new state or to another node's), as
versions come, and under a tiny memory bound; that alike nodes are computed once and a changed node alone is
recomputed; and that the device order skips the growth exactly where there is no choice to make.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest
from core_helpers import acme_usage

from hami_core.engine.workload import Shape
from hami_core.plugins.types import DeviceUsage, NodeBatch
from hami_core.policies.fgd import devmemo, fragmentation, rowmemo
from hami_core.policies.fgd.fragmentation import DeviceArrays, _mix_of, _selection_key, device_growth, fgd_device_order
from hami_core.policies.fgd.growth import FgdState, node_growth
from hami_core.policies.fgd.mix import Workload
from hami_core.policies.fgd.rowmemo import distinct

SIGNATURES: list[tuple[tuple[Shape, ...], tuple[int, int]]] = [
    ((Shape("ACME", 1, 30, 0, 30),), (1000, 0)),
    ((Shape("ACME", 2, 50, 0, 50),), (6000, 1024)),
    ((Shape("ACME", 1, 20, 0, 20), Shape("ACME", 1, 40, 0, 40)), (0, 0)),  # two containers: one memo each
]


class _Node:
    def __init__(self, devices: list[DeviceUsage], cpu: float) -> None:
        self.devices = {"ACME": devices}
        self.host_total = (cpu, 1e9)
        self.host_used = [0.0, 0.0]


def _node(rng: random.Random) -> _Node:
    devs = [acme_usage(j, rng.choice([0, 0, 300, 700, 1000]), rng.choice(["ACME-X1", "ACME-Y2"]))
            for j in range(rng.randint(1, 4))]
    return _Node(devs, rng.choice([4000.0, 16000.0]))


def _workload(version: int, rng: random.Random) -> Workload:
    classes = [(Shape("ACME", rng.choice([1, 2]), c, 0, c, rng.choice([(), ("Y2",)])), rng.random() + 0.01,
                float(rng.choice([0, 2000, 8000])), 0.0) for c in rng.sample([10, 30, 50, 100], 3)]
    total = sum(c[1] for c in classes)
    return Workload(version, tuple((s, w / total, cpu, mem) for s, w, cpu, mem in classes))


def _batch(nodes: list[_Node], stamps: np.ndarray, shapes: tuple[Shape, ...], workload: Workload) -> NodeBatch:
    rows = np.arange(len(nodes), dtype=np.intp)
    return NodeBatch(nodes, None, rows=rows, generations=stamps, shapes=shapes, workload=workload, cache={})


def _alone(nodes: list[_Node], shapes: tuple[Shape, ...], workload: Workload, host: tuple[int, int]) -> np.ndarray:
    """Each node's growth computed with no other node in sight (nothing to share)."""
    return np.array([node_growth([n], shapes, workload, "fgd", host=host)[0] for n in nodes])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("cache_bytes", [1 << 30, 1])
def test_shared_growth_equals_each_node_alone(seed: int, cache_bytes: int) -> None:
    rng = random.Random(seed)
    nodes = [_node(rng) for _ in range(4)]
    nodes += [copy.deepcopy(rng.choice(nodes)) for _ in range(5)]  # alike nodes: what the memo shares
    stamps = np.arange(1, len(nodes) + 1, dtype=np.int64)
    next_stamp = len(nodes) + 1
    state = FgdState(cache_bytes)
    for version in range(1, 6):
        workload = _workload(version, rng)
        for _ in range(3):
            for shapes, host in SIGNATURES:
                got = state.growth(_batch(nodes, stamps, shapes, workload), workload, "fgd", (1, 1, 1), host)
                assert np.array_equal(got, _alone(nodes, shapes, workload, host)), (seed, version, shapes)
            r = rng.randrange(len(nodes))
            if rng.random() < 0.5:  # a node takes a pod: a state of its own
                d = rng.choice(nodes[r].devices["ACME"])
                d.used, d.usedcores, d.usedmem = d.used + 1, min(d.usedcores + 20, 100), min(d.usedmem + 200, 1000)
                nodes[r].host_used[0] += 3000
            else:  # ... or comes to another node's state
                nodes[r] = copy.deepcopy(rng.choice(nodes))
            stamps[r] = next_stamp
            next_stamp += 1


def test_alike_nodes_are_computed_once_and_a_changed_node_alone(monkeypatch: Any) -> None:
    nodes = [_Node([acme_usage(0, 0), acme_usage(1, 300)], 16000.0) for _ in range(5)] + [
        _Node([acme_usage(0, 700), acme_usage(1, 0)], 16000.0)]
    stamps = np.arange(1, 7, dtype=np.int64)
    shapes, host = SIGNATURES[0]
    workload = _workload(1, random.Random(1))
    computed: list[int] = []
    real = fragmentation.placement_delta

    real_single = devmemo.single_growth

    def counting(dev: DeviceArrays, *args: Any, **kw: Any) -> np.ndarray:
        computed.append(len(dev.present))
        return real(dev, *args, **kw)

    def counting_single(store: Any, rows: np.ndarray, *args: Any, **kw: Any) -> np.ndarray:
        computed.append(len(rows))  # a one-device request: the growth's host half (its device half in devmemo)
        return real_single(store, rows, *args, **kw)

    monkeypatch.setattr("hami_core.policies.fgd.growth.placement_delta", counting)
    monkeypatch.setattr("hami_core.policies.fgd.growth.single_growth", counting_single)
    state = FgdState()

    def growth(version: Workload) -> np.ndarray:
        return state.growth(_batch(nodes, stamps, shapes, version), version, "fgd", (1, 1, 1), host)

    first = growth(workload)
    assert computed == [2]  # two distinct states among six nodes
    assert len(set(first[:5].tolist())) == 1
    d = nodes[2].devices["ACME"][0]
    d.used, d.usedcores, d.usedmem = 1, 50, 500
    stamps[2] = 7
    computed.clear()
    after = growth(workload)
    assert computed == [1]  # the changed node alone, a new state
    nodes[3].devices["ACME"][0].used, nodes[3].devices["ACME"][0].usedcores = 1, 50
    nodes[3].devices["ACME"][0].usedmem = 500
    stamps[3] = 8
    computed.clear()
    again = growth(workload)
    assert computed == []  # changed to a state the memo knows (node 2's): shared, nothing computed
    assert again[3] == after[2]
    computed.clear()
    growth(_workload(2, random.Random(2)))
    assert computed == [3]  # a new mix version: every distinct state again, once
    monkeypatch.undo()
    assert np.array_equal(again, _alone(nodes, shapes, workload, host))


def test_host_resources_split_states_only_where_a_class_fit_changes() -> None:
    workload = Workload(1, ((Shape("ACME", 1, 30, 0, 30), 0.5, 8000.0, 0.0), (Shape("ACME", 1, 60, 0, 60), 0.5, 0.0,
                                                                               0.0)))
    # the same devices; free CPU 64000 and 32000 fit every class either way, 9000 fits the CPU class only before
    nodes = [_Node([acme_usage(0, 300), acme_usage(1, 0)], cpu) for cpu in (64000.0, 32000.0, 9000.0)]
    stamps = np.arange(1, 4, dtype=np.int64)
    shapes, host = (Shape("ACME", 1, 30, 0, 30),), (2000, 0)
    state = FgdState()
    got = state.growth(_batch(nodes, stamps, shapes, workload), workload, "fgd", (1, 1, 1), host)
    memo = next(iter(state._row_memos.values()))
    assert len(memo.values) == 2
    assert got[0] == got[1] and got[2] != got[0]
    assert np.array_equal(got, _alone(nodes, shapes, workload, host))


def test_distinct_is_exact_when_hashes_collide(monkeypatch: Any) -> None:
    keys = np.array([[1, 2], [2, 1], [1, 2], [3, 3]], dtype=np.int64)
    monkeypatch.setattr(rowmemo, "_MIX_WORDS", np.ones(8, dtype=np.int64))  # [1, 2] and [2, 1] hash alike
    first, inverse = distinct(keys)
    assert np.array_equal(keys[first[inverse]], keys)
    assert len(first) == 3 and inverse[0] == inverse[2] != inverse[1]


def _full_order(devices: list[DeviceUsage], request: Shape, classes: Any, free: tuple[float, float],
                need: tuple[float, float]) -> list[DeviceUsage]:
    """The device order as computed before the shortcut: growth of every device, then the stable sort."""
    types = sorted({d.type for d in devices})
    host = np.array([free], dtype=float)
    dev = DeviceArrays.build([devices], {t: i for i, t in enumerate(types)}, host)
    delta, inc = device_growth(dev, request, _mix_of(tuple(classes), tuple(types)), host - np.asarray(need, float))
    key = _selection_key(dev, inc, delta, "fgd", (1, 1, 1))[0, :len(devices)]
    return [devices[i] for i in np.argsort(key, kind="stable")]


@pytest.mark.parametrize("used", [[1000, 1000, 1000], [1000, 0, 1000], [700, 1000, 900], [0, 300, 1000], [0, 0, 300]])
def test_device_order_shortcut_gives_the_full_order(used: list[int]) -> None:
    devices = [acme_usage(i, u) for i, u in enumerate(used)]
    classes = ((Shape("ACME", 1, 30, 0, 30), 0.6, 0.0, 0.0), (Shape("ACME", 1, 100, 0, 100), 0.4, 0.0, 0.0))
    request = Shape("ACME", 1, 50, 0, 50)
    got = fgd_device_order(devices, request, classes, (16000.0, 1e9), (0.0, 0.0))
    assert [d.id for d in got] == [d.id for d in _full_order(devices, request, classes, (16000.0, 1e9), (0.0, 0.0))]
