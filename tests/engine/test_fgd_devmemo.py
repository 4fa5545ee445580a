"""The device half of a one-device request's growth, memoised by device state (``hami_core.policies.fgd.devmemo``).

Under GPU policy ``fgd`` a one-device request's growth splits into a part that depends on the node's devices alone
and a part that depends on its free CPU and memory. These tests pin that the split changes no figure: on random
nodes (one device type each, or two: those go the whole way), under random mixes, host needs and weights,
:func:`single_growth` equals :func:`placement_delta` bit for bit, on the first call and when the memo answers;
that nodes whose devices are alike share one computation whatever their CPU; that a state's figures are kept
across mix versions (a new version computes only the bases new to the memo); and that the memo starts afresh for a
store that renumbered its device states and past its bound on states.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest

from hami_core.engine.workload import Shape
from hami_core.plugins.types import DeviceInfo, DeviceUsage
from hami_core.policies.fgd.devmemo import DeviceMemo, single_growth
from hami_core.policies.fgd.fragmentation import placement_delta
from hami_core.policies.fgd.mix import Workload
from hami_core.policies.fgd.rowstore import RowStore


class _Node:
    def __init__(self, devices: list[DeviceUsage], cpu: float, mem: float = 1e9) -> None:
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
                    rng.choice(["ACME-X1", "ACME-Y2"]) if mixed else kind) for j in range(rng.randint(1, 6))]
    return _Node(devs, rng.choice([2000.0, 6000.0, 16000.0, 64000.0]), rng.choice([4096.0, 1e9]))


def _mix(store: RowStore, version: int, rng: random.Random) -> Any:
    classes = [(Shape("ACME", rng.choice([1, 1, 2]), c, 0, c, rng.choice([(), (), ("Y2",), ("X1",)])),
                rng.random() + 0.01, float(rng.choice([0, 2000, 8000])), float(rng.choice([0, 2048])))
               for c in rng.sample([10, 20, 30, 50, 70, 100], rng.randint(1, 5))]
    total = sum(c[1] for c in classes)
    workload = Workload(version, tuple((s, w / total, cpu, mem) for s, w, cpu, mem in classes))
    return store.mix_for(version, workload.for_backend("ACME"))


def _direct(store: RowStore, rows: np.ndarray, request: Shape, mix: Any, weights: tuple[int, int, int],
            need: tuple[float, float]) -> np.ndarray:
    return placement_delta(store.view(rows), request, mix, select="fgd", weights=weights, host_need=need,
                           state=store.state(rows, mix))


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("max_states", [8192, 2])
def test_single_growth_equals_the_placement_delta(seed: int, max_states: int, monkeypatch: Any) -> None:
    monkeypatch.setattr("hami_core.policies.fgd.devmemo.MAX_STATES", max_states)  # 2: it starts afresh often
    rng = random.Random(seed)
    mixed = seed % 4 == 3  # some seeds give nodes of two device types: the fallback path
    nodes = [_node(rng, mixed) for _ in range(6)]
    nodes += [copy.deepcopy(rng.choice(nodes)) for _ in range(6)]
    for n in nodes[6:]:  # alike devices, another CPU: the device half is shared, the host half is not
        n.host_total = (rng.choice([1000.0, 3000.0, 64000.0]), n.host_total[1])
    store = RowStore("ACME")
    rows = np.arange(len(nodes), dtype=np.intp)
    stamps = np.arange(1, len(nodes) + 1, dtype=np.int64)
    store.refresh(rows, stamps, nodes)
    memos: dict[Any, DeviceMemo] = {}  # kept across versions and node changes, as the policy keeps them
    for version in range(1, 6):
        mix = _mix(store, version, rng)
        for _ in range(3):
            request = Shape("ACME", 1, rng.choice([10, 30, 50, 100]), 0, 0, rng.choice([(), ("X1",)]))
            weights = rng.choice([(1, 1, 1), (1, 0, 2)])
            need = (float(rng.choice([0, 1000, 4000])), float(rng.choice([0, 1024])))
            memo = memos.setdefault((request, weights), DeviceMemo())
            for _ in range(2):  # computed, then answered by the memo
                got = single_growth(store, rows, request, mix, weights, need, memo)
                want = _direct(store, rows, request, mix, weights, need)
                assert np.array_equal(got, want), (seed, version, request, weights, need)
        # some nodes change (new device states, or another node's) before the next version
        for i in rng.sample(range(len(nodes)), 3):
            nodes[i] = copy.deepcopy(rng.choice(nodes)) if rng.random() < 0.5 else _node(rng, mixed)
            stamps[i] += 100
        store.refresh(rows, stamps, nodes)


def test_alike_devices_are_computed_once_whatever_the_host(monkeypatch: Any) -> None:
    devices = [_device(0, 300, "ACME-X1"), _device(1, 0, "ACME-X1")]
    nodes = [_Node(copy.deepcopy(devices), cpu) for cpu in (64000.0, 16000.0, 3000.0, 1000.0)]
    nodes.append(_Node([_device(0, 700, "ACME-X1"), _device(1, 0, "ACME-X1")], 64000.0))
    store = RowStore("ACME")
    rows = np.arange(len(nodes), dtype=np.intp)
    store.refresh(rows, np.arange(1, len(nodes) + 1, dtype=np.int64), nodes)
    assert len(set(store.device_id[:4].tolist())) == 1 and store.device_id[4] != store.device_id[0]
    computed: list[tuple[str, int]] = []
    real_states, real_bases = DeviceMemo._compute, DeviceMemo._base_half

    def states(self: DeviceMemo, store: RowStore, at: np.ndarray, *args: Any) -> None:
        computed.append(("states", len(at)))
        real_states(self, store, at, *args)

    def bases(self: DeviceMemo, store: RowStore, at: np.ndarray, *args: Any) -> None:
        computed.append(("bases", len(at)))
        real_bases(self, store, at, *args)

    monkeypatch.setattr(DeviceMemo, "_compute", states)
    monkeypatch.setattr(DeviceMemo, "_base_half", bases)
    mix = _mix(store, 1, random.Random(7))
    request, need, weights = Shape("ACME", 1, 30, 0, 30), (2000.0, 0.0), (1, 1, 1)
    memo = DeviceMemo()
    got = single_growth(store, rows, request, mix, weights, need, memo)
    assert computed == [("states", 2)]  # two device states among five nodes
    assert np.isinf(got[3]) and np.isfinite(got[0])  # 1000 milli CPU free cannot take a pod of 2000
    computed.clear()
    single_growth(store, rows[:3], request, mix, weights, need, memo)
    assert computed == []
    mix2 = _mix(store, 2, random.Random(8))
    assert set(mix2.base_keys) - set(mix.base_keys)  # (the second mix has bases the first has not)
    single_growth(store, rows, request, mix2, weights, need, memo)
    assert computed == [("bases", 2)]  # a new mix: the states are kept, their figures for its bases computed
    computed.clear()
    single_growth(store, rows, request, _mix(store, 3, random.Random(7)), weights, need, memo)
    assert computed == []  # a mix of known bases: nothing computed
    monkeypatch.undo()
    assert np.array_equal(got, _direct(store, rows, request, mix, weights, need))


def test_renumbering_starts_the_memo_afresh(monkeypatch: Any) -> None:
    monkeypatch.setattr("hami_core.policies.fgd.rowstore._MAX_DEVICE_IDS", 3)
    rng = random.Random(3)
    nodes = [_Node([_device(0, u, "ACME-X1")], 64000.0) for u in (0, 300, 500)]
    store = RowStore("ACME")
    rows = np.arange(3, dtype=np.intp)
    store.refresh(rows, np.array([1, 2, 3]), nodes)
    mix = _mix(store, 1, rng)
    request, need, weights = Shape("ACME", 1, 20, 0, 20), (0.0, 0.0), (1, 1, 1)
    memo = DeviceMemo()
    single_growth(store, rows, request, mix, weights, need, memo)
    epoch = store.epoch
    nodes[0] = _Node([_device(0, 800, "ACME-X1")], 64000.0)  # a fourth state: the numbering starts afresh
    store.refresh(rows, np.array([4, 2, 3]), nodes)
    assert store.epoch == epoch + 1 and (store.device_id[rows] >= 0).all()
    got = single_growth(store, rows, request, mix, weights, need, memo)
    assert np.array_equal(got, _direct(store, rows, request, mix, weights, need))
