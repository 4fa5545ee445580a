"""The FGD paper's setup in the engine: classes of pods without devices, popularity weights that are not
renormalised, and ties broken by the order nodes were learned (``scheduler.fgd.ties: order``)."""

from __future__ import annotations

from typing import Any, get_args

import numpy as np
import pytest
from core_helpers import acme, acme_device, make_node, make_pod, scheduled

from hami_core.engine.workload import DEVICELESS, Shape, pod_shapes
from hami_core.plugins.types import DeviceInfo, DeviceUsage
from hami_core.policies.fgd.config import FgdConfig
from hami_core.policies.fgd.fragmentation import DeviceArrays, Mix, fragmentation, placement_delta
from hami_core.policies.fgd.growth import node_growth
from hami_core.policies.fgd.mix import TIE_BREAKS, Workload, WorkloadModel
from hami_core.policies.fgd.plugin import engine_state

HALF = Shape("ACME", 1, 50, 500)  # half a card
CPU_ONLY = {"nums": 0, "weight": 0.2, "cpuMilli": 4000}


def dev(i: int, used_milli: int = 0) -> DeviceUsage:
    d = DeviceUsage(DeviceInfo(id=f"g{i}", index=i, count=10, devmem=1000, devcore=100, type="ACME-X1", numa=0,
                               health=True))
    if used_milli:
        d.used, d.usedcores, d.usedmem = 1, used_milli // 10, used_milli
    return d


def arrays(*nodes: list[DeviceUsage], host: list[tuple[float, float]]) -> tuple[DeviceArrays, list[str]]:
    return DeviceArrays.build(list(nodes), {"ACME-X1": 0}, np.array(host, dtype=float)), ["ACME-X1"]


def test_a_deviceless_class_counts_every_free_share() -> None:
    # free shares: A [1000, 1000], B [300, 1000]; B also lacks the CPU the half-card class needs
    dev_arr, types = arrays([dev(0), dev(1)], [dev(0, 700), dev(1)], host=[(64000, 1e9), (1000, 1e9)])
    assert fragmentation(dev_arr, Mix([(DEVICELESS, 1.0, 4000, 0)], types)).tolist() == [2000.0, 1300.0]
    mix = Mix([(HALF, 0.8, 2000, 0), (DEVICELESS, 0.2, 4000, 0)], types)
    # A: the half class uses both cards, the deviceless class strands 2000; B: the half class cannot run (CPU)
    assert fragmentation(dev_arr, mix).tolist() == [0.2 * 2000, 1300.0]
    # placing 300 milli takes 300 off every row's free share: the deviceless class's fragments shrink by 0.2 x 300
    third = Shape("ACME", 1, 30, 300)
    alone = placement_delta(dev_arr, third, Mix([(HALF, 0.8, 2000, 0)], types), select="binpack")
    assert np.allclose(placement_delta(dev_arr, third, mix, select="binpack"), alone - 0.2 * 300)


def test_deviceless_classes_join_every_backend_and_keep_the_step_count() -> None:
    typed = Shape("ACME", 1, 50, 500, use_types=("X1",))
    workload = Workload(1, ((HALF, 0.5, 0, 0), (DEVICELESS, 0.3, 0, 0), (Shape("OTHER", 1), 0.2, 0, 0)))
    assert workload.backends == ["ACME", "OTHER"]
    assert [c[0] for c in workload.for_backend("OTHER")] == [DEVICELESS, Shape("OTHER", 1)]
    assert workload.steps == 25  # a deviceless class is not a device-type constraint
    assert Workload(1, ((typed, 1.0, 0, 0), (DEVICELESS, 0.3, 0, 0))).steps == 100
    assert not DEVICELESS.accepts("ACME-X1") and DEVICELESS.deviceless


def test_fixed_weights_are_shares_of_all_pods(make_engine: Any) -> None:
    """Weights summing to at most 1 are each class's share of all pods and are used as given (the rest add no
    fragments); larger sums are relative and normalised."""
    engine = make_engine({"acme": {}, "scheduler": {"fgd": {"workload": [
        {"backend": "ACME", "cores": 50, "memory": 500, "weight": 0.5}, CPU_ONLY]}}})
    classes = engine_state(engine).model.snapshot().classes
    assert [(c[0], c[1], c[2]) for c in classes] == [(HALF, 0.5, 0.0), (DEVICELESS, 0.2, 4000.0)]
    assert WorkloadModel(fixed=[(HALF, 2.0, 0, 0), (DEVICELESS, 2.0, 0, 0)]).snapshot().classes[0][1] == 0.5
    with pytest.raises(ValueError, match="ties must be one of packing, order, balance, auto, got 'first'"):
        WorkloadModel(ties="first")


def test_growth_with_a_deviceless_class_cached_and_fresh(make_engine: Any) -> None:
    """The engine's cached growth (class deltas re-weighted per mix) equals a fresh computation with the class."""
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                    "fgd": {"workload": [
                                                        {"backend": "ACME", "cores": 50, "memory": 500,
                                                         "weight": 0.6}, CPU_ONLY]}}})
    for n, used in (("A", 400), ("B", 650), ("C", 0)):
        engine.upsert_node(make_node(n, [acme_device(i, devmem=1000, id=f"{n}-g{i}") for i in range(2)]))
        if used:
            engine.upsert_pod(scheduled(make_pod(f"run-{n}"), n, f"{n}-g0,ACME,{used},{used // 10}:;"))
    pod = make_pod("p", acme(1, 300, 30))
    decision = engine.schedule(pod)
    nodes = [engine.nodes[n] for n in decision.nodes]
    shapes = pod_shapes(pod, engine.requests(pod), engine.backends)
    fresh = node_growth(nodes, shapes, engine_state(engine).model.snapshot(), "binpack")
    without = node_growth(nodes, shapes, Workload(1, engine_state(engine).model.snapshot().classes[:1]), "binpack")
    assert np.allclose(fresh, without - 0.2 * 300)
    assert decision.node == "B"  # fills B's 350-free card


def _two_equal_nodes(engine: Any) -> None:
    # "first" is learned first and idle; "second" carries one whole-card pod on a card the mix cannot use anyway
    for n in ("first", "second"):
        engine.upsert_node(make_node(n, [acme_device(i, devmem=1000, id=f"{n}-g{i}") for i in range(2)]))
    engine.upsert_pod(scheduled(make_pod("busy"), "second", "second-g1,ACME,1000,100:;"))


def test_order_ties_take_the_first_learned_node(make_engine: Any) -> None:
    """Within one score step ``packing`` prefers the fuller node, ``order`` the node the scheduler learned first
    (the paper's simulator keeps node-list order)."""
    whole = {"backend": "ACME", "cores": 100, "memory": 1000, "weight": 0.5}
    chosen = {}
    for ties in ("packing", "order"):
        engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "fgd", "gpuSchedulerPolicy": "binpack",
                                                        "fgd": {"ties": ties, "scoreSteps": 4,
                                                                "workload": [whole]}}})
        _two_equal_nodes(engine)
        decision = engine.schedule(make_pod("p", acme(1, 100, 10)), limit=None)
        chosen[ties] = decision.node
        assert decision.scores["first"] // 100 == decision.scores["second"] // 100  # one step: a tie
    assert chosen == {"packing": "second", "order": "first"}


def test_the_config_offers_exactly_the_tie_breaks_the_model_knows() -> None:
    """``scheduler.fgd.ties`` (a pydantic Literal) and ``WorkloadModel`` (``TIE_BREAKS``) list the same choices, and
    the model refuses anything else."""
    assert set(get_args(FgdConfig.model_fields["ties"].annotation)) == set(TIE_BREAKS)
    for ties in TIE_BREAKS:
        assert WorkloadModel(ties=ties).snapshot().ties == ties
    with pytest.raises(ValueError, match="ties must be one of packing, order"):
        WorkloadModel(ties="random")
