"""``--filter-patch async``: /filter answers before its pod patch lands; /bind and a second /filter of the pod wait
for it. The service runs over HTTP on 127.0.0.1 on a :class:`MemoryCluster` whose pod patches can be held at a
gate (the API server being slow) or made to fail (the API server refusing)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from sched_helpers import gpu_pod, make_engine, nvidia_node, post

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.app import Options, Scheduler
from hami_core.scheduler.extender import Extender
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock


class GatedPatches(MemoryCluster):
    """Pod patches wait for ``gate`` (set by default); with ``refuse`` they fail with a server error."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.gate.set()
        self.refuse = False
        self.patches = 0

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        assert self.gate.wait(20)
        if self.refuse:
            raise RuntimeError("HTTP 500: etcdserver: request timed out")
        self.patches += 1
        return super().patch_pod(namespace, name, patch)


@pytest.fixture
def gated() -> GatedPatches:
    return GatedPatches(nodes=[nvidia_node("node-a"), nvidia_node("node-b")])


@pytest.fixture
def service(gated: GatedPatches) -> Iterator[Scheduler]:
    svc = Scheduler(make_engine(), gated, Options(host="127.0.0.1", port=0, metrics_host=None, filter_patch="async"))
    svc.extender.locker.backoff_s = 0.01
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()


def _until(predicate: Any) -> None:
    done = threading.Event()
    for _ in range(2000):
        if predicate():
            return
        done.wait(0.005)
    raise AssertionError("condition not reached")


def _filter(svc: Scheduler, pod: dict[str, Any]) -> dict[str, Any]:
    return post(svc.server.url + "/filter", {"Pod": pod, "NodeNames": ["node-a", "node-b"]})[2]


def _bind(svc: Scheduler, name: str, node: str) -> dict[str, Any]:
    return post(svc.server.url + "/bind", {"PodName": name, "PodNamespace": "default",
                                           "PodUID": f"uid-default-{name}", "Node": node})[2]


def test_filter_answers_before_the_patch_and_bind_waits_for_it(service: Scheduler, gated: GatedPatches) -> None:
    pod = gated.add_pod(gpu_pod("p", mem=4000))
    gated.gate.clear()  # the API server is slow
    [node] = _filter(service, pod)["NodeNames"]  # answered while the patch is held
    assert keys.VGPU_NODE not in (gated.get_pod("default", "p")["metadata"].get("annotations") or {})
    assert service.extender.writes is not None and service.extender.writes.pending() == 1
    result: list[dict[str, Any]] = []
    binder = threading.Thread(target=lambda: result.append(_bind(service, "p", node)))
    binder.start()
    _until(lambda: service.extender.writes.waited == 1)  # bind is waiting for the write
    gated.gate.set()
    binder.join(20)
    assert result == [{"Error": ""}]
    stored = gated.get_pod("default", "p")
    assert stored["spec"]["nodeName"] == node and stored["metadata"]["annotations"][keys.VGPU_NODE] == node
    assert ",NVIDIA,4000," in stored["metadata"]["annotations"][keys.VGPU_DEVICES_ALLOCATED]
    assert decode_node_lock(gated.get_node(node)["metadata"]["annotations"][keys.NODE_LOCK]).owned_by("default", "p")
    assert [e["reason"] for e in gated.events] == ["FilteringSucceed", "BindingSucceed"]


def test_a_second_filter_of_a_pod_waits_for_the_first_write(service: Scheduler, gated: GatedPatches) -> None:
    pod = gated.add_pod(gpu_pod("p", mem=4000))
    gated.gate.clear()
    _filter(service, pod)
    again: list[dict[str, Any]] = []
    second = threading.Thread(target=lambda: again.append(_filter(service, pod)))
    second.start()
    _until(lambda: service.extender.writes is not None and service.extender.writes.waited == 1)
    assert gated.patches == 0  # nothing written while the first write is held
    gated.gate.set()
    second.join(20)
    _until(lambda: service.extender.writes.pending() == 0)
    [node] = again[0]["NodeNames"]
    assert gated.patches == 2  # in order: the second decision is what the pod carries
    assert gated.get_pod("default", "p")["metadata"]["annotations"][keys.VGPU_NODE] == node
    with service.lock:
        assert [b.node for b in service.engine.ledger.bookings.values()] == [node]  # booked once


def test_a_failed_write_drops_the_reservation_and_bind_refuses(service: Scheduler, gated: GatedPatches) -> None:
    pod = gated.add_pod(gpu_pod("p", mem=4000))
    gated.refuse = True
    [node] = _filter(service, pod)["NodeNames"]  # answered before the failure is known
    _until(lambda: any(e["reason"] == "FilteringFailed" for e in gated.events))
    _until(lambda: service.extender.writes is not None and service.extender.writes.pending() == 0)
    with service.lock:
        assert not service.engine.ledger.bookings  # the reservation was dropped
    failed = next(e["message"] for e in gated.events if e["reason"] == "FilteringFailed")
    assert failed.startswith("failed to patch pod default/p: ") and "etcdserver" in failed
    result = _bind(service, "p", node)
    assert result["Error"] == ("pod default/p carries no device allocation (its filter's patch failed or was never "
                               "made); it must be filtered again")
    assert not gated.get_pod("default", "p")["spec"].get("nodeName")
    assert keys.NODE_LOCK not in (gated.get_node(node)["metadata"].get("annotations") or {})
    gated.refuse = False  # kube-scheduler's retry: filtered and bound
    [node] = _filter(service, pod)["NodeNames"]
    assert _bind(service, "p", node) == {"Error": ""}


def test_shutdown_finishes_pending_writes(gated: GatedPatches) -> None:
    svc = Scheduler(make_engine(), gated, Options(host="127.0.0.1", port=0, metrics_host=None, filter_patch="async"))
    svc.start()
    pod = gated.add_pod(gpu_pod("p", mem=4000))
    gated.gate.clear()
    [node] = _filter(svc, pod)["NodeNames"]
    stopper = threading.Thread(target=svc.stop)
    stopper.start()
    gated.gate.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert gated.get_pod("default", "p")["metadata"]["annotations"][keys.VGPU_NODE] == node


def test_unknown_filter_patch_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown filter patch mode 'later': choose one of sync, async"):
        Extender(make_engine(), MemoryCluster(), filter_patch="later")
