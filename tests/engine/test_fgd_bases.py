"""The fgd kernel's shortcut over *bases* (classes that book the same on one device) gives the definition's figures.

:class:`~hami_core.policies.fgd.fragmentation.Mix` computes what a class can use once per base and narrows it by
the class's type mask per row; the growth on rows whose devices share one type is summed per base and
device count (``_growth_by_base``). Rows mixing types go class by class (``_growth_by_class``, the
definition). These tests compare the two on random clusters, and pin that a whole replay with type-constrained
tasks makes the same decisions either way.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_core.engine.config import load_config
from hami_core.engine.workload import Shape
from hami_core.plugins.manager import get_plugin_manager
from hami_core.plugins.types import DeviceInfo, DeviceUsage
from hami_core.policies.fgd import fragmentation as frag
from hami_core.policies.fgd.fragmentation import DeviceArrays, Mix, MixState, device_growth, placement_delta
from hami_core.sim import openb
from hami_core.sim.experiment import Experiment, Policy
from hami_core.sim.workload import from_task

TYPES = ("ACME-X1", "ACME-Y2", "ACME-Z3")


def _device(i: int, used_milli: int, type: str, rng: random.Random) -> DeviceUsage:
    d = DeviceUsage(DeviceInfo(id=f"g{i}", index=i, count=rng.choice([1, 4, 10]), devmem=1000, devcore=100, type=type,
                               numa=0, health=rng.random() > 0.05))
    if used_milli:
        d.used, d.usedcores, d.usedmem = 1, used_milli // 10, used_milli
    return d


def _random_case(seed: int) -> tuple[DeviceArrays, Mix, random.Random]:
    """Nodes of one type (most) and of several types, and classes with and without type constraints."""
    rng = random.Random(seed)
    nodes = []
    for _ in range(rng.randint(1, 10)):
        node_type = rng.choice(TYPES)
        mixed = rng.random() < 0.3
        nodes.append([_device(j, rng.choice([0, 0, 100, 300, 500, 700, 1000]),
                              rng.choice(TYPES) if mixed else node_type, rng) for j in range(rng.randint(1, 6))])
    types = sorted({d.type for n in nodes for d in n})
    host = np.array([(rng.choice([2000, 8000, 64000]), rng.choice([4096, 1e9])) for _ in nodes], dtype=float)
    dev = DeviceArrays.build(nodes, {t: i for i, t in enumerate(types)}, host)
    classes = []
    for _ in range(rng.randint(1, 12)):
        cores = rng.choice([10, 30, 50, 100])
        use = rng.choice([(), (), ("Y2",), ("X1", "Z3"), ("Q9",)])
        nouse = rng.choice([(), (), ("Z3",)])
        classes.append((Shape("ACME", rng.choice([1, 1, 2, 4]), cores, 0, cores, use, nouse),
                        rng.random() + 0.01, rng.choice([0, 4000, 16000]), rng.choice([0, 2048, 8192])))
    return dev, Mix(classes, types), rng


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_counts_by_base_equal_counts_by_class(seed: int) -> None:
    """Usable devices and stranded share per class: per base and type mask == device by device, exactly."""
    dev, mix, _ = _random_case(seed)
    share = dev.free_share()
    ok = mix.usable(dev, dev.used, dev.usedcores, dev.usedmem)  # (C, R, G), the definition
    state = MixState.of(dev, mix)
    assert np.array_equal(state.n_ok, ok.sum(axis=2).astype(float))
    assert np.array_equal(state.strand, np.where(ok, 0.0, share).sum(axis=2))
    assert np.array_equal(state.weighted, mix.weight @ state.frag)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_growth_by_base_equals_growth_by_class(seed: int) -> None:
    """Every device's growth (the kernel: per base, class by class on mixed rows) == class by class everywhere."""
    dev, mix, rng = _random_case(seed)
    request = Shape("ACME", 1, rng.choice([20, 50, 100]), 0, rng.choice([20, 50, 100]))
    host_after = dev.host - np.array([1000.0, 512.0])
    state = MixState.of(dev, mix)
    growth, inc = device_growth(dev, request, mix, host_after, state=state)
    spec = frag._Spec.of([request], mix.types)
    post = frag._Post(dev, spec.need(dev.totalmem)[0], float(spec.cores[0, 0, 0]))
    reference = np.round(frag._growth_by_class(dev, post, mix, state, host_after), 6)
    assert growth.shape == reference.shape == inc.shape
    np.testing.assert_allclose(growth, reference, rtol=0, atol=2e-6)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 100_000), select=st.sampled_from(["binpack", "spread", "fgd"]))
def test_placement_delta_equals_class_by_class(seed: int, select: str) -> None:
    """Whole placements (several devices, host resources): the same growth with the shortcut on or off."""
    dev, mix, rng = _random_case(seed)
    request = Shape("ACME", rng.choice([1, 2]), rng.choice([20, 100]), 0, rng.choice([20, 100]))
    fast = placement_delta(dev, request, mix, select=select, host_need=(1000, 512))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(frag, "_row_types", _all_mixed)
        slow = placement_delta(dev, request, mix, select=select, host_need=(1000, 512))
    assert np.array_equal(np.isinf(fast), np.isinf(slow))
    np.testing.assert_allclose(fast[np.isfinite(fast)], slow[np.isfinite(slow)], rtol=0, atol=4e-6)


def _all_mixed(dev: DeviceArrays) -> tuple[np.ndarray, np.ndarray]:
    """Every row counted as mixing types: the kernel then goes class by class (the definition) everywhere."""
    return np.full(len(dev.present), -1, dtype=np.intp), np.ones(len(dev.present), dtype=bool)


def test_bases_group_classes_by_device_demand() -> None:
    x1 = Shape("ACME", 1, 50, 0, 50)
    classes = [(x1, 0.4, 0, 0), (Shape("ACME", 2, 50, 0, 50, ("Y2",)), 0.3, 4000, 0),
               (Shape("ACME", 1, 100, 0, 100), 0.2, 0, 0), (Shape("ACME", 1, 50, 0, 50, ("X1",)), 0.1, 8000, 0)]
    mix = Mix(classes, list(TYPES))
    assert mix.base.tolist() == [0, 0, 1, 0]  # 50 % of a card: one base, whatever the type, count or CPU
    member, group_base, group_nums = mix.groups
    assert group_base.tolist() == [0, 0, 1] and group_nums.tolist() == [1.0, 2.0, 1.0]
    assert member.tolist() == [[1, 0, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert mix.accepts(np.array([0, 1, -1])).tolist() == [[True, True, False], [False, True, False],
                                                          [True, True, False], [True, False, False]]


# ------------------------------------------------------------------------------------- a replay, pinned
NODES = [openb.TraceNode(f"{model}-{i}", cpu, 262144, gpus, model)
         for i, (model, cpu, gpus) in enumerate([("T4", 32000, 2), ("T4", 64000, 4), ("G2", 96000, 8), ("G2", 32000, 2),
                                                 ("P100", 64000, 4), ("V100M16", 96000, 8), ("T4", 16000, 1)])]


def _tasks(seed: int) -> list[Any]:
    rng = random.Random(seed)
    specs = ["", "", "", "T4", "G2", "P100|V100M16", "V100M16", "G2|T4"]
    out = []
    for i in range(70):
        num = rng.choice([0, 1, 1, 1, 1, 2, 4])
        milli = rng.choice([100, 250, 460, 500, 800, 1000]) if num == 1 else 1000
        out.append(from_task(openb.Task(f"t{i}", rng.choice([1000, 4000, 8000]), 4096, num, milli if num else 0,
                                        rng.choice(specs) if num else "")))
    return out


@pytest.mark.parametrize("gpu", ["binpack", "fgd"])
def test_replay_decisions_same_as_class_by_class(gpu: str, monkeypatch: Any) -> None:
    """A replay of type-constrained tasks (nodes of four models, online mix) places every task on the same node
    with the shortcut as with the class-by-class definition."""
    def run() -> list[tuple[str, str | None]]:
        exp = Experiment(load_config(None), get_plugin_manager(), [openb.node_object(n) for n in NODES], _tasks(3),
                         [Policy(f"fgd/{gpu}", "fgd", gpu)], seeds=[5, 6], keep_placements=True)
        return [(p.pod, p.node) for r in exp.run() for p in r.placements]

    fast = run()
    with monkeypatch.context() as m:
        m.setattr(frag, "_row_types", _all_mixed)
        slow = run()
    assert fast == slow
    assert sum(node is None for _, node in fast) > 0  # the cluster fills up: the choices mattered
    assert len({node for _, node in fast}) > 4
