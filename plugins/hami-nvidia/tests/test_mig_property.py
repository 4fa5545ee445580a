"""Property: for any sequence of MIG pods scheduled, reserved and deleted on a two-GPU MIG node, the instances booked
on a GPU never overlap, each sits at one of its profile's registered placements, the GPU's usage is the sum of its
instances' profiles, and a fresh engine rebuilt from the pods' annotations books exactly the same instances."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from migsched_testlib import A100_PROFILES, MIG_ALLOCATIONS, PROFILE, mig_reg
from nvidia_testlib import gpu_container, make_engine, make_node, make_pod

from hami_core.engine.facade import Engine

GPUS = ("GPU-a", "GPU-b")
PLACEMENTS = {name: {(s, size) for s in starts} for name, _, _, _, starts, size in A100_PROFILES}

# a pod: (containers: [(instances, memory MiB)], delete an earlier pod first?)
memory = st.sampled_from([1, 4000, 5120, 6000, 10240, 12000, 20480, 30000, 40960])
pod_shape = st.lists(st.tuples(st.integers(1, 3), memory), min_size=1, max_size=2)
steps = st.lists(st.tuples(pod_shape, st.one_of(st.none(), st.integers(0, 20))), min_size=1, max_size=12)


def node_engine() -> Engine:
    engine = make_engine()
    engine.upsert_node(make_node("n1", [mig_reg(g, index=i) for i, g in enumerate(GPUS)], allocatable=14))
    return engine


def check_gpu(engine: Engine, gpu: str) -> None:
    dev = engine.nodes["n1"].by_uuid[gpu]
    instances = dev.mig_in_use
    for inst in instances:
        assert (inst.placement.start, inst.placement.size) in PLACEMENTS[inst.profile], inst
    for i, a in enumerate(instances):
        for b in instances[i + 1:]:
            assert not a.placement.overlaps(b.placement), (gpu, a, b)
    assert dev.used == len(instances)
    assert dev.usedmem == sum(PROFILE[i.profile][0] for i in instances)
    assert dev.usedcores == sum(PROFILE[i.profile][1] for i in instances)
    assert dev.health


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_placements_never_overlap(sequence: list[tuple[list[tuple[int, int]], int | None]]) -> None:
    engine = node_engine()
    live: list[dict[str, Any]] = []
    for n, (shape, delete) in enumerate(sequence):
        if delete is not None and live:
            engine.remove_pod(live.pop(delete % len(live)))
        pod = make_pod(*(gpu_container(f"c{i}", gpus=k, mem=mem) for i, (k, mem) in enumerate(shape)),
                       name=f"p{n}", annotations={"nvidia.com/vgpu-mode": "mig"})
        decision = engine.schedule(pod)
        if decision.node is None:
            continue
        chosen = json.loads(decision.annotations[MIG_ALLOCATIONS])
        assert len(chosen) == sum(k for k, _ in shape)
        for entry in chosen:  # each instance is as large as its container asked
            assert PROFILE[entry["profile"]][0] >= shape[entry["containerIndex"]][1]
        engine.reserve(pod, decision)
        live.append(make_pod(*pod["spec"]["containers"], name=f"p{n}",
                             annotations={**pod["metadata"]["annotations"], **decision.annotations}))
        for gpu in GPUS:
            check_gpu(engine, gpu)
    # a restarted scheduler books the same instances from the annotations alone
    fresh = node_engine()
    for pod in live:
        fresh.upsert_pod(pod)
    for gpu in GPUS:
        check_gpu(fresh, gpu)
        assert sorted(map(repr, fresh.nodes["n1"].by_uuid[gpu].mig_in_use)) == sorted(
            map(repr, engine.nodes["n1"].by_uuid[gpu].mig_in_use))
