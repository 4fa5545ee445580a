"""``schedule(limit=1)`` (best-first with capacity prefilter) must choose exactly what full evaluation chooses."""

from __future__ import annotations

import random

from core_helpers import acme, acme_device, make_node, make_pod, scheduled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.engine.facade import Engine


def _cluster(engine: Engine, rng: random.Random, nodes: int) -> None:
    for n in range(nodes):
        devs = [acme_device(g, id=f"n{n}-g{g}", count=rng.choice([1, 2, 10]), devmem=rng.choice([1000, 4000]),
                            numa=g % 2, health=rng.random() > 0.1) for g in range(rng.randint(1, 4))]
        engine.upsert_node(make_node(f"node-{n:02d}", devs))
        for g, dev in enumerate(devs):
            for k in range(rng.randint(0, 2)):
                mem, cores = rng.randint(0, dev["devmem"] // 2), rng.choice([0, 10, 30, 50, 100])
                engine.upsert_pod(scheduled(make_pod(f"run-{n}-{g}-{k}"), f"node-{n:02d}",
                                            f"{dev['id']},ACME,{mem},{cores}:;"))


# make_engine is a factory: every example builds its own engine, so sharing the fixture is safe.
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["binpack", "spread"]),
       gpu=st.sampled_from(["binpack", "spread", "mutex"]))
def test_best_first_matches_exhaustive(make_engine, seed: int, policy: str, gpu: str) -> None:
    rng = random.Random(seed)
    engine = make_engine()
    _cluster(engine, rng, rng.randint(1, 12))
    annos = {"hami.io/node-scheduler-policy": policy, "hami.io/gpu-scheduler-policy": gpu}
    for i in range(6):
        containers = [acme(rng.randint(1, 3), rng.choice([0, 100, 900, 3000]), rng.choice([0, 20, 60, 100]),
                           name=f"c{j}") for j in range(rng.randint(1, 2))]
        pod = make_pod(f"p{i}", *containers, annotations=annos)
        full = engine.schedule(pod)
        fast = engine.schedule(pod, limit=1)
        assert fast.node == full.node
        assert fast.annotations.get("hami.io/acme-devices-allocated") == full.annotations.get(
            "hami.io/acme-devices-allocated")
        if full.node is None:
            assert fast.failed == full.failed
        else:
            assert fast.nodes == (full.node,)
            engine.reserve(pod, full)
