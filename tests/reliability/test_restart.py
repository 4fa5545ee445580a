"""Restart: a scheduler started on a cluster with 5,000 running HAMi pods rebuilds exactly the usage that was
booked before, device by device and pod by pod, and makes no decision before it has synced.

The cluster is the in-test API server (``tests/kubeapi/fake_apiserver.py``), read through the official client.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from kubeapi.fake_apiserver import FakeApiServer
from reliability.rel_helpers import (
    check_capacity,
    device_usage,
    fresh_engine,
    gpu_pod,
    ledger_view,
    make_engine,
    nvidia_node,
    start_replica,
    wait_until,
)

from hami_core.engine.facade import Engine
from hami_core.engine.pods import annotations
from hami_core.wire import keys


def _running(server: FakeApiServer, engine: Engine, name: str, rng: random.Random) -> dict[str, Any] | None:
    """Schedule a pod on ``engine`` and store it on the API server as bound, allocated and Running."""
    pod = gpu_pod(name, gpus=rng.choice((1, 1, 1, 2)), mem=rng.choice((1000, 2000, 3000)),
                  cores=rng.choice((0, 5, 10)))
    decision = engine.schedule(pod, limit=1)
    if not decision.ok:
        return None
    engine.reserve(pod, decision)
    pod["metadata"]["annotations"] = {**decision.annotations, keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS}
    pod["metadata"]["labels"] = {keys.VGPU_NODE: decision.node}
    pod["spec"]["nodeName"] = decision.node
    pod["status"] = {"phase": "Running"}
    return server.create("pods", "default", pod)


def test_restart_on_5000_running_pods_rebuilds_the_same_ledger(server: FakeApiServer) -> None:
    rng = random.Random(5)
    before = make_engine()
    for i in range(160):
        node = server.create("nodes", "", nvidia_node(f"node-{i:03d}", gpus=4))
        before.upsert_node(node)
    placed = [p for i in range(5000) if (p := _running(server, before, f"r-{i:04d}", rng)) is not None]
    assert len(placed) == 5000
    svc = start_replica(server)
    try:
        assert svc.sync.synced
        with svc.lock:
            assert ledger_view(svc.engine) == ledger_view(before)  # pod by pod: node, devices, memory, cores
            assert device_usage(svc.engine) == device_usage(before)  # device by device
            assert len(svc.engine.ledger) == 5000
        assert check_capacity(before) == []
        assert ledger_view(fresh_engine(server)) == ledger_view(before)
    finally:
        svc.stop()


def test_no_decision_before_the_first_sync(server: FakeApiServer) -> None:
    engine = make_engine()
    engine.upsert_node(server.create("nodes", "", nvidia_node("n1", gpus=1)))
    holder = gpu_pod("holder", mem=20000)
    decision = engine.schedule(holder)
    holder["metadata"]["annotations"] = dict(decision.annotations)
    holder["spec"]["nodeName"] = "n1"
    holder["status"] = {"phase": "Running"}
    server.create("pods", "default", holder)
    pending = server.create("pods", "default", gpu_pod("p", mem=8000))
    slow = server.inject("GET", "/api/v1/pods", delay_s=1.0, count=None)  # pod LISTs are slow: syncing takes time
    svc = start_replica(server, start=False, sync_wait_s=0.05)
    starter = threading.Thread(target=svc.start)
    starter.start()
    try:
        assert wait_until(lambda: slow.hits >= 1)  # the pod list is on its way (held for a second)
        result = svc.extender.filter({"Pod": pending, "NodeNames": ["n1"]})
        assert result["Error"] == "context cancelled" and result["NodeNames"] is None
        assert not svc.sync.synced
        assert keys.VGPU_NODE not in annotations(server.get("pods", "default", "p"))  # nothing written
        with svc.lock:
            assert len(svc.engine.ledger) == 0  # nothing reserved
        starter.join()
        server.clear_faults()
        assert svc.sync.synced
        # synced, it knows the 20,000 MiB holder: 8,000 MiB more do not fit on the 24,576 MiB GPU
        result = svc.extender.filter({"Pod": pending, "NodeNames": ["n1"]})
        assert result["Error"] == "" and result["NodeNames"] is None and "n1" in result["FailedNodes"]
    finally:
        starter.join()
        svc.stop()
