"""Scenario 6: graceful deletion on the real API server. A deleted pod that is bound stays Terminating until its
kubelet confirms; its devices stay booked until the object is gone. A pod deleted while it holds its node's lock
does not hold the next pod up."""

from __future__ import annotations

import time

import pytest
from realkube.objects import allocated, gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

from hami_core.wire import keys

pytestmark = pytest.mark.e2e


def _lock(stack: Stack, node: str) -> str | None:
    return (stack.plane.core().read_node(node).metadata.annotations or {}).get(keys.NODE_LOCK)


def test_devices_stay_booked_while_terminating(stack: Stack, ns: str, make_nodes) -> None:
    (node,) = make_nodes(1, "graceful", gpus=1)
    assert stack.kubelet is not None
    stack.kubelet.hold_deletions.add(node)
    stack.create_pods(ns, [gpu_pod("running", namespace=ns, mem=60000)])
    stack.wait_bound(ns, 1)
    wait_until("Running", lambda: stack.pod(ns, "running")["status"]["phase"] == "Running", 20)
    booked = stack.hami_ledger(ns)
    assert list(booked.values()) == [(60000, 0)]

    stack.plane.core().delete_namespaced_pod("running", ns, _preload_content=False)
    terminating = stack.pod(ns, "running")  # still there: its kubelet has not confirmed
    assert terminating["metadata"]["deletionTimestamp"] and terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    # a second pod that needs the same card cannot have it while the first may still run on it
    stack.create_pods(ns, [gpu_pod("next", namespace=ns, mem=60000)])
    time.sleep(3)
    assert stack.hami_ledger(ns) == booked
    assert not stack.pod(ns, "next")["spec"].get("nodeName")

    stack.kubelet.release_deletions(node)  # kubelet: containers stopped, the object goes
    wait_until("gone", lambda: "running" not in {p["metadata"]["name"] for p in stack.pods(ns)}, 20)
    stack.wait_bound(ns, 1, 60)  # the card is free again: the waiting pod gets it
    nxt = stack.pod(ns, "next")
    assert nxt["spec"]["nodeName"] == node
    wait_until("ledgers agree", lambda: stack.hami_ledger(ns) == stack.api_ledger(ns), 20, 0.5)
    assert [(mem, cores) for _, mem, cores in allocated(nxt)] == [(60000, 0)]


def test_pod_deleted_while_holding_the_node_lock(stack: Stack, ns: str, make_nodes) -> None:
    (node,) = make_nodes(1, "locked", gpus=2)
    assert stack.kubelet is not None
    stack.kubelet.no_allocate.add(node)  # its kubelet never Allocates for the first pod: the lock stays
    stack.kubelet.hold_deletions.add(node)  # and it takes its time to confirm the deletion
    stack.create_pods(ns, [gpu_pod("holder", namespace=ns, mem=1000)])
    stack.wait_bound(ns, 1)
    assert (_lock(stack, node) or "").endswith(f",{ns},holder")

    stack.plane.core().delete_namespaced_pod("holder", ns, _preload_content=False)
    stack.kubelet.no_allocate.discard(node)
    started = time.monotonic()
    stack.create_pods(ns, [gpu_pod("after", namespace=ns, mem=1000)])
    wait_until("the next pod bound", lambda: stack.pod(ns, "after")["spec"].get("nodeName") == node, 30, 0.2)
    # not the lock's 5 minutes, nor the holder's 30 s grace period
    assert time.monotonic() - started < 15
    assert "holder" in {p["metadata"]["name"] for p in stack.pods(ns)}  # still Terminating
    stack.kubelet.release_deletions(node)
