"""What the benchmarks share: Node and Pod objects of the benchmark cluster (N nodes x 8 GPUs at a usage level),
an engine or the real scheduler service over them, and the HTTP client helpers.

``run.py`` and every ``bench_*.py`` / ``profile_*.py`` import from here, never from one another's mains, so that
no benchmark module imports ``run.py`` (which imports them: the circle issue 27 removed).
"""

from __future__ import annotations

import http.client
import json
import random
from collections.abc import Iterator
from typing import Any

from bench_schedule import GPU_MEM, GPUS_PER_NODE

from hami_core.engine.facade import Engine

__all__ = ["Service", "build_engine", "logging_quiet", "node_obj", "post", "request_pod", "running_pod",
           "usage_pods"]


def node_obj(n: int) -> dict[str, Any]:
    devs = [{"id": f"GPU-{n:05d}-{g}", "index": g, "count": 10, "devmem": GPU_MEM, "devcore": 100,
             "type": "NVIDIA H100 80GB HBM3", "numa": g // 4, "mode": "hami-core", "health": True}
            for g in range(GPUS_PER_NODE)]
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": f"node-{n:05d}", "annotations": {"hami.io/node-nvidia-register": json.dumps(devs)}},
            "status": {"allocatable": {"nvidia.com/gpu": str(10 * GPUS_PER_NODE)},
                       "capacity": {"nvidia.com/gpu": str(10 * GPUS_PER_NODE)}}}


def running_pod(name: str, node: int, gpu: int, mem: int, cores: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "bench", "uid": name,
                         "annotations": {"hami.io/vgpu-node": f"node-{node:05d}",
                                         "hami.io/vgpu-devices-allocated":
                                             f"GPU-{node:05d}-{gpu},NVIDIA,{mem},{cores}:;"}},
            "spec": {"nodeName": f"node-{node:05d}", "containers": [{"name": "c"}]},
            "status": {"phase": "Running"}}


def usage_pods(nodes: int, usage: float, seed: int = 1) -> Iterator[dict[str, Any]]:
    """One running pod per GPU whose share is drawn around ``usage`` (as bench_schedule.build)."""
    if usage <= 0:
        return
    rng = random.Random(seed)
    for n in range(nodes):
        for g in range(GPUS_PER_NODE):
            share = min(max(rng.gauss(usage, 0.15), 0.0), 0.95)
            yield running_pod(f"run-{n}-{g}", n, g, int(GPU_MEM * share), int(100 * share))


def build_engine(nodes: int, usage: float) -> Engine:
    engine = Engine({"nvidia": {}})
    for n in range(nodes):
        engine.upsert_node(node_obj(n))
    for p in usage_pods(nodes, usage):
        engine.upsert_pod(p)
    return engine


def request_pod(kind: str, name: str = "bench-pod") -> dict[str, Any]:
    def limits(gpus: int) -> dict[str, str]:
        return {"nvidia.com/gpu": str(gpus), "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "5"}

    containers = {"1gpu": [{"name": "c", "resources": {"limits": limits(1)}}],
                  "2gpu": [{"name": "c", "resources": {"limits": limits(2)}}],
                  "2ctr": [{"name": "a", "resources": {"limits": limits(1)}},
                           {"name": "b", "resources": {"limits": limits(1)}}]}[kind]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "bench", "uid": f"uid-{name}"},
            "spec": {"schedulerName": "hami-scheduler", "containers": containers}, "status": {"phase": "Pending"}}


class Service:
    """The real scheduler service on 127.0.0.1 over a MemoryCluster of ``nodes`` at ``usage``."""

    def __init__(self, nodes: int, usage: float, server: str = "asyncio", lock_wait_s: float | None = None,
                 write_allocation: str = "filter", cluster_class: type | None = None,
                 node_policy: str = "binpack") -> None:
        from hami_core.cluster.memory import MemoryCluster
        from hami_core.scheduler.app import Options, Scheduler

        self.names = [f"node-{n:05d}" for n in range(nodes)]
        self.cluster = (cluster_class or MemoryCluster)(nodes=[node_obj(n) for n in range(nodes)],
                                                        pods=usage_pods(nodes, usage))
        config = {"nvidia": {}, "scheduler": {"nodeSchedulerPolicy": node_policy}}
        self.svc = Scheduler(Engine(config), self.cluster,
                             Options(host="127.0.0.1", port=0, metrics_host=None, resync_s=3600.0,
                                     http_server=server, write_allocation=write_allocation,
                                     **({} if lock_wait_s is None else {"lock_wait_s": lock_wait_s})))
        logging_quiet()
        self.svc.start()
        self.host, self.port = self.svc.server.address[:2]

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=60)

    def stop(self) -> None:
        self.svc.stop()

    def release_locks_when_bound(self) -> None:
        """Play the device plugin: once a pod is bound (``spec.nodeName`` set), drop its node's lock."""
        from hami_core.wire import keys

        def on_pod(event: str, pod: dict[str, Any]) -> None:
            node = (pod.get("spec") or {}).get("nodeName")
            annos = (pod.get("metadata") or {}).get("annotations") or {}
            if event == "MODIFIED" and node and annos.get(keys.BIND_PHASE) == keys.BIND_PHASE_ALLOCATING:
                self.release_lock(node)

        self.cluster.watch(lambda event, node: None, on_pod)

    def release_lock(self, node: str) -> None:
        """What the device plugin does after Allocate: drop the node lock (not scheduler cost)."""
        from hami_core.wire import keys

        self.cluster.patch_node(node, {"metadata": {"annotations": {keys.NODE_LOCK: None}}})


def logging_quiet() -> None:
    import logging

    logging.getLogger("hami").setLevel(logging.ERROR)


def post(conn: http.client.HTTPConnection, path: str, body: bytes) -> Any:
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{path}: HTTP {resp.status}: {data[:200]!r}")
    return json.loads(data)
