"""The ``balance`` and ``auto`` tie-breaks of the ``fgd`` node policy (``scheduler.fgd.ties``): within one score
step, the node whose free host CPU and free device share the pod brings closest to the mix's CPU per share."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from core_helpers import COUNT, acme, acme_device, make_node, make_pod

from hami_core.engine.workload import DEVICELESS, Shape, pod_shapes, shape_share
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET, GpuPolicy, NodeBatch
from hami_core.policies.fgd import plugin as fgd_plugin
from hami_core.policies.fgd.config import FgdConfig
from hami_core.policies.fgd.mix import Workload, WorkloadModel
from hami_core.policies.fgd.plugin import engine_state
from hami_core.policies.fgd.score import balance_scores

HALF = {"backend": "ACME", "cores": 50, "memory": 500, "weight": 0.5, "cpuMilli": 2000}
CPU_ONLY = {"nums": 0, "weight": 0.5, "cpuMilli": 8000}


def test_balance_scores_by_hand() -> None:
    """Two nodes at a ratio of 15.6 CPU milli per milli of share; a pod of 11,908 CPU and 470 share.
    lean: |96,000 - 15.6 x 8,000| = 28,800 before, |84,092 - 15.6 x 7,530| = 33,376 after: +4,576;
    rich: |104,000 - 15.6 x 2,000| = 72,800 before, |92,092 - 15.6 x 1,530| = 68,224 after: -4,576.
    The change spans at most 11,908 + 15.6 x 470 = 19,240 either way, mapped onto 0..50."""
    scores = balance_scores(np.array([96000.0, 104000.0]), np.array([8000.0, 2000.0]), (11908.0, 470.0), 15.6)
    assert scores == pytest.approx([25 * (1 - 4576 / 19240), 25 * (1 + 4576 / 19240)])
    # no change, the extremes, and what cannot be computed
    # a pod at the mix's own ratio changes no imbalance of one sign; 2,000 CPU alone moves 80,000 by 2,000 either way
    at_ratio = balance_scores(np.array([100000.0, 0.0]), np.array([1000.0, 4000.0]), (2000.0, 100.0), 20)
    assert at_ratio.tolist() == [25.0, 25.0]
    flat = balance_scores(np.array([100000.0, 0.0, np.inf]), np.array([1000.0, 4000.0, 1000.0]), (2000.0, 0.0), 20)
    assert flat.tolist() == [50.0, 0.0, 25.0]
    assert balance_scores(np.array([1.0, 2.0]), np.array([1.0, 2.0]), (0.0, 0.0), 20).tolist() == [25.0, 25.0]
    assert balance_scores(np.array([1.0]), np.array([1.0]), (1000.0, 100.0), 0.0).tolist() == [25.0]


def test_share_and_cpu_per_share_of_a_mix() -> None:
    assert shape_share(Shape("ACME", 1, 30, 300)) == 300.0  # cores
    assert shape_share(Shape("ACME", 1, 0, 0, 100)) == 1000.0  # a whole card by memory percentage
    assert shape_share(Shape("ACME", 1, 20, 0, 47)) == 470.0  # the larger of the two
    assert shape_share(Shape("ACME", 1, 0, 4096, MEM_PERCENTAGE_UNSET)) == 0.0  # MiB alone: depends on the card
    # (0.5 x 2,000 + 0.3 x 8,000 + 0.2 x 4,000) / (0.5 x 500 + 0.2 x 2 x 1,000) = 4,200 / 650
    mix = Workload(1, ((Shape("ACME", 1, 50, 500), 0.5, 2000.0, 0.0), (DEVICELESS, 0.3, 8000.0, 0.0),
                       (Shape("ACME", 2, 100, 1000), 0.2, 4000.0, 0.0)))
    assert mix.cpu_per_share() == pytest.approx(4200 / 650)
    assert Workload(1, ((DEVICELESS, 1.0, 8000.0, 0.0),)).cpu_per_share() == 0.0


def test_auto_is_balance_or_order_for_a_typed_mix() -> None:
    plain = ((Shape("ACME", 1, 50, 500), 1.0, 0.0, 0.0),)
    typed = ((Shape("ACME", 1, 50, 500, use_types=("X1",)), 1.0, 0.0, 0.0),)
    assert Workload(1, plain, ties="auto").tie_break == "balance"
    assert Workload(1, typed, ties="auto").tie_break == "order"
    assert Workload(1, (*typed, (DEVICELESS, 1.0, 0.0, 0.0)), ties="balance").tie_break == "balance"
    assert Workload(1, plain, ties="packing").tie_break == "packing"
    # the default, in config and in the model
    assert FgdConfig().ties == "auto" and WorkloadModel().snapshot().ties == "auto"


def _lean_and_rich(engine: Any) -> None:
    """Two idle nodes of two cards each, "lean" (learned first) with 20 CPUs and "rich" with 64."""
    for name, cpu in (("lean", "20"), ("rich", "64")):
        engine.upsert_node(make_node(name, [acme_device(i, devmem=1000, id=f"{name}-g{i}") for i in range(2)],
                                     allocatable={COUNT: "20", "cpu": cpu, "memory": "256Gi"}))


def _cpu_heavy_pod(name: str = "p") -> dict[str, Any]:
    pod = make_pod(name, acme(1, 300, 30))
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "12", "memory": "1Gi"}
    return pod


@pytest.mark.parametrize(("ties", "node"), [("packing", "lean"), ("order", "lean"), ("balance", "rich"),
                                            ("auto", "rich")])
def test_balance_sends_a_cpu_heavy_pod_where_cpu_is_plentiful(make_engine: Any, ties: str, node: str) -> None:
    """The mix asks 20 CPU milli per milli of share ((0.5 x 2,000 + 0.5 x 8,000) / (0.5 x 500)). Both nodes grow
    fragmentation alike for a pod of 12 CPUs and 300 share (one step: a tie). lean goes from |20,000 - 40,000| to
    |8,000 - 34,000|, 6,000 further from the ratio; rich from |64,000 - 40,000| to |52,000 - 34,000|, 6,000 closer.
    Packing (both idle) and order take lean, the first learned; balance takes rich."""
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                    "fgd": {"ties": ties, "scoreSteps": 4,
                                                            "workload": [HALF, CPU_ONLY]}}})
    _lean_and_rich(engine)
    decision = engine.schedule(_cpu_heavy_pod(), limit=None)
    assert decision.scores["lean"] // 100 == decision.scores["rich"] // 100  # one step: a tie
    assert decision.node == node
    if ties in ("balance", "auto"):
        assert decision.scores["lean"] % 100 == pytest.approx(25 * (1 - 6000 / 18000))
        assert decision.scores["rich"] % 100 == pytest.approx(25 * (1 + 6000 / 18000))


def test_a_hand_built_batch_scores_as_the_engine_does(make_engine: Any) -> None:
    """Without the engine's caches (rows, generations) the policy computes afresh and reads the nodes' free CPU and
    share from the same row stores: the same scores."""
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                    "fgd": {"ties": "balance", "scoreSteps": 4,
                                                            "workload": [HALF, CPU_ONLY]}}})
    _lean_and_rich(engine)
    pod = _cpu_heavy_pod()
    decision = engine.schedule(pod, limit=None)
    nodes = [engine.nodes[n] for n in ("lean", "rich")]
    shapes = pod_shapes(pod, engine.requests(pod), engine.backends)
    batch = NodeBatch(nodes, engine.table.totals[engine.table.rows(nodes)], shapes=shapes,
                      workload=engine_state(engine).model.snapshot())
    scores = fgd_plugin.hami_prescore_nodes(pod=pod, batch=batch, policy=GpuPolicy(node="fgd", gpu="binpack"))
    assert scores.tolist() == pytest.approx([decision.scores["lean"], decision.scores["rich"]])


def test_a_pod_without_devices_is_balanced_too(make_engine: Any) -> None:
    """A pod of 8 CPUs and no device (which ``hami simulate`` places through the policy; the engine itself skips
    it) moves lean from 20,000 to 12,000 against a wanted 40,000 (8,000 further: 0) and rich from 64,000 to 56,000
    (8,000 closer: 50): rich wins the tie, keeping lean's CPU for its cards."""
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                    "fgd": {"ties": "balance", "scoreSteps": 4,
                                                            "workload": [HALF, CPU_ONLY]}}})
    _lean_and_rich(engine)
    pod = make_pod("cpu-only")
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "8", "memory": "1Gi"}}
    nodes = [engine.nodes[n] for n in ("lean", "rich")]
    batch = NodeBatch(nodes, engine.table.totals[engine.table.rows(nodes)],
                      workload=engine_state(engine).model.snapshot())
    scores = fgd_plugin.hami_prescore_nodes(pod=pod, batch=batch, policy=GpuPolicy(node="fgd", gpu="binpack"))
    assert scores[0] // 100 == scores[1] // 100
    assert (scores % 100).tolist() == [0.0, 50.0]


def test_the_row_store_keeps_each_rows_free_share(make_engine: Any) -> None:
    """``RowStore.free`` (kept per row as rows are rebuilt, so the tie-break costs a gather) equals the free share
    summed from the rows' devices, after placements and after a wider node widens the store."""
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                    "fgd": {"ties": "balance", "workload": [HALF, CPU_ONLY]}}})
    _lean_and_rich(engine)

    def check() -> Any:
        store = engine.plugin_cache[fgd_plugin.NAME].stores["ACME"]
        rows = np.asarray(engine.table.rows([engine.nodes[n] for n in sorted(engine.nodes)]))
        assert store.free[rows].tolist() == store.view(rows).free_share().sum(axis=1).tolist()
        return store

    for i in range(4):
        pod = _cpu_heavy_pod(f"p{i}")
        engine.reserve(pod, engine.schedule(pod))
        check()
    assert sorted(check().free[:2].tolist()) != [2000.0, 2000.0]  # placements moved the free share
    engine.upsert_node(make_node("wide", [acme_device(i, devmem=1000, id=f"wide-g{i}") for i in range(4)],
                                 allocatable={COUNT: "40", "cpu": "64", "memory": "256Gi"}))
    pod = _cpu_heavy_pod("after")
    engine.reserve(pod, engine.schedule(pod))
    assert check().width == 4
