"""The ``fgd`` policy: the fragmentation measure on small hand-computed nodes, and the choices it makes.

Devices here have 1000 MiB and 100 cores, so MiB equal GPU milli and the numbers can be checked by hand.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from core_helpers import acme, acme_device, make_node, make_pod, scheduled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.engine.facade import Engine
from hami_core.engine.pods import host_requests
from hami_core.engine.workload import Shape, pod_shapes
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, DeviceInfo, DeviceUsage, GpuPolicy, NodeBatch
from hami_core.policies.fgd import plugin as fgd_plugin
from hami_core.policies.fgd.fragmentation import DeviceArrays, Mix, fgd_device_order, fragmentation, placement_delta
from hami_core.policies.fgd.growth import FgdState, node_growth
from hami_core.policies.fgd.mix import Workload, WorkloadModel
from hami_core.policies.fgd.plugin import engine_state
from hami_core.policies.fgd.score import device_select, quantised_score

HALF = Shape("ACME", 1, 50, 500)  # half a card
WHOLE = Shape("ACME", 1, 100, 1000)
UNSET = MEM_PERCENTAGE_UNSET


def dev(i: int, used_milli: int = 0, *, type: str = "ACME-X1", slots: int = 10) -> DeviceUsage:
    d = DeviceUsage(DeviceInfo(id=f"g{i}", index=i, count=slots, devmem=1000, devcore=100, type=type, numa=0,
                               health=True))
    if used_milli:
        d.used, d.usedcores, d.usedmem = 1, used_milli // 10, used_milli
    return d


def arrays(*nodes: list[DeviceUsage], host: list[tuple[float, float]] | None = None) -> tuple[DeviceArrays, list[str]]:
    types = sorted({d.type for n in nodes for d in n})
    return DeviceArrays.build(list(nodes), {t: i for i, t in enumerate(types)},
                              np.array(host, dtype=float) if host is not None else None), types


# ------------------------------------------------------------------------------------- the measure
def test_fragmentation_hand_computed() -> None:
    # free shares: A [1000, 1000], B [300, 1000], C [300, 300]
    dev_arr, types = arrays([dev(0), dev(1)], [dev(0, 700), dev(1)], [dev(0, 700), dev(1, 700)])
    half_only = Mix([(HALF, 1.0, 0, 0)], types)
    assert fragmentation(dev_arr, half_only).tolist() == [0.0, 300.0, 600.0]
    # whole cards: a partly used card is a fragment; C cannot host one at all, so all 600 is fragment
    mixed = Mix([(HALF, 0.5, 0, 0), (WHOLE, 0.5, 0, 0)], types)
    assert fragmentation(dev_arr, mixed).tolist() == [0.0, 300.0, 600.0]
    # two whole cards: B can no longer host it, so its whole free 1300 is fragment
    two = Mix([(Shape("ACME", 2, 100, 1000), 1.0, 0, 0)], types)
    assert fragmentation(dev_arr, two).tolist() == [0.0, 1300.0, 600.0]


def test_fragmentation_counts_cpu_and_types() -> None:
    dev_arr, types = arrays([dev(0), dev(1)], [dev(0), dev(1, type="ACME-Y2")], host=[(4000, 1e9), (64000, 1e9)])
    needs_cpu = Mix([(HALF, 1.0, 8000, 0)], types)
    # node 0 has 4 CPUs free: a pod that needs 8 cannot run, so its 2000 free milli are all fragments
    assert fragmentation(dev_arr, needs_cpu).tolist() == [2000.0, 0.0]
    y_only = Mix([(Shape("ACME", 1, 50, 500, use_types=("Y2",)), 1.0, 0, 0)], types)
    # the X1 cards are refused by the class: node 0 cannot host it at all; node 1 strands its X1 card
    assert fragmentation(dev_arr, y_only).tolist() == [2000.0, 1000.0]


def test_placement_growth_hand_computed() -> None:
    dev_arr, types = arrays([dev(0), dev(1)], [dev(0, 700), dev(1)], [dev(0, 700), dev(1, 700)])
    mix = Mix([(HALF, 1.0, 0, 0)], types)
    third = Shape("ACME", 1, 30, 300)
    # binpack picks the busiest card that fits: on B and C that is the 300-free card, which it fills
    assert placement_delta(dev_arr, third, mix, select="binpack").tolist() == [0.0, -300.0, -300.0]
    # spread picks the idlest: B's empty card (700 left, still usable), C has no choice
    assert placement_delta(dev_arr, third, mix, select="spread").tolist() == [0.0, 0.0, -300.0]
    assert placement_delta(dev_arr, third, mix, select="fgd").tolist() == [0.0, -300.0, -300.0]
    # two whole cards fit only on A
    assert placement_delta(dev_arr, Shape("ACME", 2, 100, 1000), mix).tolist()[1:] == [np.inf, np.inf]
    # a pod whose CPU would leave too little for the mix strands the node's other free share
    dev_arr, types = arrays([dev(0), dev(1)], host=[(10000, 1e9)])
    mix = Mix([(HALF, 1.0, 6000, 0)], types)
    assert placement_delta(dev_arr, HALF, mix, host_need=(6000, 0)).tolist() == [1500.0]


def test_device_order_prefers_least_growth_last() -> None:
    # free 1000, 400, 800; a 400 request: filling g1 removes a 400 fragment (-400), g0 leaves 600 usable (0),
    # g2 leaves a 400 fragment (+400). The fit walks from the end, so the best device is last.
    devices = [dev(0), dev(1, 600), dev(2, 200)]
    order = fgd_device_order(devices, Shape("ACME", 1, 40, 400), [(HALF, 1.0, 0, 0)], (1e9, 1e9), (0, 0))
    assert [d.id for d in order] == ["g2", "g0", "g1"]


def test_quantised_score() -> None:
    assert quantised_score(np.array([0.0, -300.0, 300.0, np.inf])).tolist() == [50.0, 57.0, 42.0, 0.0]


# ------------------------------------------------------------------------------------- the workload mix
def test_workload_model_window_dedupe_and_versions() -> None:
    model = WorkloadModel(window=3, tolerance=0.0)
    assert model.snapshot().classes == ()
    model.observe("a", [HALF], (1000, 0))
    model.observe("a", [HALF], (1000, 0))  # the same pod filtered again counts once
    model.observe("b", [WHOLE], (4000, 0))
    snap = model.snapshot()
    assert {(c[0], c[1], c[2]) for c in snap.classes} == {(HALF, 0.5, 1000.0), (WHOLE, 0.5, 4000.0)}
    for key in "cde":
        model.observe(key, [WHOLE], (4000, 0))
    snap2 = model.snapshot()  # a and b fell out of the window
    assert snap2.version > snap.version
    assert [(c[0], c[1]) for c in snap2.classes] == [(WHOLE, 1.0)]


def test_workload_model_tolerance_and_coverage() -> None:
    model = WorkloadModel(window=1000, tolerance=0.1, coverage=0.9)
    for i in range(95):
        model.observe(f"w{i}", [WHOLE])
    for i in range(5):
        model.observe(f"h{i}", [HALF])
    first = model.snapshot()
    assert [c[0] for c in first.classes] == [WHOLE]  # 90 % coverage keeps only the popular class
    model.observe("h-more", [HALF])
    assert model.snapshot() is first  # moved by less than the tolerance: same snapshot, caches stay valid


def test_fixed_mix_from_config(make_engine: Any) -> None:
    engine = make_engine({"acme": {}, "scheduler": {"fgd": {"workload": [
        {"backend": "ACME", "cores": 50, "memory": 500, "weight": 3, "cpuMilli": 2000},
        {"backend": "ACME", "cores": 100, "memory": 1000, "weight": 1}]}}})
    snap = engine_state(engine).model.snapshot()
    assert not engine_state(engine).model.learning
    assert [(c[0], c[1], c[2]) for c in snap.classes] == [(HALF, 0.75, 2000.0), (WHOLE, 0.25, 0.0)]
    engine.schedule(make_pod("p", acme(1, 100)))
    assert engine_state(engine).model.snapshot() is snap  # a fixed mix does not learn


@pytest.mark.parametrize(("fgd", "field"), [
    ({"window": 0}, "scheduler.fgd.window"),
    ({"coverage": 1.5}, "scheduler.fgd.coverage"),
    ({"workload": [{"nums": -1}]}, "scheduler.fgd.workload.0.nums"),
    ({"workload": [{"nums": 0, "cores": 10}]}, "scheduler.fgd.workload.0"),
    ({"ties": "random"}, "scheduler.fgd.ties"),
    ({"workload": [{"cores": 101}]}, "scheduler.fgd.workload.0.cores"),
    ({"workload": [{"weight": -1}]}, "scheduler.fgd.workload.0.weight"),
    ({"workload": [{"color": "red"}]}, "scheduler.fgd.workload.0.color"),
])
def test_bad_fgd_config_names_the_field(make_engine: Any, fgd: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make_engine({"acme": {}, "scheduler": {"fgd": fgd}})


def test_unknown_node_policy_is_a_config_error(make_engine: Any) -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.nodeSchedulerPolicy: unknown node policy 'fdg'.*fgd"):
        make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fdg"}})


def test_scheduler_cli_accepts_fgd() -> None:
    from hami_core.cli import _build_parser

    args = _build_parser().parse_args(["scheduler", "--node-scheduler-policy", "fgd", "--gpu-scheduler-policy", "fgd"])
    assert (args.node_scheduler_policy, args.gpu_scheduler_policy) == ("fgd", "fgd")


# ------------------------------------------------------------------------------------- decisions
def _cluster(engine: Engine) -> None:
    # A: two cards 40 % used (total 80 %); B: one card 65 % used, one idle (total 65 %).
    devs = [acme_device(i, devmem=1000, id=f"{n}-g{i}") for n in "AB" for i in range(2)]
    engine.upsert_node(make_node("A", devs[:2]))
    engine.upsert_node(make_node("B", devs[2:]))
    for node, dev_id, milli in (("A", "A-g0", 400), ("A", "A-g1", 400), ("B", "B-g0", 650)):
        engine.upsert_pod(scheduled(make_pod(f"run-{dev_id}"), node, f"{dev_id},ACME,{milli},{milli // 10}:;"))


HALF_MIX = {"workload": [{"backend": "ACME", "cores": 50, "memory": 500}]}


def test_fgd_chooses_where_fragmentation_grows_least(make_engine: Any) -> None:
    pod = make_pod("p", acme(1, 300, 30))
    binpack = make_engine({"acme": {}, "scheduler": {"gpuSchedulerPolicy": "binpack"}})
    _cluster(binpack)
    assert binpack.schedule(pod, limit=1).node == "A"  # the fuller node; leaves a 300 fragment on A
    fgd = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                 "fgd": HALF_MIX}})
    _cluster(fgd)
    for limit in (1, None):
        decision = fgd.schedule(pod, limit=limit)
        assert decision.node == "B"  # fills B's 350-free card: removes a fragment instead of making one
        assert [d.uuid for d in decision.devices["ACME"][0]] == ["B-g0"]
    # selectable per pod by annotation over a binpack default
    annotated = make_pod("q", acme(1, 300, 30), annotations={"hami.io/node-scheduler-policy": "fgd"})
    binpack_with_mix = make_engine({"acme": {}, "scheduler": {"gpuSchedulerPolicy": "binpack", "fgd": HALF_MIX}})
    _cluster(binpack_with_mix)
    assert binpack_with_mix.schedule(annotated, limit=1).node == "B"


def test_fgd_gpu_policy_picks_the_device(make_engine: Any) -> None:
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "fgd",
                                                    "fgd": HALF_MIX}})
    devs = [acme_device(i, devmem=1000, id=f"g{i}") for i in range(3)]
    engine.upsert_node(make_node("n", devs))
    for dev_id, milli in (("g1", 600), ("g2", 200)):
        engine.upsert_pod(scheduled(make_pod(f"run-{dev_id}"), "n", f"{dev_id},ACME,{milli},{milli // 10}:;"))
    decision = engine.schedule(make_pod("p", acme(1, 400, 40)), limit=1)
    assert [d.uuid for d in decision.devices["ACME"][0]] == ["g1"]  # exactly fills the 400-free card


def test_fgd_without_a_mix_is_binpack(make_engine: Any) -> None:
    """A batch without a workload (hand-built, or nothing learned yet) is scored as HAMi's binpack."""
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd"}})
    _cluster(engine)
    engine.table.refresh()
    nodes = [engine.nodes["A"], engine.nodes["B"]]
    batch = NodeBatch(nodes, engine.table.totals[engine.table.rows(nodes)])
    pod = make_pod("p", acme(1, 300, 30))
    scores = fgd_plugin.hami_prescore_nodes(pod=pod, batch=batch, policy=GpuPolicy(node="fgd"))
    assert scores is not None and scores[0] > scores[1]  # A is the fuller node
    empty = NodeBatch(nodes, batch.totals, rows=batch.totals[:, 0], generations=[1, 1], workload=Workload(3))
    assert np.array_equal(fgd_plugin.hami_prescore_nodes(pod=pod, batch=empty, policy=GpuPolicy(node="fgd")), scores)
    # other node policies are not its business
    assert fgd_plugin.hami_prescore_nodes(pod=pod, batch=batch, policy=GpuPolicy(node="binpack")) is None


def test_cpu_only_pod_ranked_by_what_its_cpu_strands(make_engine: Any) -> None:
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "fgd": {"workload": [
        {"backend": "ACME", "cores": 50, "memory": 500, "cpuMilli": 8000}]}}})
    # small has 10 CPUs and two idle cards; big has 64 CPUs and two idle cards
    for name, cpu in (("small", "10"), ("big", "64")):
        engine.upsert_node(make_node(name, [acme_device(i, devmem=1000, id=f"{name}-{i}") for i in range(2)],
                                     allocatable={"cpu": cpu, "memory": "256Gi"}))
    cpu_pod = make_pod("cpu", {"name": "c", "resources": {"requests": {"cpu": "4", "memory": "1Gi"}}})
    decision = engine.schedule(cpu_pod)
    assert decision.skipped and decision.nodes[0] == "big"  # on small it would leave 6 CPUs: no mix pod fits
    assert decision.scores["big"] > decision.scores["small"]
    # the engine counts the CPU of every placed pod, device or not
    engine.upsert_pod({**cpu_pod, "spec": {**cpu_pod["spec"], "nodeName": "small"}})
    assert engine.nodes["small"].host_used == [4000, 1024]
    engine.remove_pod(cpu_pod)
    assert engine.nodes["small"].host_used == [0, 0]
    # a binpack engine echoes device-less pods' candidates unranked, as HAMi does
    plain = make_engine()
    assert not plain.schedule(cpu_pod, ["b", "a"]).scores


# ------------------------------------------------------------------------------------- cache = no cache
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), gpu=st.sampled_from(["binpack", "spread", "fgd"]))
def test_cached_growth_equals_fresh_computation(make_engine: Any, seed: int, gpu: str) -> None:
    """The per-node cache (keyed on table stamps and the mix version) never serves a stale value."""
    rng = random.Random(seed)
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": gpu,
                                                    "fgd": {"tolerance": 0.0, "window": 20}}})
    for n in range(rng.randint(2, 6)):
        devs = [acme_device(g, devmem=1000, id=f"n{n}-g{g}") for g in range(rng.randint(1, 4))]
        engine.upsert_node(make_node(f"n{n}", devs, allocatable={"cpu": str(rng.choice([8, 32, 96])),
                                                                  "memory": "64Gi"}))
    for i in range(20):
        nums = rng.choice([1, 1, 1, 2])
        milli = 1000 if nums > 1 else rng.choice([200, 300, 500, 1000])
        ctr = acme(nums, milli, milli // 10)
        ctr["resources"]["requests"] = {"cpu": str(rng.choice([1, 2, 4, 8]))}
        pod = make_pod(f"p{i}", ctr)
        decision = engine.schedule(pod, limit=1)
        state = engine.plugin_cache.get("fgd")
        if isinstance(state, FgdState) and decision.node is not None:
            workload: Workload = engine_state(engine).model.snapshot()
            names = sorted(engine.nodes)
            nodes = [engine.nodes[n] for n in names]
            shapes = pod_shapes(pod, engine.requests(pod), engine.backends)
            fresh = node_growth(nodes, shapes, workload, device_select(decision.policy), decision.policy.weights,
                                host_requests(pod))
            engine.table.refresh()
            rows = engine.table.rows(nodes)
            batch = NodeBatch(nodes, engine.table.totals[rows], rows=rows, generations=engine.table.generation[rows],
                              shapes=shapes, workload=workload, cache=engine.plugin_cache)
            cached = state.growth(batch, workload, device_select(decision.policy), decision.policy.weights,
                                  host_requests(pod))
            assert np.array_equal(fresh, cached)
        if decision.node is not None and rng.random() < 0.8:
            engine.reserve(pod, decision)
        if rng.random() < 0.2:
            engine.unreserve(make_pod(f"p{rng.randrange(i + 1)}"))


# ------------------------------------------------------------------------------------- kernel equivalences
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), select=st.sampled_from(["binpack", "spread"]))
def test_one_column_growth_equals_full_growth(seed: int, select: str) -> None:
    """Growth evaluated only at the device the fit takes equals the full per-device growth at that device."""
    rng = random.Random(seed)
    nodes = [[dev(j, rng.choice([0, 0, 100, 300, 500, 700, 1000]), type=rng.choice(["ACME-X1", "ACME-Y2"]))
              for j in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 8))]
    host = [(rng.choice([2000, 8000, 64000]), 1e9) for _ in nodes]
    dev_arr, types = arrays(*nodes, host=host)
    classes = [(Shape("ACME", rng.choice([1, 1, 2]), c, c * 10, use_types=rng.choice([(), ("Y2",)])),
                rng.random() + 0.01, rng.choice([0, 4000]), 0) for c in rng.sample([10, 30, 50, 100], 3)]
    mix = Mix(classes, types)
    request = Shape("ACME", 1, rng.choice([20, 50, 100]), 0, rng.choice([20, 50, 100]))
    fast = placement_delta(dev_arr, request, mix, select=select, host_need=(1000, 0))
    from hami_core.policies.fgd.fragmentation import _selection_key, device_growth  # the reference: every device
    full, inc = device_growth(dev_arr, request, mix, dev_arr.host - np.array([1000.0, 0.0]))
    pick = np.argmax(_selection_key(dev_arr, inc, None, select, (1, 1, 1)), axis=1)
    rows = np.arange(len(nodes))
    expected = np.where(inc[rows, pick] & (dev_arr.host[:, 0] >= 1000), full[rows, pick], np.inf)
    assert np.array_equal(fast, expected)


def test_row_store_rebuilds_changed_and_wider_rows() -> None:
    from hami_core.policies.fgd.rowstore import RowStore

    class Node:
        def __init__(self, devices: list[DeviceUsage]) -> None:
            self.devices = {"ACME": devices}
            self.host_total, self.host_used = (8000.0, 1e9), [0, 0]

    narrow, wide = Node([dev(0, 500)]), Node([dev(0), dev(1, 200), dev(2, 900)])
    store = RowStore("ACME")
    store.refresh(np.array([0]), np.array([1]), [narrow])
    assert store.view(np.array([0])).usedmem.tolist() == [[500.0]]
    store.refresh(np.array([0, 1]), np.array([1, 2]), [narrow, wide])  # row 1 is wider: every row rebuilt
    view = store.view(np.array([0, 1]))
    assert view.usedmem.tolist() == [[500.0, 0.0, 0.0], [0.0, 200.0, 900.0]]
    assert view.present.tolist() == [[True, False, False], [True, True, True]]
    narrow.devices["ACME"][0].usedmem = 100
    store.refresh(np.array([0]), np.array([1]), [narrow])  # same stamp: cached, not re-read
    assert store.view(np.array([0])).usedmem[0, 0] == 500.0
    store.refresh(np.array([0]), np.array([3]), [narrow])  # new stamp: re-read
    assert store.view(np.array([0])).usedmem[0, 0] == 100.0
    mix = store.mix_for(1, [(HALF, 1.0, 0, 0)])
    assert store.state(np.array([0, 1]), mix).frag.tolist() == [[0.0, 100.0]]  # row 1: the 100 left on g2
