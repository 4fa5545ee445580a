"""The ``fgd`` device order's plain-Python shortcuts (``hami_core.policies.fgd.fragmentation``).

:func:`usable_devices` decides, device by device in Python, what :meth:`_Spec.usable` decides in numpy over the
node's arrays: which devices could take one device of a request. The device order skips the growth where at most
one device can; these tests pin that both give the same devices on random nodes (full, busy, unhealthy, exhausted
and whole cards, percentages of memory, type selections) and that the order is then the one the growth gives; and
that the order read from the growth's row store and device memo (:meth:`FgdState.device_order`, the policy's hook
under node policy ``fgd``) is :func:`fgd_device_order`'s.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from hami_core.engine.workload import Shape
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, DeviceInfo, DeviceUsage, NodeBatch
from hami_core.policies.fgd.fragmentation import (
    DeviceArrays,
    _mix_of,
    _selection_key,
    _Spec,
    device_growth,
    fgd_device_order,
    usable_devices,
)
from hami_core.policies.fgd.growth import FgdState
from hami_core.policies.fgd.mix import Workload


def _device(rng: random.Random, j: int) -> DeviceUsage:
    devmem = rng.choice([1000, 16384, 32510, 7777])
    devcore = rng.choice([100, 100, 0, 200])
    d = DeviceUsage(DeviceInfo(id=f"g{j}", index=j, count=rng.choice([1, 2, 4, 10]), devmem=devmem, devcore=devcore,
                               type=rng.choice(["ACME-X1", "ACME-Y2"]), numa=rng.choice([-1, 0, 1]),
                               health=rng.random() > 0.1))
    d.used = rng.randint(0, d.count)
    d.usedcores = rng.choice([0, devcore // 2, devcore, max(devcore - 30, 0)])
    d.usedmem = rng.choice([0, devmem // 3, devmem, devmem - 512, rng.randint(0, devmem)])
    return d


def _request(rng: random.Random) -> Shape:
    memreq = rng.choice([0, 0, 512, 4096, 16384])
    pct = rng.choice([MEM_PERCENTAGE_UNSET, 25, 50, 100, 33]) if memreq == 0 else MEM_PERCENTAGE_UNSET
    return Shape("ACME", 1, rng.choice([0, 10, 50, 100, 150]), memreq, pct,
                 rng.choice([(), (), ("Y2",)]), rng.choice([(), (), ("X1",)]))


@pytest.mark.parametrize("seed", range(40))
def test_usable_devices_is_the_vectorised_fit(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(25):
        devices = [_device(rng, j) for j in range(rng.randint(1, 8))]
        request = _request(rng)
        types = sorted({d.type for d in devices})
        dev = DeviceArrays.build([devices], {t: i for i, t in enumerate(types)})
        want = np.flatnonzero(_Spec.of([request], types).usable(dev, dev.used, dev.usedcores, dev.usedmem)[0][0])
        assert usable_devices(devices, request) == want.tolist(), (seed, request)


@pytest.mark.parametrize("seed", range(20))
def test_order_without_choice_is_the_order_the_growth_gives(seed: int) -> None:
    rng = random.Random(100 + seed)
    classes = ((Shape("ACME", 1, 30, 0, 30), 0.6, 0.0, 0.0), (Shape("ACME", 1, 100, 0, 100), 0.4, 2000.0, 0.0))
    checked = 0
    for _ in range(40):
        devices = [_device(rng, j) for j in range(rng.randint(1, 6))]
        request = _request(rng)
        types = sorted({d.type for d in devices})
        host = np.array([(16000.0, 1e9)])
        dev = DeviceArrays.build([devices], {t: i for i, t in enumerate(types)}, host)
        delta, inc = device_growth(dev, request, _mix_of(classes, tuple(types)), host)
        key = _selection_key(dev, inc, delta, "fgd", (1, 1, 1))[0, :len(devices)]
        want = [devices[i].id for i in np.argsort(key, kind="stable")]
        got = [d.id for d in fgd_device_order(devices, request, classes, (16000.0, 1e9), (0.0, 0.0))]
        assert got == want
        checked += int(inc.sum()) <= 1
    assert checked  # some nodes had no choice to make (the shortcut was taken)


class _Table:
    def __init__(self, stamps: np.ndarray) -> None:
        self.generation = stamps
        self.dirty: set[int] = set()


class _Node:
    def __init__(self, devices: list[DeviceUsage], row: int, table: _Table, cpu: float) -> None:
        self.devices = {"ACME": devices}
        self.host_total = (cpu, 1e9)
        self.host_used = [0.0, 0.0]
        self.row = row
        self.table = table


def _workload(rng: random.Random) -> Workload:
    classes = [(Shape("ACME", rng.choice([1, 1, 2]), c, rng.choice([0, 2048]), MEM_PERCENTAGE_UNSET,
                      rng.choice([(), (), ("Y2",)])), rng.random() + 0.01, float(rng.choice([0, 2000, 8000])), 0.0)
               for c in rng.sample([10, 20, 30, 50, 100], 3)]
    total = sum(c[1] for c in classes)
    return Workload(1, tuple((s, w / total, cpu, mem) for s, w, cpu, mem in classes))


@pytest.mark.parametrize("seed", range(20))
def test_order_from_the_growth_memo_is_the_device_order(seed: int) -> None:
    """:meth:`FgdState.device_order` (the row store's and device memo's figures) gives :func:`fgd_device_order`'s
    order, on nodes of one device type in any GPU-policy order, and declines where the store is stale."""
    rng = random.Random(300 + seed)
    stamps = np.arange(1, 13, dtype=np.int64)
    table = _Table(stamps)
    nodes = []
    for r in range(12):
        kind = rng.choice(["ACME-X1", "ACME-Y2"])
        devices = [_device(rng, j) for j in range(rng.randint(2, 8))]
        for d in devices:
            d.type, d.health = kind, True
        nodes.append(_Node(devices, r, table, rng.choice([4000.0, 16000.0, 64000.0])))
    workload = _workload(rng)
    state = FgdState()
    rows = np.arange(12, dtype=np.intp)
    state._store("ACME", rows, stamps, nodes)
    answered = 0
    for node in nodes:
        for _ in range(3):
            request = Shape("ACME", 1, rng.choice([10, 30, 50]), rng.choice([0, 1024]), MEM_PERCENTAGE_UNSET,
                            rng.choice([(), ("X1",)]))
            host, weights = (rng.choice([0, 1000, 6000]), 0), rng.choice([(1, 1, 1), (1, 0, 2)])
            ordered = list(node.devices["ACME"])
            rng.shuffle(ordered)  # the GPU policy's order: positions differ from the node's
            free = (node.host_total[0], node.host_total[1])
            want = fgd_device_order(ordered, request, workload.for_backend("ACME"), free, host, weights)
            got = state.device_order(node, "ACME", request, host, weights, workload, ordered)
            if got is not None:
                answered += 1
                assert [d.id for d in got] == [d.id for d in want], (seed, request)
    assert answered
    table.dirty.add(0)  # a node changed since the store read it: no answer (where it has a choice)
    node = nodes[0]
    if len(usable_devices(node.devices["ACME"], Shape("ACME", 1, 10))) > 1:
        assert state.device_order(node, "ACME", Shape("ACME", 1, 10), (0, 0), (1, 1, 1), workload,
                                  node.devices["ACME"]) is None


@pytest.mark.parametrize("seed", range(10))
def test_nodes_alike_share_their_order_through_the_growth_memo(seed: int) -> None:
    """Once the growth has filled the request's memo, alike nodes (one device state, the same fits) are ordered from
    it: the same order :func:`fgd_device_order` gives, for any GPU-policy order of each node's devices."""
    rng = random.Random(500 + seed)
    base = [_device(rng, j) for j in range(rng.randint(3, 8))]
    for d in base:
        d.type, d.health = "ACME-X1", True
    stamps = np.arange(1, 7, dtype=np.int64)
    table = _Table(stamps)
    nodes = [_Node(copy.deepcopy(base), r, table, 16000.0) for r in range(6)]
    workload = _workload(rng)
    request = Shape("ACME", 1, 10, 0, MEM_PERCENTAGE_UNSET)
    host, weights = (1000, 0), (1, 1, 1)
    state = FgdState()
    rows = np.arange(6, dtype=np.intp)
    batch = NodeBatch(nodes, np.zeros((6, 6)), rows=rows, generations=stamps, shapes=(request,), workload=workload,
                      cache={})
    state.growth(batch, workload, "fgd", weights, host)
    memo = state._row_memos[("ACME", request, weights, "fgd")]
    assert not memo.orders
    perms = [rng.sample(range(len(base)), len(base)) for _ in range(2)]  # two GPU-policy orders
    for k, node in enumerate(nodes + nodes):
        ordered = [node.devices["ACME"][i] for i in perms[k % 2]]
        want = fgd_device_order(ordered, request, workload.for_backend("ACME"), node.host_total, host, weights)
        got = state.device_order(node, "ACME", request, host, weights, workload, ordered)
        if len(usable_devices(ordered, request)) > 1:
            assert got is not None and [d.id for d in got] == [d.id for d in want]
    if len(usable_devices(base, request)) > 1:
        # one entry per listed order: the other ten nodes were answered from the memo
        assert len(memo.orders) == len({tuple(p) for p in perms})
