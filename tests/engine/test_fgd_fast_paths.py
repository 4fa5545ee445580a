"""The fgd policy's shortcuts for speed (issue 32, docs/fgd.md "Cost"), each held to the figure or decision it
replaces: a pod without devices is computed only where its CPU and memory change a class's fit; signatures of one
request share one growth memo; one row's key is the batch's; a new mix's row state is computed once per device
state; only the nodes the engine's capacity prefilter keeps are scored (the claims still made on every node); a pod
no node has the capacity for is not scored at all; and a pod without devices under ``limit=1`` is ranked to its best
node alone.
"""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np
import pytest
from core_helpers import acme, acme_device, acme_usage, make_node, make_pod, scheduled

from hami_core.engine.workload import DEVICELESS, Shape
from hami_core.plugins.types import DeviceUsage, GpuPolicy, NodeBatch
from hami_core.policies.fgd import growth as growth_module
from hami_core.policies.fgd import plugin as fgd_plugin
from hami_core.policies.fgd.fragmentation import MixState
from hami_core.policies.fgd.growth import FgdState, node_growth
from hami_core.policies.fgd.mix import Workload
from hami_core.policies.fgd.rowmemo import row_key, row_keys
from hami_core.policies.fgd.rowstore import RowStore
from hami_core.policies.fgd.score import INFEASIBLE, node_scores


class _Node:
    def __init__(self, devices: list[DeviceUsage], cpu: float, mem: float = 64_000.0) -> None:
        self.devices = {"ACME": devices}
        self.host_total = (cpu, mem)
        self.host_used = [0.0, 0.0]


def _nodes(rng: random.Random, n: int = 6, types: tuple[str, ...] = ("ACME-X1",)) -> list[_Node]:
    nodes = [_Node([acme_usage(j, rng.choice([0, 0, 300, 700, 1000]), rng.choice(types))
                    for j in range(rng.randint(1, 4))],
                   rng.choice([2000.0, 6000.0, 9000.0, 16000.0]), rng.choice([4000.0, 64000.0])) for _ in range(n)]
    return nodes + [copy.deepcopy(rng.choice(nodes)) for _ in range(3)]  # alike nodes


def _workload(version: int, rng: random.Random, typed: bool = False) -> Workload:
    classes: list[tuple[Shape, float, float, float]] = [
        (Shape("ACME", rng.choice([1, 2]), c, 0, c, ("Y2",) if typed and rng.random() < 0.5 else ()),
         rng.random() + 0.01, float(rng.choice([0, 2000, 4000, 8000])), float(rng.choice([0, 2048, 8192])))
        for c in rng.sample([10, 30, 50, 100], 3)]
    classes.append((DEVICELESS, 0.2, 3000.0, 1024.0))
    total = sum(c[1] for c in classes)
    return Workload(version, tuple((s, w / total, cpu, mem) for s, w, cpu, mem in classes))


def _batch(nodes: list[Any], stamps: np.ndarray, shapes: tuple[Shape, ...], workload: Workload,
           cache: dict[str, Any] | None = None, possible: np.ndarray | None = None) -> NodeBatch:
    rows = np.arange(len(nodes), dtype=np.intp)
    totals = np.array([[sum(d.used for d in n.devices["ACME"]), len(n.devices["ACME"]),
                        sum(d.usedcores for d in n.devices["ACME"]), 100 * len(n.devices["ACME"]),
                        sum(d.usedmem for d in n.devices["ACME"]), 1000 * len(n.devices["ACME"])] for n in nodes],
                      dtype=float)
    return NodeBatch(nodes, totals, rows=rows, generations=stamps, shapes=shapes, workload=workload,
                     cache={} if cache is None else cache, possible=possible)


@pytest.mark.parametrize("seed", range(10))
def test_a_pod_without_devices_is_computed_only_where_a_class_fit_changes(seed: int) -> None:
    rng = random.Random(seed)
    nodes = _nodes(rng)
    stamps = np.arange(1, len(nodes) + 1, dtype=np.int64)
    state = FgdState()
    for version in range(1, 4):
        workload = _workload(version, rng)
        for host in ((500, 0), (2500, 512), (7000, 4096), (0, 9000)):
            got = state.growth(_batch(nodes, stamps, (), workload), workload, "fgd", (1, 1, 1), host)
            fresh = node_growth(nodes, (), workload, "fgd", host=host)  # every class on every node
            assert np.array_equal(got, fresh), (seed, version, host)
        r = rng.randrange(len(nodes))
        nodes[r].host_used[0] += rng.choice([1000, 3000])
        stamps[r] = stamps.max() + 1


def test_signatures_of_one_request_share_its_memo(monkeypatch: Any) -> None:
    """A second CPU size of the same request computes only the nodes where it changes which classes fit."""
    # one device state; free CPU 16000, 16000, 9000: a 1000-CPU pod leaves every class fit everywhere (one key for
    # the three nodes); a 3000-CPU pod leaves them fit on the first two (the same key) and the 8000-CPU class unfit
    # on the third (a key of its own)
    nodes = [_Node([acme_usage(0, 300), acme_usage(1, 0)], cpu) for cpu in (16000.0, 16000.0, 9000.0)]
    stamps = np.arange(1, 4, dtype=np.int64)
    request = Shape("ACME", 1, 30, 0, 30)
    workload = Workload(1, ((request, 0.5, 8000.0, 0.0), (Shape("ACME", 1, 60, 0, 60), 0.5, 0.0, 0.0)))
    computed: list[int] = []
    single = growth_module.single_growth

    def counting(store: Any, rows: np.ndarray, *args: Any, **kw: Any) -> np.ndarray:
        computed.append(len(rows))
        return single(store, rows, *args, **kw)

    monkeypatch.setattr(growth_module, "single_growth", counting)
    state = FgdState()
    first = state.growth(_batch(nodes, stamps, (request,), workload), workload, "fgd", (1, 1, 1), (1000, 0))
    assert computed == [1]
    computed.clear()
    second = state.growth(_batch(nodes, stamps, (request,), workload), workload, "fgd", (1, 1, 1), (3000, 0))
    assert computed == [1]  # the third node alone: the others' key is the first signature's
    assert len(state._row_memos) == 1 and len(state.by_signature) == 2
    monkeypatch.undo()
    for host, got in (((1000, 0), first), ((3000, 0), second)):
        assert np.array_equal(got, node_growth(nodes, (request,), workload, "fgd", host=host))


@pytest.mark.parametrize("seed", range(6))
def test_one_rows_key_is_the_batchs(seed: int) -> None:
    rng = random.Random(seed)
    nodes = _nodes(rng)
    store = RowStore("ACME")
    rows = np.arange(len(nodes), dtype=np.intp)
    store.refresh(rows, rows.astype(np.int64) + 1, nodes)
    workload = _workload(1, rng)
    mix = store.mix_for(1, workload.for_backend("ACME"))
    for need in ((0, 0), (3000, 0), (8000, 4096), (20000, 100000)):
        keys = row_keys(store, rows, mix, need)
        assert keys.ndim == 1
        assert [row_key(store, r, mix, need) for r in rows.tolist()] == keys.tolist()
        # equal keys: equal devices and equal fits of every class before and after the pod
        host = store.host[rows]
        after = host - np.asarray(need, dtype=float)
        fits = np.concatenate([(host[:, :1] >= mix.cpu) & (host[:, 1:] >= mix.mem),
                               (after[:, :1] >= mix.cpu) & (after[:, 1:] >= mix.mem), after >= 0], axis=1)
        for i in rows:
            for j in rows:
                same = store.device_id[i] == store.device_id[j] and (fits[i] == fits[j]).all()
                assert (keys[i] == keys[j]) == same


@pytest.mark.parametrize("seed", range(6))
def test_a_new_mix_computes_the_row_state_once_per_device_state(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [copy.deepcopy(n) for n in _nodes(rng, 8, ("ACME-X1", "ACME-Y2")) for _ in range(5)]
    for n in nodes:  # alike devices, different free CPU: the host part is each row's own
        n.host_used[0] = rng.choice([0, 1000, 5000])
    store = RowStore("ACME")
    rows = np.arange(len(nodes), dtype=np.intp)
    store.refresh(rows, rows.astype(np.int64) + 1, nodes)
    mix = store.mix_for(1, _workload(1, rng, typed=True).for_backend("ACME"))
    assert len(rows) >= 32 and len(set(store.device_id.tolist())) < len(rows)
    got = store.state(rows, mix)
    want = MixState.of(store.view(rows), mix)
    for f in MixState.__slots__:
        assert np.array_equal(getattr(got, f), getattr(want, f)), f


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_only_the_possible_nodes_are_scored(seed: int, typed: bool) -> None:
    """The possible nodes' scores are those of a whole batch, the reservation term's claims made on every node."""
    rng = random.Random(seed)
    nodes = _nodes(rng, 8, ("ACME-X1", "ACME-Y2") if typed else ("ACME-X1",))
    nodes = [n for n in nodes if len({d.type for d in n.devices["ACME"]}) == 1]  # one type per node (as openb)
    stamps = np.arange(1, len(nodes) + 1, dtype=np.int64)
    workload = _workload(1, rng, typed=typed)
    assert workload.typed == typed
    shapes = (Shape("ACME", 1, 30, 0, 30),)
    pod = make_pod("p", acme(1, 300, 30))
    policy = GpuPolicy(node="fgd", gpu="fgd")
    possible = np.array([rng.random() < 0.5 for _ in nodes])
    possible[0], possible[-1] = True, False
    whole = node_scores(pod, _batch(nodes, stamps, shapes, workload), policy, workload)
    part = node_scores(pod, _batch(nodes, stamps, shapes, workload, possible=possible), policy, workload)
    assert np.array_equal(part[possible], whole[possible])
    assert (part[~possible] == INFEASIBLE).all()


def _engine_with_full_nodes(make_engine: Any) -> Any:
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "fgd",
                                                    "fgd": {"workload": [
                                                        {"backend": "ACME", "cores": 50, "memory": 500}]}}})
    for n in ("a", "b", "c"):
        engine.upsert_node(make_node(n, [acme_device(i, devmem=1000, id=f"{n}-g{i}") for i in range(2)]))
        engine.upsert_pod(scheduled(make_pod(f"run-{n}"), n, f"{n}-g0,ACME,1000,100:;{n}-g1,ACME,800,80:;"))
    return engine


def test_a_pod_no_node_has_room_for_is_not_scored(make_engine: Any, monkeypatch: Any) -> None:
    engine = _engine_with_full_nodes(make_engine)
    scored: list[int] = []
    real = fgd_plugin.node_scores

    def counting(pod: Any, batch: NodeBatch, *args: Any, **kw: Any) -> np.ndarray:
        scored.append(len(batch.nodes))
        return real(pod, batch, *args, **kw)

    monkeypatch.setattr(fgd_plugin, "node_scores", counting)
    decision = engine.schedule(make_pod("big", acme(1, 500, 50)), limit=1)
    assert decision.node is None and scored == []
    assert sorted(decision.failed) == ["a", "b", "c"] and all(decision.failed.values())
    small = engine.schedule(make_pod("small", acme(1, 100, 10)), limit=1)  # room on each g1: scored, placed
    assert small.node is not None and scored == [3]
    assert small.node == engine.schedule(make_pod("small", acme(1, 100, 10))).node  # as when every node is fit


def test_a_pod_without_devices_is_ranked_to_its_best_node_under_a_limit(make_engine: Any) -> None:
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "fgd": {"workload": [
        {"backend": "ACME", "cores": 50, "memory": 500, "cpuMilli": 8000}]}}})
    for name, cpu in (("small", "10"), ("big", "64"), ("mid", "20")):
        engine.upsert_node(make_node(name, [acme_device(i, devmem=1000, id=f"{name}-{i}") for i in range(2)],
                                     allocatable={"cpu": cpu, "memory": "256Gi"}))
    pod = make_pod("cpu", {"name": "c", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}})
    full = engine.schedule(pod)
    best = engine.schedule(pod, limit=1)
    assert full.skipped and best.skipped
    assert len(full.nodes) == 3 and best.nodes == full.nodes[:1] == ("big",)
    assert best.scores == {"big": full.scores["big"]}
    assert engine.schedule(pod, limit=2).nodes == full.nodes[:2]



def test_the_claims_are_made_on_every_node_not_only_the_possible_ones() -> None:
    """Y2 cards are claimed by a Y2-only class; with every Y2 card counted the claim is lighter (a third of their
    free share) than counted on the two possible nodes alone (a half): the possible nodes' scores are the whole
    batch's."""
    y2_only = Shape("ACME", 1, 100, 0, 100, ("Y2",))
    anywhere = Shape("ACME", 1, 30, 0, 30)
    workload = Workload(1, ((y2_only, 0.1, 0.0, 0.0), (anywhere, 0.9, 0.0, 0.0)), ties="order")
    nodes = [_Node([acme_usage(j, 0, "ACME-Y2") for j in range(4)], 64000.0) for _ in range(6)]
    nodes += [_Node([acme_usage(j, 0, "ACME-X1") for j in range(4)], 64000.0) for _ in range(2)]
    stamps = np.arange(1, len(nodes) + 1, dtype=np.int64)
    possible = np.array([True] + [False] * 5 + [True, False])
    pod = make_pod("p", acme(1, 300, 30))
    policy = GpuPolicy(node="fgd", gpu="fgd")
    whole = node_scores(pod, _batch(nodes, stamps, (anywhere,), workload), policy, workload)
    part = node_scores(pod, _batch(nodes, stamps, (anywhere,), workload, possible=possible), policy, workload)
    assert np.array_equal(part[possible], whole[possible])
