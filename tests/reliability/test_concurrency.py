"""Concurrency: many kube-scheduler threads and two scheduler replicas sharing one API server never over-commit a
device, and every replica's ledger ends equal to the one rebuilt from the API server."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest
from kubeapi.fake_apiserver import FakeApiServer
from reliability.rel_helpers import (
    Driver,
    MemoryReplica,
    bound_overcommit,
    bound_pods_match_annotations,
    device_usage,
    fresh_engine,
    gpu_pod,
    kube_cluster,
    ledger_view,
    make_engine,
    nvidia_node,
    start_replica,
    wait_until,
)

from hami_core.cluster.memory import MemoryCluster
from hami_core.engine.pods import annotations
from hami_core.wire import keys


def _pods(count: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    pods = []
    for i in range(count):
        pod = gpu_pod(f"p-{i:04d}", mem=rng.choice((1000, 2000, 3000, 4000)), cores=rng.choice((0, 5, 10, 20)))
        # mostly spread (binds on different nodes run in parallel), some binpack (they contend for one node)
        policy = "binpack" if rng.random() < 0.1 else "spread"
        pod["metadata"]["annotations"] = {keys.NODE_SCHEDULER_POLICY: policy}
        pods.append(pod)
    return pods


def _run(server: FakeApiServer, *, nodes: int, gpus: int, pods: int, threads: int, seed: int,
         chaos: bool = False, write_allocation: str = "filter") -> None:
    names = [f"node-{i:02d}" for i in range(nodes)]
    for name in names:
        server.create("nodes", "", nvidia_node(name, gpus=gpus))
    created = [server.create("pods", "default", p) for p in _pods(pods, seed)]
    replicas = [start_replica(server, write_allocation=write_allocation),
                start_replica(server, write_allocation=write_allocation)]
    stop = threading.Event()
    try:
        if chaos:  # a watch that drops, now and then, and a few lost and failed scheduler writes
            server.inject("POST", "/binding", lost=True, count=None, rate=0.02, seed=seed)
            server.inject("PATCH", "/pods/", body_contains=keys.VGPU_NODE, status=500, count=None, rate=0.02,
                          seed=seed + 1)
            server.inject("PATCH", "/pods/", body_contains=keys.BIND_PHASE_ALLOCATING, lost=True, count=None,
                          rate=0.02, seed=seed + 2)
            server.inject("PATCH", "/nodes/", body_contains=f'{keys.NODE_LOCK}": "', status=409, count=None,
                          rate=0.02, seed=seed + 3)
            server.inject("POST", "/events", status=500, count=None, rate=0.05, seed=seed + 4)

            def breaker() -> None:
                while not stop.wait(1.0):
                    server.break_watches()

            threading.Thread(target=breaker, daemon=True).start()
        driver = Driver(replicas, kube_cluster(server), names, seed=seed)
        outcome = driver.run(created, threads=threads)
        stop.set()
        server.clear_faults()

        final = fresh_engine(server)
        assert bound_overcommit(server.objects("nodes").values(), server.objects("pods").values()) == []
        assert bound_pods_match_annotations(server) == []
        stored = server.objects("pods")
        bound = {name: pod["spec"]["nodeName"] for (_, name), pod in stored.items()
                 if (pod.get("spec") or {}).get("nodeName")}
        assert bound == outcome.bound  # nothing bound that the driver did not see succeed, nothing lost
        assert all(annotations(stored[("default", n)])[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS for n in bound)
        # most pods fit (the cluster is nearly full at the end); the others are pending with a reason
        assert len(bound) >= 0.9 * pods, (len(bound), list(outcome.pending.items())[:5])
        assert all(outcome.pending.values())
        locks = [n for (_, n), node in server.objects("nodes").items() if keys.NODE_LOCK in annotations(node)]
        assert locks == []  # every lock released by its pod's Allocate
        want_ledger, want_usage = ledger_view(final), device_usage(final)
        for svc in replicas:
            # --write-allocation bind: what a replica decided for a pod that ended pending (its bind went to the
            # other replica, say) is known to it alone; expiring the decisions now, as their age would later,
            # must leave the ledger as the API server has it
            svc.extender.expire_decisions(0)
            def caught_up(svc: Any = svc) -> bool:
                with svc.lock:
                    return ledger_view(svc.engine) == want_ledger and device_usage(svc.engine) == want_usage
            if not wait_until(caught_up):
                with svc.lock:
                    got = ledger_view(svc.engine)
                diff = {k: (got.get(k), want_ledger.get(k)) for k in set(got) | set(want_ledger)
                        if got.get(k) != want_ledger.get(k)}
                pytest.fail(f"a replica's ledger differs from the API server's state (replica, API server): "
                            f"{sorted(diff.items())[:5]}")
    finally:
        stop.set()
        for svc in replicas:
            svc.stop()


@pytest.mark.parametrize("write_allocation", ["filter", "bind"])
def test_two_replicas_over_http_200_pods_on_50_nodes(server: FakeApiServer, write_allocation: str) -> None:
    """Two replicas, each on its own KubeCluster (official client, real HTTP), 8 kube-scheduler threads. With
    ``--write-allocation bind`` a pod's bind that reaches the replica that did not filter it is refused (nobody
    wrote its allocation) and the pod is filtered again; never over-committed."""
    _run(server, nodes=50, gpus=1, pods=200, threads=8, seed=7, write_allocation=write_allocation)


@pytest.mark.soak
def test_soak_two_replicas_over_http_2000_pods_on_50_nodes(server: FakeApiServer) -> None:
    _run(server, nodes=50, gpus=4, pods=2000, threads=8, seed=7)


@pytest.mark.soak
@pytest.mark.parametrize("write_allocation", ["filter", "bind"])
def test_soak_two_replicas_with_dropping_watches_and_failing_writes(server: FakeApiServer,
                                                                    write_allocation: str) -> None:
    _run(server, nodes=50, gpus=4, pods=2000, threads=16, seed=11, chaos=True, write_allocation=write_allocation)


def test_two_lagging_replicas_many_threads_2000_pods_on_50_nodes() -> None:
    """The full 2,000 pods on 50 nodes, fast: two replicas on one in-process store, each fed by its own lagging
    watch (events queued and applied by another thread), so their ledgers trail each other's reservations."""
    names = [f"node-{i:02d}" for i in range(50)]
    store = MemoryCluster(nodes=[nvidia_node(n, gpus=5) for n in names], pods=_pods(2000, 3))
    replicas = [MemoryReplica(store, lag=True), MemoryReplica(store, lag=True)]
    try:
        outcome = Driver(replicas, store, names, seed=3).run(store.list_pods(), threads=8)
        rebuilt = make_engine()
        for node in store.list_nodes():
            rebuilt.upsert_node(node)
        for pod in store.list_pods():
            rebuilt.upsert_pod(pod)
        assert bound_overcommit(store.list_nodes(), store.list_pods()) == []
        bound = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in store.list_pods() if p["spec"].get("nodeName")}
        assert bound == outcome.bound
        assert len(bound) >= 0.9 * 2000, (len(bound), list(outcome.pending.items())[:5])
        assert all(annotations(p).get(keys.VGPU_NODE) == p["spec"]["nodeName"] for p in store.list_pods()
                   if p["spec"].get("nodeName"))
        assert not [n for n in store.list_nodes() if keys.NODE_LOCK in annotations(n)]
        for replica in replicas:
            assert wait_until(replica.view.settled)
            with replica.lock:
                assert ledger_view(replica.engine) == ledger_view(rebuilt)
                assert device_usage(replica.engine) == device_usage(rebuilt)
        # the contention was real: some binds were refused, because the other replica had bound there first
        # ("already bound") or held the node's lock (which one happens depends on thread timing)
        assert any(("already bound" in e["message"] or "lock" in e["message"])
                   for e in store.events if e["reason"] == "BindingFailed")
    finally:
        for replica in replicas:
            replica.stop()
