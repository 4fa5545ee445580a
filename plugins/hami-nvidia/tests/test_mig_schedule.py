"""Dynamic MIG through the engine (scheduler.md §3.5, §6.3 step 3, §6.5, §6.8): the MIG annotation the scheduler
writes, pods' MIG allocations booked and released by the ledger, the health rule for contradicting allocations,
several containers and re-scheduling."""

from __future__ import annotations

import json
from typing import Any

from migsched_testlib import MIG_ALLOCATIONS, allocation, instance, mig_annotations, mig_reg, placements
from nvidia_testlib import (
    ALLOCATED,
    VGPU_NODE,
    container,
    gpu_container,
    make_engine,
    make_node,
    make_pod,
    reg,
)

from hami_core.engine.facade import Engine

MIG = {"nvidia.com/vgpu-mode": "mig"}


def mig_engine(*gpus: dict[str, Any]) -> Engine:
    engine = make_engine()
    status = engine.upsert_node(make_node("n1", list(gpus or [mig_reg("GPU-m")]), allocatable=7))
    assert not status.errors
    return engine


def bound_pod(name: str, entries: list[tuple[str, str, int]], *, node: str = "n1",
              runtime: dict[int, tuple[str, int, int]] | None = None) -> dict[str, Any]:
    pod = make_pod(container("c"), name=name, annotations=mig_annotations(node, entries, runtime), nodeName=node)
    pod["status"] = {"phase": "Running"}
    return pod


def in_use(engine: Engine, gpu: str = "GPU-m", node: str = "n1") -> list[tuple[str, int]]:
    return sorted((i.profile, i.placement.start) for i in engine.nodes[node].by_uuid[gpu].mig_in_use)


def schedule_1g(engine: Engine, name: str = "new") -> list[tuple[str, str, int]]:
    decision = engine.schedule(make_pod(gpu_container(mem=5000), name=name, annotations=MIG))
    assert decision.node == "n1", decision.failed
    return placements(decision.devices["NVIDIA"][0])


# ------------------------------------------------------------------------------------ annotations
def test_the_decision_writes_the_mig_allocations() -> None:
    engine = mig_engine()
    pod = make_pod(gpu_container("a", gpus=2, mem=5000), gpu_container("b", mem=12000), name="p", annotations=MIG)
    decision = engine.schedule(pod)
    assert decision.annotations[ALLOCATED] == "GPU-m,NVIDIA,5120,14:GPU-m,NVIDIA,5120,14:;GPU-m,NVIDIA,20480,42:;"
    assert json.loads(decision.annotations[MIG_ALLOCATIONS]) == [
        allocation(0, 0, "GPU-m", "1g.5gb", 6), allocation(0, 1, "GPU-m", "1g.5gb", 5),
        # the second container sees the first one's instances (app containers are cumulative, spec §6.4)
        allocation(1, 0, "GPU-m", "3g.20gb", 0)]


def test_no_mig_annotation_without_mig_devices() -> None:
    engine = mig_engine(reg("GPU-s", devmem=40960))
    decision = engine.schedule(make_pod(gpu_container(mem=5000)))
    assert decision.node == "n1"
    assert MIG_ALLOCATIONS not in decision.annotations


def test_a_container_without_devices_keeps_its_position() -> None:
    engine = mig_engine()
    decision = engine.schedule(make_pod(container("plain"), gpu_container("gpu", mem=5000), annotations=MIG))
    assert json.loads(decision.annotations[MIG_ALLOCATIONS]) == [allocation(1, 0, "GPU-m", "1g.5gb", 6)]


def test_init_containers_fit_on_a_fresh_copy_and_all_instances_are_booked() -> None:
    engine = mig_engine()
    pod = make_pod(gpu_container("app", mem=5000), init=[gpu_container("init", mem=5000)], annotations=MIG)
    decision = engine.schedule(pod)
    # init containers run alone: each is fitted on the node as it is, so init and app get the same slot (the device
    # plugin reuses the instance, node.md §2.12b step 3)
    assert json.loads(decision.annotations[MIG_ALLOCATIONS]) == [
        allocation(0, 0, "GPU-m", "1g.5gb", 6), allocation(1, 0, "GPU-m", "1g.5gb", 6)]
    engine.reserve(pod, decision)
    assert in_use(engine) == [("1g.5gb", 6), ("1g.5gb", 6)]
    assert schedule_1g(engine, "next") == [("GPU-m", "1g.5gb", 5)]


# ------------------------------------------------------------------------------------ booking
def test_a_reservation_books_its_placements() -> None:
    engine = mig_engine()
    for name, start in (("a", 6), ("b", 5), ("c", 4)):
        pod = make_pod(gpu_container(mem=5000), name=name, annotations=MIG)
        decision = engine.schedule(pod)
        assert placements(decision.devices["NVIDIA"][0]) == [("GPU-m", "1g.5gb", start)]
        engine.reserve(pod, decision)
    gpu = engine.nodes["n1"].by_uuid["GPU-m"]
    assert (gpu.used, gpu.usedmem, gpu.usedcores) == (3, 3 * 5120, 3 * 14)


def test_balanced_packing_sequence() -> None:
    # vendors.md B.10: 3g at start 4, 2g at 0, then 1g at 3 then 2
    engine = mig_engine()
    got = []
    for name, mem in (("a", 12000), ("b", 8000), ("c", 5000), ("d", 5000)):
        pod = make_pod(gpu_container(mem=mem), name=name, annotations=MIG)
        decision = engine.schedule(pod)
        got += placements(decision.devices["NVIDIA"][0])
        engine.reserve(pod, decision)
    assert [(p, s) for _, p, s in got] == [("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 3), ("1g.5gb", 2)]
    assert engine.schedule(make_pod(gpu_container(mem=8000), name="e", annotations=MIG)).failed == {
        "n1": "1/1 CardInsufficientMemory"}   # the profiles booked their memory: 20480 + 10240 + 2 x 5120


def test_a_bound_pods_annotation_books_its_placement_and_deleting_it_frees_it() -> None:
    engine = mig_engine()
    old = bound_pod("old", [("GPU-m", "1g.5gb", 6)])
    engine.upsert_pod(old)
    assert in_use(engine) == [("1g.5gb", 6)]
    assert schedule_1g(engine) == [("GPU-m", "1g.5gb", 5)]
    engine.remove_pod(old)
    assert in_use(engine) == []
    assert schedule_1g(engine) == [("GPU-m", "1g.5gb", 6)]


def test_a_finished_pod_frees_its_placement() -> None:
    engine = mig_engine()
    pod = bound_pod("old", [("GPU-m", "7g.40gb", 0)])
    engine.upsert_pod(pod)
    assert engine.schedule(make_pod(gpu_container(mem=5000), annotations=MIG)).failed == {
        "n1": "1/1 CardInsufficientMemory"}
    pod["status"] = {"phase": "Succeeded"}
    engine.upsert_pod(pod)
    assert in_use(engine) == []
    assert schedule_1g(engine) == [("GPU-m", "1g.5gb", 6)]


def test_a_decoded_pod_re_books_its_reservation_exactly() -> None:
    engine = mig_engine()
    pod = make_pod(gpu_container(gpus=2, mem=8000), name="p", annotations=MIG)
    decision = engine.schedule(pod)
    engine.reserve(pod, decision)
    booked = engine.ledger.get("uid-p")
    assert booked is not None
    gpu = engine.nodes["n1"].by_uuid["GPU-m"]
    before = (gpu.used, gpu.usedmem, gpu.usedcores, in_use(engine))
    assert before == (2, 20480, 56, [("2g.10gb", 0), ("2g.10gb", 2)])
    # the same pod as the API server returns it after Filter: the decision's annotations on it
    annotated = make_pod(gpu_container(gpus=2, mem=8000), name="p", annotations={**MIG, **decision.annotations})
    engine.upsert_pod(annotated)
    rebooked = engine.ledger.get("uid-p")
    assert rebooked is not None and rebooked.mig == booked.mig
    gpu = engine.nodes["n1"].by_uuid["GPU-m"]
    assert (gpu.used, gpu.usedmem, gpu.usedcores, in_use(engine)) == before
    # the device plugin realizes the instances: the runtime identity is booked too
    allocs = json.loads(decision.annotations[MIG_ALLOCATIONS])
    for i, a in enumerate(allocs):
        a.update(migUUID=f"MIG-{i}", gpuInstanceID=3 + i, computeInstanceID=0)
    annotated["metadata"]["annotations"][MIG_ALLOCATIONS] = json.dumps(allocs)
    engine.upsert_pod(annotated)
    gpu = engine.nodes["n1"].by_uuid["GPU-m"]
    assert sorted((i.mig_uuid, i.gpu_instance_id) for i in gpu.mig_in_use) == [("MIG-0", 3), ("MIG-1", 4)]
    assert in_use(engine) == [("2g.10gb", 0), ("2g.10gb", 2)]


def test_a_restarted_engine_rebuilds_the_same_placements() -> None:
    engine = mig_engine()
    pods = []
    for name, mem in (("a", 12000), ("b", 5000)):
        pod = make_pod(gpu_container(mem=mem), name=name, annotations=MIG)
        decision = engine.schedule(pod)
        engine.reserve(pod, decision)
        pods.append(make_pod(gpu_container(mem=mem), name=name, annotations={**MIG, **decision.annotations}))
    fresh = mig_engine()
    for pod in pods:
        fresh.upsert_pod(pod)
    assert in_use(fresh) == in_use(engine) == [("1g.5gb", 3), ("3g.20gb", 4)]
    assert schedule_1g(fresh) == schedule_1g(engine) == [("GPU-m", "1g.5gb", 2)]


def test_a_node_re_registration_keeps_the_bookings() -> None:
    engine = mig_engine()
    engine.upsert_pod(bound_pod("old", [("GPU-m", "3g.20gb", 4)]))
    # the device plugin re-registers the GPU with one more device next to it: devices are rebuilt and re-booked
    engine.upsert_node(make_node("n1", [mig_reg("GPU-m"), mig_reg("GPU-n", index=1)], allocatable=14))
    assert in_use(engine) == [("3g.20gb", 4)]


# ------------------------------------------------------------------------------------ health rule
def test_a_mig_allocation_on_a_hami_core_gpu_makes_it_unhealthy() -> None:
    engine = mig_engine(reg("GPU-s", devmem=40960), mig_reg("GPU-m", index=1))
    bad = bound_pod("bad", [("GPU-s", "1g.5gb", 6)])
    engine.upsert_pod(bad)
    shared = engine.nodes["n1"].by_uuid["GPU-s"]
    assert (shared.health, shared.mig_in_use) == (False, ())
    pod = make_pod(gpu_container(mem=100), annotations={"nvidia.com/vgpu-mode": "hami-core"})
    assert engine.schedule(pod).failed == {"n1": "1/2 CardNotHealth, 1/2 CardTypeMismatch"}
    engine.remove_pod(bad)
    assert engine.nodes["n1"].by_uuid["GPU-s"].health is True
    assert engine.schedule(pod).node == "n1"


def test_a_mig_gpu_used_without_a_reservation_is_unhealthy() -> None:
    engine = mig_engine()
    pod = bound_pod("legacy", [("GPU-m", "1g.5gb", 6)])
    del pod["metadata"]["annotations"][MIG_ALLOCATIONS]
    engine.upsert_pod(pod)
    assert engine.nodes["n1"].by_uuid["GPU-m"].health is False
    assert engine.schedule(make_pod(gpu_container(mem=5000), annotations=MIG)).failed == {"n1": "1/1 CardNotHealth"}
    engine.remove_pod(pod)
    assert engine.nodes["n1"].by_uuid["GPU-m"].health is True


def test_an_undecodable_mig_annotation_books_nothing_and_keeps_the_gpu_unhealthy() -> None:
    engine = mig_engine()
    pod = bound_pod("broken", [("GPU-m", "1g.5gb", 6)])
    pod["metadata"]["annotations"][MIG_ALLOCATIONS] = '[{"containerIndex":0}]'
    engine.upsert_pod(pod)
    gpu = engine.nodes["n1"].by_uuid["GPU-m"]
    assert (gpu.health, gpu.mig_in_use, gpu.used) == (False, (), 1)


def test_a_registered_unhealthy_gpu_stays_unhealthy_after_the_conflict_goes() -> None:
    engine = mig_engine(mig_reg("GPU-m", health=False))
    pod = bound_pod("legacy", [("GPU-m", "1g.5gb", 6)])
    del pod["metadata"]["annotations"][MIG_ALLOCATIONS]
    engine.upsert_pod(pod)
    engine.remove_pod(pod)
    assert engine.nodes["n1"].by_uuid["GPU-m"].health is False


# ------------------------------------------------------------------------------------ engine paths
def test_more_instances_than_gpus_skip_the_device_count_check() -> None:
    engine = mig_engine()
    pod = make_pod(gpu_container(gpus=3, mem=5000), annotations=MIG)
    assert len(engine.schedule(pod).devices["NVIDIA"][0]) == 3
    # best-first with the capacity prefilter too: a MIG GPU counts for the instances it can still host
    assert len(engine.schedule(pod, limit=1).devices["NVIDIA"][0]) == 3
    # a pod whose vgpu-mode leaves MIG out is not a MIG request: the node has too few devices
    other = make_pod(gpu_container(gpus=3, mem=5000), annotations={"nvidia.com/vgpu-mode": "hami-core"})
    assert engine.schedule(other).failed == {"n1": "NodeInsufficientDevice"}
    assert engine.schedule(other, limit=1).failed == {"n1": "NodeInsufficientDevice"}


def test_re_scheduling_a_reserved_pod_ignores_its_own_instances() -> None:
    engine = mig_engine()
    pod = make_pod(gpu_container(mem=30000), name="big", annotations=MIG)
    first = engine.schedule(pod)
    engine.reserve(pod, first)
    assert in_use(engine) == [("7g.40gb", 0)]
    # filtered again (HAMi drops the pod's reservation first): its own 7g does not block it
    again = engine.schedule(pod)
    assert placements(again.devices["NVIDIA"][0]) == [("GPU-m", "7g.40gb", 0)]
    assert engine.schedule(pod, limit=1).node == "n1"


def test_re_scheduling_excludes_its_own_conflict() -> None:
    engine = mig_engine()
    pod = bound_pod("legacy", [("GPU-m", "1g.5gb", 6)])
    del pod["metadata"]["annotations"][MIG_ALLOCATIONS]
    pod["spec"]["containers"] = [gpu_container(mem=5000)]
    engine.upsert_pod(pod)
    assert engine.nodes["n1"].by_uuid["GPU-m"].health is False
    # the pod that made the GPU unhealthy is filtered again: evaluated without its own booking, the GPU is usable
    decision = engine.schedule(pod)
    assert placements(decision.devices["NVIDIA"][0]) == [("GPU-m", "1g.5gb", 6)]


def test_each_instance_shows_in_the_node_usage() -> None:
    engine = mig_engine()
    engine.upsert_pod(bound_pod("a", [("GPU-m", "2g.10gb", 0), ("GPU-m", "1g.5gb", 6)]))
    gpu = engine.nodes["n1"].by_uuid["GPU-m"]
    assert (gpu.used, gpu.usedmem, gpu.usedcores) == (2, 10240 + 5120, 28 + 14)
    assert set(gpu.mig_in_use) == {instance("2g.10gb", 0), instance("1g.5gb", 6)}


def test_the_metric_shows_each_realized_instance_once() -> None:
    from hami_core.scheduler.metrics import EngineCollector

    engine = mig_engine()
    # an init and an app container on the same realized instance (init containers are fitted alone), plus an
    # instance the device plugin has not realized yet
    allocs = [allocation(0, 0, "GPU-m", "1g.5gb", 6, ("MIG-a", 13, 0)),
              allocation(1, 0, "GPU-m", "1g.5gb", 6, ("MIG-a", 13, 0)),
              allocation(1, 1, "GPU-m", "2g.10gb", 0)]
    pod = make_pod(container("app"), init=[container("init")], name="p", nodeName="n1", annotations={
        VGPU_NODE: "n1", ALLOCATED: "GPU-m,NVIDIA,5120,14:;GPU-m,NVIDIA,5120,14:GPU-m,NVIDIA,10240,28:;",
        MIG_ALLOCATIONS: json.dumps(allocs)})
    engine.upsert_pod(pod)
    (family,) = [f for f in EngineCollector(engine).collect() if f.name == "hami_node_gpu_mig_instance_info"]
    assert [(s.labels, s.value) for s in family.samples] == [(
        {"node": "n1", "device_uuid": "GPU-m", "device_index": "0", "mig_uuid": "MIG-a", "profile": "1g.5gb",
         "gpu_instance_id": "13", "compute_instance_id": "0", "placement_start": "6", "placement_size": "1",
         "zone": "vGPU"}, 1)]
