"""The reservation term end to end: ``hami simulate``'s default protocol (the mix learned online, arrival to 130 %)
on a small openb-style trace where one GPU model is asked for beyond its supply by tasks constrained to it.

Without the term FGD lets unconstrained tasks onto the scarce model (nothing in its measure charges for taking
share); with it they go to the plentiful model and the model-constrained tasks find room (docs/fgd.md).
"""

from __future__ import annotations

from hami_core.engine.config import load_config
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim import openb
from hami_core.sim.experiment import Experiment, Policy
from hami_core.sim.openb import Task, TraceNode
from hami_core.sim.workload import from_task


def _ratio(reserve: float) -> float:
    # T4 nodes listed first: with node-order ties (a typed mix) FGD's equal growths go to them
    nodes = [TraceNode(f"t4-{i}", 64000, 262144, 2, "T4") for i in range(4)]
    nodes += [TraceNode(f"g2-{i}", 96000, 786432, 4, "G2") for i in range(12)]
    tasks = [Task(f"t4-{i}", 4000, 8192, 1, 1000, "T4") for i in range(12)]  # 12 of the 8 T4 cards
    # many small G2-only tasks: the class refusing the T4 outweighs the T4-only one, so FGD's measure alone prefers
    # the T4 for an unconstrained task (it removes more fragments there)
    tasks += [Task(f"g2-{i}", 2000, 4096, 1, 100, "G2") for i in range(24)]
    tasks += [Task(f"any-{i}", 4000, 8192, 1, 500 if i % 2 else 1000) for i in range(40)]
    config = load_config({"nvidia": {}, "scheduler": {"fgd": {"reserve": reserve}}})
    exp = Experiment(config, get_plugin_manager(), [openb.node_object(n) for n in nodes],
                     [from_task(t) for t in tasks], [Policy("fgd", "fgd", "fgd")], seeds=[42, 43, 44])
    runs = exp.run()
    assert all(r.ratio_at_100 is not None for r in runs)
    return sum(r.ratio_at_100 for r in runs if r.ratio_at_100 is not None) / len(runs)


def test_reservation_raises_allocation_where_a_model_is_scarce() -> None:
    off, on = _ratio(0.0), _ratio(1.0)
    assert on > off + 2.0, (off, on)
