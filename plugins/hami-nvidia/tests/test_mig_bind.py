"""Bind's re-check under the node lock refuses a MIG instance that overlaps one a pod already bound there holds.

Two scheduler replicas that have not heard of each other's reservation can give two pods the same free MIG
placement; split count, memory and cores all still fit, so only the placement shows it. The cluster is the
in-memory stand-in (hami_core.cluster.memory.MemoryCluster); each replica is an Extender over its own engine, fed
nothing but the node, so neither sees the other's reservation.
"""

from __future__ import annotations

from typing import Any

from migsched_testlib import MIG_ALLOCATIONS, mig_reg
from nvidia_testlib import gpu_container, make_engine, make_node, make_pod

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.extender import Extender
from hami_core.wire import keys
from hami_core.wire.mig import decode_mig_allocations


def _replica(cluster: MemoryCluster, node: dict[str, Any]) -> Extender:
    engine = make_engine()
    engine.upsert_node(node)
    return Extender(engine, cluster, sleep=lambda s: None)


def _mig_pod(name: str, mem: int = 5000) -> dict[str, Any]:
    pod = make_pod(gpu_container(mem=mem), name=name, annotations={"nvidia.com/vgpu-mode": "mig"})
    pod["spec"]["schedulerName"] = keys.DEFAULT_SCHEDULER_NAME  # as the webhook admits it: the extender's own pod
    return pod


def _bind(ext: Extender, pod: dict[str, Any], node: str) -> dict[str, Any]:
    meta = pod["metadata"]
    return ext.bind({"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"],
                     "Node": node})


def _placement(cluster: MemoryCluster, name: str) -> tuple[str, int, int]:
    (entry,) = decode_mig_allocations(cluster.get_pod("default", name)["metadata"]["annotations"][MIG_ALLOCATIONS])
    return entry.profile, entry.placement.start, entry.placement.size


def test_second_replica_cannot_bind_an_overlapping_instance() -> None:
    cluster = MemoryCluster()
    node = cluster.add_node(make_node("n1", [mig_reg("GPU-m")], allocatable=7))
    a, b = _replica(cluster, node), _replica(cluster, node)
    pa, pb = cluster.add_pod(_mig_pod("pa")), cluster.add_pod(_mig_pod("pb"))
    assert a.filter({"Pod": pa, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
    assert b.filter({"Pod": pb, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
    assert _placement(cluster, "pa") == _placement(cluster, "pb") == ("1g.5gb", 6, 1)  # the race
    assert _bind(a, cluster.get_pod("default", "pa"), "n1") == {"Error": ""}
    cluster.patch_node("n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})  # the device plugin's part
    error = _bind(b, cluster.get_pod("default", "pb"), "n1")["Error"]
    assert "overlaps 1g.5gb at 6+1" in error and "must be filtered again" in error, error
    assert not cluster.get_pod("default", "pb")["spec"].get("nodeName")
    # Filtered again, replica b has now read pa (bind fed it to its ledger) and takes another placement.
    assert b.filter({"Pod": cluster.get_pod("default", "pb"), "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
    assert _placement(cluster, "pb") == ("1g.5gb", 5, 1)
    assert _bind(b, cluster.get_pod("default", "pb"), "n1") == {"Error": ""}


def test_instances_on_separate_placements_bind_side_by_side() -> None:
    cluster = MemoryCluster()
    node = cluster.add_node(make_node("n1", [mig_reg("GPU-m")], allocatable=7))
    ext = _replica(cluster, node)
    for name in ("p1", "p2", "p3"):
        pod = cluster.add_pod(_mig_pod(name))
        assert ext.filter({"Pod": pod, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
        assert _bind(ext, cluster.get_pod("default", name), "n1") == {"Error": ""}
        cluster.patch_node("n1", {"metadata": {"annotations": {keys.NODE_LOCK: None}}})
    assert sorted(_placement(cluster, n)[1] for n in ("p1", "p2", "p3")) == [4, 5, 6]
