"""Fuzz node-lock values (``hami.io/mutex.lock`` and vendor locks) where they are read: the scheduler's
NodeLocker (acquire/release) and the device plugin's Allocate, which finds its pod through the lock. Each
value yields a lock taken, refused with a HamiError, or an Allocate error naming the pod or node."""

from __future__ import annotations

from fuzz_helpers import annotation_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.cluster.memory import MemoryCluster
from hami_core.node.allocate import AllocateError, Allocator
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import ContainerAllocation, DeviceBackend, LockSpec, ResourceNames
from hami_core.scheduler.nodelock import NodeLocker
from hami_core.wire import keys

_SETTINGS = settings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames("acme.com/gpu"))
_locks = annotation_values | st.builds(
    lambda t, ns, name: f"{t},{ns},{name}",
    st.sampled_from(["2025-01-01T00:00:00Z", "2025-01-01T00:00:00+08:00", "0", "", "2025-13-01T00:00:00Z",
                     "9999-12-31T23:59:59Z", "-1", "1700000000"]),
    st.sampled_from(["default", "", "x,y"]), st.sampled_from(["p1", "", "p2", "a,b"]))


def _cluster(lock: str) -> MemoryCluster:
    pod = {"metadata": {"name": "p1", "namespace": "default", "annotations": {
        keys.VGPU_DEVICES_TO_ALLOCATE: "GPU-a,ACME,1,0:;", keys.BIND_PHASE: "allocating", keys.BIND_TIME: "1",
        keys.VGPU_NODE: "n"}}, "spec": {"nodeName": "n"}, "status": {"phase": "Pending"}}
    return MemoryCluster(nodes=[{"metadata": {"name": "n", "annotations": {keys.NODE_LOCK: lock}}}], pods=[pod])


@_SETTINGS
@given(lock=_locks, owned=st.booleans())
def test_scheduler_lock_acquire_and_release(lock: str, owned: bool) -> None:
    cluster = _cluster(lock)
    locker = NodeLocker(cluster, clock=lambda: 1_735_689_700.0, sleep=lambda s: None, attempts=1)
    spec = LockSpec(keys.NODE_LOCK, owned=owned)
    pod = {"metadata": {"name": "p2", "namespace": "default"}}
    try:
        locker.acquire("n", pod, spec)
    except HamiError as exc:
        assert str(exc).strip()
        return
    assert cluster.get_node("n")["metadata"]["annotations"][keys.NODE_LOCK]
    locker.release("n", pod, spec)


@_SETTINGS
@given(lock=_locks)
def test_device_plugin_allocate_with_any_lock(lock: str) -> None:
    cluster = _cluster(lock)
    allocator = Allocator(cluster, "n", BACKEND, lambda pod, i, devs: ContainerAllocation(env={"I": str(i)}),
                          sleep=lambda s: None)
    try:
        allocator.allocate([["GPU-a-0"]])
    except AllocateError as exc:
        assert str(exc).strip()
    allocator.preferred([])
