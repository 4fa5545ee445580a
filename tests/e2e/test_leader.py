"""Scenario 7: two hami-scheduler replicas (kube-scheduler + hami, each pair with its own hostname, as two pods
have) with leader election on a real Lease. kill -9 the leader pair during a burst: the other takes over, and
nothing is lost or doubled."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pytest
from realkube import audit
from realkube.controlplane import ControlPlane, KubeScheduler
from realkube.hami import HamiScheduler, scheduler_config
from realkube.objects import GPU_MEM, KubeletSim, allocated, gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

pytestmark = pytest.mark.e2e

PODS, NODES = 120, 10


class Replica:
    def __init__(self, stack: Stack, name: str) -> None:
        self.name = name
        self.hami = HamiScheduler(stack.workdir, stack.plane.ca, stack.scheduler_kubeconfig, name=f"hami-{name}",
                                  namespace_uts=name)
        config = scheduler_config(self.hami.url, stack.plane.ca.pem)
        self.scheduler = KubeScheduler(stack.bindir, stack.workdir, f"kube-scheduler-{name}", config,
                                       stack.scheduler_kubeconfig, namespace_uts=name)

    def start(self) -> None:
        self.hami.start(ready=False)
        self.scheduler.start()

    def kill(self) -> None:
        self.scheduler.kill()
        self.hami.kill()

    def stop(self) -> None:
        self.scheduler.stop()
        self.hami.stop()

    def ready(self) -> bool:
        return self.hami.get("/readyz").strip() == "ok"


@pytest.fixture(scope="module")
def pair_stack(bindir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A control plane of its own (the session's runs one kube-scheduler on the same Lease)."""
    with ControlPlane(bindir, tmp_path_factory.mktemp("leader")) as plane:
        stack = Stack(plane, bindir)
        stack.install()
        plane.ensure_namespace("burst")
        stack.kubelet = KubeletSim(stack.admin_cluster(), stack.device_cluster(), []).start()
        try:
            yield stack
        finally:
            stack.kubelet.stop()


def _holder(stack: Stack) -> str:
    from kubernetes import client

    lease = client.CoordinationV1Api(stack.plane.admin).read_namespaced_lease("hami-scheduler", "kube-system")
    return str(lease.spec.holder_identity or "")


def test_leader_killed_during_a_burst(pair_stack: Stack) -> None:
    stack = pair_stack
    replicas = {name: Replica(stack, name) for name in ("replica-a", "replica-b")}
    try:
        for r in replicas.values():
            r.start()
        leader_name = str(wait_until("a leader", lambda: _holder(stack).split("_")[0], 30)).strip()
        leader = replicas[leader_name]
        follower = next(r for r in replicas.values() if r is not leader)
        wait_until("the leader's hami ready", leader.ready, 30)
        assert not follower.ready()  # it follows the Lease: not ready, registers nothing

        nodes = stack.create_nodes(NODES, "lease", wait=False)
        wait_until("the leader's hami knows the nodes", lambda: leader.hami.get("/metrics", metrics=True).count(
            "hami_gpu_memory_limit_bytes{") >= NODES * 8, 30)
        started = datetime.now(UTC)
        # no webhook here (it would be the Service in front of both replicas): the pods name their scheduler
        pods = [gpu_pod(f"p-{i:03d}", namespace="burst", mem=8000 + 1000 * (i % 5), cores=10,
                        scheduler="hami-scheduler") for i in range(PODS)]
        done = threading.Event()

        def create() -> None:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda p: stack.create_pods("burst", [p]), pods))
            done.set()

        creator = threading.Thread(target=create)
        creator.start()
        wait_until("a third bound", lambda: sum(1 for p in stack.pods("burst") if p["spec"].get("nodeName"))
                   >= PODS // 3, 120, 0.2)
        leader.kill()  # kill -9, kube-scheduler and hami of the leader's pod at once
        killed_at = datetime.now(UTC)
        creator.join()

        wait_until("the follower takes the Lease", lambda: _holder(stack).startswith(follower.name + "_"), 40, 0.5)
        wait_until("the follower's hami ready", follower.ready, 30)
        held = stack.wait_bound("burst", PODS, 180)
        assert done.is_set()

        calls = audit.calls(stack.plane.apiserver.audit_events(), since=started)
        bindings = Counter(c.name for c in calls if c.resource == "pods/binding" and c.code == 201)
        assert set(bindings.values()) == {1} and len(bindings) == PODS
        assert any(c.at > killed_at for c in calls if c.resource == "pods/binding" and c.code == 201)

        per_card: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for pod in held:
            ((uuid, mem, cores),) = allocated(pod)
            per_card[uuid][0] += mem
            per_card[uuid][1] += cores
            assert pod["spec"]["nodeName"] in nodes
        assert all(mem <= GPU_MEM and cores <= 100 for mem, cores in per_card.values())

        wait_until("every Allocate served", lambda: all(
            p["metadata"]["annotations"].get("hami.io/bind-phase") == "success" for p in stack.pods("burst")), 60)
        stack.hami = follower.hami
        wait_until("the survivor's ledger is the API server's",
                   lambda: stack.hami_ledger("burst") == stack.api_ledger("burst"), 30, 0.5)
        assert stack.kubelet is not None and not stack.kubelet.errors
    finally:
        for r in replicas.values():
            r.stop()
