"""Scenario 5: a burst of 200 fractional pods onto 20 nodes, under binpack, spread, and binpack with
``--write-allocation bind``: every pod bound once, no card over capacity (decoded from what the API server holds),
hami's ledger equal to the API server's, and each container handed exactly the devices its pod was given."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from realkube import audit
from realkube.objects import GPU_MEM, SPLIT, allocated, gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

pytestmark = pytest.mark.e2e

PODS, NODES = 200, 20
MODES = {"binpack": {"--node-scheduler-policy": "binpack"},
         "spread": {"--node-scheduler-policy": "spread"},
         "binpack-bind-write": {"--node-scheduler-policy": "binpack", "--write-allocation": "bind"}}


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest, stack: Stack) -> Iterator[str]:
    stack.restart_hami(MODES[request.param])
    yield request.param
    stack.restart_hami({})


def burst(namespace: str, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    return [gpu_pod(f"job-{i:03d}", namespace=namespace, mem=rng.choice([2000, 4000, 8000, 12000, 20000]),
                    cores=rng.choice([0, 10, 20, 30])) for i in range(PODS)]


def test_burst(stack: Stack, ns: str, make_nodes, mode: str) -> None:
    nodes = make_nodes(NODES, f"burst-{mode}")
    started = datetime.now(UTC)
    pods = burst(ns)
    with ThreadPoolExecutor(8) as pool:  # created at once, as a job controller would
        list(pool.map(lambda p: stack.create_pods(ns, [p]), pods))
    held = stack.wait_bound(ns, PODS, 240)
    assert len(held) == PODS

    # every pod was bound exactly once (one successful Binding each, from the audit log)
    calls = audit.calls(stack.plane.apiserver.audit_events(), since=started)
    bindings = Counter(c.name for c in calls if c.resource == "pods/binding" and c.verb == "create"
                       and c.code == 201)
    assert set(bindings) == {p["metadata"]["name"] for p in pods} and set(bindings.values()) == {1}

    # no card over capacity, by the annotations the API server holds
    per_card: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in held:
        devices = allocated(pod)
        assert len(devices) == 1, pod["metadata"]["name"]
        for uuid, mem, cores in devices:
            per_card[uuid][0] += mem
            per_card[uuid][1] += cores
            per_card[uuid][2] += 1
        assert pod["metadata"]["annotations"]["hami.io/vgpu-node"] == pod["spec"]["nodeName"]
    for uuid, (mem, cores, count) in per_card.items():
        assert mem <= GPU_MEM and cores <= 100 and count <= SPLIT, (uuid, mem, cores, count)

    # each container got what its pod was given (no swapped or doubled devices), and the allocations finished
    assert stack.kubelet is not None
    wait_until("every Allocate served", lambda: all(
        stack.pod(ns, p["metadata"]["name"])["metadata"]["annotations"].get("hami.io/bind-phase") == "success"
        for p in pods), 60, 0.5)
    by_uid = {p["metadata"]["uid"]: p for p in held}
    served = {uid: s for uid, s in stack.kubelet.served.items() if uid in by_uid}
    assert len(served) == PODS and not [s.error for s in served.values() if s.error]
    for uid, s in served.items():
        ((uuid, mem, _cores),) = allocated(by_uid[uid])
        assert s.env[0]["NVIDIA_VISIBLE_DEVICES"] == uuid and s.env[0]["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{mem}m"

    # hami's ledger is what the API server holds
    wait_until("ledgers agree", lambda: stack.hami_ledger(ns) == stack.api_ledger(ns), 20, 0.5)

    used = {p["spec"]["nodeName"] for p in held}
    assert used <= set(nodes)
    if mode == "spread":
        assert len(used) == NODES
    else:  # binpack fills nodes before it opens new ones: 200 pods of ~9 GiB fit on a few 8 x 80 GiB nodes
        assert len(used) < NODES / 2, sorted(used)
