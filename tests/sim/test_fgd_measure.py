"""The simulator's fragmentation metric and the ``fgd`` policy's measure are one definition (FGD, §3).

``hami simulate`` reports fragmentation with :class:`hami_core.sim.fragmentation.FragmentationModel`, on GPU milli
free per card; the policy scores growth with :func:`hami_core.policies.fgd.fragmentation.fragmentation`, on the
engine's device usage. On cards whose cores and memory are used alike (so the free share is what the simulator
calls free milli) and tasks asking cores and a memory percentage alike, the two give the same figure per node.
"""

from __future__ import annotations

import random

import numpy as np

from hami_core.engine.workload import DEVICELESS, Shape
from hami_core.plugins.types import DeviceInfo, DeviceUsage
from hami_core.policies.fgd.fragmentation import DeviceArrays, Mix, fragmentation
from hami_core.sim.fragmentation import FragmentationModel, TaskClass

MODELS = ("V100M16", "V100M32", "T4", "A10")


def _card(i: int, model: str, free_milli: int) -> DeviceUsage:
    usage = DeviceUsage(DeviceInfo(id=f"g{i}", index=i, count=64, devmem=1000, devcore=100, type=model, numa=0,
                                   health=True))
    used = 1000 - free_milli
    usage.used, usage.usedmem, usage.usedcores = (1 if used else 0), used, used // 10
    return usage


def _shape(task: TaskClass) -> Shape:
    if task.num_gpu == 0:
        return DEVICELESS
    pct = task.per_gpu // 10
    return Shape("GPU", task.num_gpu, pct, 0, pct, tuple(m.upper() for m in task.models))


def test_simulator_metric_equals_the_policy_measure() -> None:
    rng = random.Random(33)
    for _ in range(40):
        nodes = [(rng.choice(MODELS), rng.randint(1, 8)) for _ in range(rng.randint(1, 12))]
        free = np.zeros((len(nodes), max(g for _, g in nodes)))
        for r, (_, gpus) in enumerate(nodes):
            free[r, :gpus] = [rng.choice((0, 100, 250, 500, 700, 1000)) for _ in range(gpus)]
        cpu_free = np.array([rng.choice((0, 4000, 32000)) for _ in nodes], dtype=float)
        mem_free = np.array([rng.choice((0, 8192, 262144)) for _ in nodes], dtype=float)
        classes = []
        for _ in range(rng.randint(1, 6)):
            num = rng.choice((0, 1, 1, 2, 4))
            per = 0 if num == 0 else rng.choice((100, 250, 500, 1000)) if num == 1 else 1000
            models = tuple(rng.sample(MODELS, rng.randint(1, 2))) if num and rng.random() < 0.3 else ()
            classes.append(TaskClass(num, per, models, rng.choice((0.0, 2000.0, 8000.0)),
                                     rng.choice((0.0, 4096.0)), rng.random()))
        sim = FragmentationModel([[m] * gpus for m, gpus in nodes], classes)
        expected = sim.node_fragments(free, cpu_free, mem_free)

        cards = [[_card(j, m, int(free[r, j])) for j in range(gpus)] for r, (m, gpus) in enumerate(nodes)]
        types = sorted({m for m, _ in nodes})
        dev = DeviceArrays.build(cards, {t: i for i, t in enumerate(types)}, np.stack([cpu_free, mem_free], axis=1))
        mix = Mix([(_shape(c), c.weight, c.cpu_milli, c.memory_mib) for c in classes], types)
        assert np.allclose(fragmentation(dev, mix), expected, rtol=0, atol=1e-6), (nodes, classes)
