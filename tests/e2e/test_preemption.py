"""Device-aware preemption on the real control plane: with PriorityClasses, a high-priority pod that needs one free
card evicts exactly the low-priority pods on one card (not on several), binds there once they are gone, and a
lower-priority pod created in between does not take the freed card.

kube-scheduler's own preemption sees no victim here (the node has CPU to spare and hami's resources are
``ignoredByScheduler``), so this is hami's own preemption from /filter (docs/scheduler.md, Preemption)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from realkube.objects import GPU_MEM, allocated, gpu_devices, gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

pytestmark = pytest.mark.e2e


@pytest.fixture
def priorities(stack: Stack) -> Iterator[tuple[str, str]]:
    from kubernetes import client

    api = client.SchedulingV1Api(stack.plane.core().api_client)
    tag = os.getpid() % 100000
    names = (f"e2e-low-{tag}", f"e2e-high-{tag}")
    for name, value in zip(names, (100, 100000), strict=True):
        api.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                   "metadata": {"name": name}, "value": value,
                                   "preemptionPolicy": "PreemptLowerPriority"})
    try:
        yield names
    finally:
        for name in names:
            api.delete_priority_class(name, _preload_content=False)


def _on_card(name: str, ns: str, uuid: str, mem: int, priority: str) -> dict:
    pod = gpu_pod(name, namespace=ns, mem=mem, priority_class=priority)
    pod["metadata"]["annotations"] = {"nvidia.com/use-gpuuuid": uuid}  # pin the card, to know who is where
    return pod


def test_a_high_priority_pod_preempts_the_pods_of_one_card(stack: Stack, ns: str, make_nodes,
                                                            priorities: tuple[str, str]) -> None:
    low, high = priorities
    (node,) = make_nodes(1, "pre", gpus=2)
    stack.wait_hami_nodes([node])
    card0, card1 = (d["uuid"] for d in gpu_devices(node, 2))
    half, third = GPU_MEM // 2, GPU_MEM // 3
    fill = [_on_card("a0", ns, card0, half, low), _on_card("a1", ns, card0, half, low),
            _on_card("b0", ns, card1, third, low), _on_card("b1", ns, card1, third, low),
            _on_card("b2", ns, card1, third, low)]
    stack.create_pods(ns, fill)
    stack.wait_bound(ns, 5, 90)

    assert stack.kubelet is not None
    stack.kubelet.hold_deletions.add(node)  # the victims take their time to stop: the room must wait for vip
    stack.create_pods(ns, [gpu_pod("vip", namespace=ns, mem=GPU_MEM, priority_class=high)])

    def terminating() -> set[str] | None:
        names = {p["metadata"]["name"] for p in stack.pods(ns) if p["metadata"].get("deletionTimestamp")}
        return names or None

    assert wait_until("victims terminating", terminating, 60) == {"a0", "a1"}  # one card's pods, not three
    assert stack.pod(ns, "vip")["status"].get("nominatedNodeName") == node
    events = [e for e in stack.events(ns) if e.get("reason") == "Preempted"]
    assert {e["involvedObject"]["name"] for e in events} == {"a0", "a1"}

    # a lower-priority pod asking for a whole card, created while the victims stop, must not take card0
    stack.create_pods(ns, [gpu_pod("late", namespace=ns, mem=GPU_MEM, priority_class=low)])
    stack.kubelet.release_deletions(node)

    def vip_bound() -> dict | None:
        pod = stack.pod(ns, "vip")
        return pod if pod["spec"].get("nodeName") else None

    vip = wait_until("vip bound", vip_bound, 90)
    assert vip["spec"]["nodeName"] == node
    assert [uuid for uuid, _, _ in allocated(vip)] == [card0]
    stack.wait(3)
    late = stack.pod(ns, "late")
    assert not late["spec"].get("nodeName"), "the lower-priority pod took the freed card"
    assert {p["metadata"]["name"] for p in stack.pods(ns)} == {"b0", "b1", "b2", "vip", "late"}
