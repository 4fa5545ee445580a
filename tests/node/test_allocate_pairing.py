"""Property: kubelet's Allocate names no pod, yet no pod ever gets devices other than its own booking, and no
booking is handed out twice or lost, over random interleavings of binds, lock expiry, an old scheduler that breaks
expired locks, API faults the plugin retries, kubelet admitting pods (and losing an answer), intruder pods and
deletions.

The device plugin is the real gRPC server (:class:`~hami_core.node.server.DevicePluginServer`) on a unix socket;
the kubelet is a model that admits the node's pods one at a time in bind order, as the real one does, and for each
container asks GetPreferredAllocation, takes its answer if it fits what is free (else any free replicas), and
calls Allocate: what a real kubelet's device manager does. Its ground truth (which pod it is admitting) is what
the assertions check every answer against. Schedulers are :class:`~hami_core.scheduler.nodelock.NodeLocker`
(hami-py's rules) and a stand-in for HAMi v2.10's ``LockNode``, which breaks any expired lock (the swap this test
was written for: each of two pods got the other's card and memory limit).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.cluster.base import ConflictError
from hami_core.cluster.memory import MemoryCluster
from hami_core.node.allocate import Allocator
from hami_core.node.server import DevicePluginServer, replica_ids
from hami_core.plugins.errors import HamiError
from hami_core.plugins.types import ContainerAllocation, DeviceBackend, DeviceInfo, LockSpec, ResourceNames
from hami_core.scheduler.nodelock import LockContention, NodeLocker
from hami_core.testing.fake_kubelet import PluginClient
from hami_core.wire import keys
from hami_core.wire.lock import decode_node_lock, encode_node_lock

NODE = "n"
RESOURCE = "acme.com/gpu"
GPUS = ("GPU-aaaaaaaa-0000-1111-2222-333344445555", "GPU-bbbbbbbb-0000-1111-2222-333344445555")
DEVICES = [DeviceInfo(id=u, index=i, count=3, devmem=16000, devcore=100, type="ACME-X", health=True)
           for i, u in enumerate(GPUS)]
BACKEND = DeviceBackend(name="ACME", vendor="acme", resource_names=ResourceNames(RESOURCE),
                        to_allocate_annotation=keys.VGPU_DEVICES_TO_ALLOCATE, lock_annotation=keys.NODE_LOCK)
SPEC = LockSpec(keys.NODE_LOCK)
T0 = 1_750_000_000.0
EXPIRY_S = 300.0
PODS = 4


def _hand_out(pod: Any, index: int, devices: Any) -> ContainerAllocation:
    """The vendor hook: what the container gets, as ``uuid=MiB`` per device (each booking's MiB is unique)."""
    return ContainerAllocation(env={"HANDED": ",".join(f"{d.uuid}={d.usedmem}" for d in devices)})


def _booked(pod: int, ctr: int, gpus: tuple[int, ...]) -> tuple[str, str]:
    """(the to-allocate slot, what the container must be handed) of container ``ctr`` of pod ``pod``."""
    devices = [(GPUS[g], 1000 * (pod + 1) + 100 * ctr + g) for g in gpus]
    return ("".join(f"{u},ACME,{mem},10:" for u, mem in devices), ",".join(f"{u}={mem}" for u, mem in devices))


class PluginView:
    """The device plugin's API client on the shared store; armed faults strike its next calls (in-test stand-in):
    ``500`` fails before the call, ``lost`` applies it and loses the response, ``409`` is a conflict."""

    def __init__(self, store: MemoryCluster) -> None:
        self.store = store
        self.faults: list[tuple[str, str]] = []

    def _call(self, method: str, *args: Any) -> Any:
        kind = next((k for m, k in self.faults if m == method), None)
        if kind is not None:
            self.faults.remove((method, kind))
            if kind == "500":
                raise HamiError(f"{method}: 500 Internal Server Error")
            if kind == "409":
                raise ConflictError(f"{method}: the object has been modified")
            getattr(self.store, method)(*args)
            raise HamiError(f"{method}: connection reset before the response")
        return getattr(self.store, method)(*args)

    def get_node(self, name: str) -> Any:
        return self._call("get_node", name)

    def pods_on_node(self, node: str) -> Any:
        return self._call("pods_on_node", node)

    def patch_pod(self, namespace: str, name: str, patch: Any) -> Any:
        return self._call("patch_pod", namespace, name, patch)

    def patch_node(self, name: str, patch: Any) -> Any:
        return self._call("patch_node", name, patch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@dataclass
class Plugin:
    server: DevicePluginServer
    client: PluginClient


@pytest.fixture(scope="module")
def plugin() -> Iterator[Plugin]:
    path = Path(tempfile.mkdtemp(prefix="hpair", dir="/tmp"))  # unix socket paths must stay short
    allocator = Allocator(MemoryCluster(), NODE, BACKEND, _hand_out, sleep=lambda s: None)
    server = DevicePluginServer(resource_name=RESOURCE, socket_path=path / "acme.sock", devices=DEVICES,
                                allocator=allocator)
    server.start(register=False)
    client = PluginClient(server.socket_path)
    try:
        yield Plugin(server, client)
    finally:
        client.close()
        server.stop()
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Kubelet:
    """The kubelet model: admits the bound pods in bind order, one container per step."""

    queue: list[str] = field(default_factory=list)  # pod names, in the order they were bound
    progress: dict[str, int] = field(default_factory=dict)  # pod → containers admitted
    used: dict[str, str] = field(default_factory=dict)  # replica ID → the pod holding it
    served: dict[tuple[str, int], str] = field(default_factory=dict)  # (pod, container) → what it was handed

    def free(self, name: str) -> None:
        for device_id in [i for i, holder in self.used.items() if holder == name]:
            del self.used[device_id]


class Model:
    def __init__(self, plugin: Plugin, bookings: list[list[tuple[int, ...]]]) -> None:
        self.now = T0
        self.store = MemoryCluster(nodes=[{"kind": "Node", "metadata": {"name": NODE}}])
        self.view = PluginView(self.store)
        allocator = plugin.server.allocator
        allocator.cluster = self.view
        allocator.node_lock = NodeLocker(self.view, sleep=lambda s: None)
        self.client = plugin.client
        self.locker = NodeLocker(self.store, clock=lambda: self.now, sleep=lambda s: None, timeout_s=EXPIRY_S)
        self.kubelet = Kubelet()
        self.expected: dict[tuple[str, int], str] = {}
        self.containers: dict[str, int] = {}
        self.intruders = 0
        for i, gpus_per_ctr in enumerate(bookings):
            name = f"p{i}"
            slots = []
            for c, gpus in enumerate(gpus_per_ctr):
                slot, handed = _booked(i, c, gpus)
                slots.append(slot)
                self.expected[(name, c)] = handed
            self.containers[name] = len(slots)
            allocation = ";".join(slots) + ";"
            self.store.add_pod({"metadata": {"name": name, "namespace": "default", "annotations": {
                keys.VGPU_NODE: NODE, keys.VGPU_DEVICES_TO_ALLOCATE: allocation,
                keys.VGPU_DEVICES_ALLOCATED: allocation}},
                "spec": {"schedulerName": "hami-scheduler", "containers": [
                    {"name": f"c{c}", "resources": {"limits": {RESOURCE: str(len(g))}}}
                    for c, g in enumerate(gpus_per_ctr)]},
                "status": {"phase": "Pending"}})

    # ------------------------------------------------------------------------------------ schedulers
    def _pod(self, name: str) -> dict[str, Any] | None:
        return self.store.pods.get(("default", name))

    def _bind(self, name: str) -> None:
        self.store.bind("default", name, "", NODE, {keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
                                                     keys.BIND_TIME: str(int(self.now))})
        self.kubelet.queue.append(name)

    def bind(self, name: str) -> None:
        """hami-py's bind: the node lock (its rules), then the Binding with the bind phase."""
        pod = self._pod(name)
        if pod is None or pod["spec"].get("nodeName"):
            return
        try:
            self.locker.acquire(NODE, pod, SPEC)
        except LockContention:
            return  # kube-scheduler retries this pod later
        self._bind(name)

    def old_bind(self, name: str) -> None:
        """HAMi v2.10's ``LockNode`` (in-test stand-in): an expired lock is broken whoever holds it."""
        pod = self._pod(name)
        if pod is None or pod["spec"].get("nodeName"):
            return
        value = (self.store.get_node(NODE)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        if value:
            lock = decode_node_lock(value)
            if self.now - lock.time.timestamp() <= EXPIRY_S and self._pod(lock.name or "") is not None:
                return
        stamp = datetime.fromtimestamp(self.now, tz=UTC)
        self.store.patch_node(NODE, {"metadata": {"annotations": {
            keys.NODE_LOCK: encode_node_lock(stamp, "default", name)}}})
        self._bind(name)

    def intrude(self) -> None:
        """A pod created with ``spec.nodeName`` set (bypassing the scheduler and the webhook) asking for the
        resource: kubelet admits it like any other."""
        name = f"intruder{self.intruders}"
        self.intruders += 1
        self.store.add_pod({"metadata": {"name": name, "namespace": "default"},
                            "spec": {"nodeName": NODE, "containers": [
                                {"name": "c0", "resources": {"limits": {RESOURCE: "1"}}}]},
                            "status": {"phase": "Pending"}})
        self.containers[name] = 1
        self.kubelet.queue.append(name)

    # ------------------------------------------------------------------------------------ pods
    def set_phase(self, name: str, phase: str) -> None:
        pod = self._pod(name)
        if pod is not None:
            self.store.add_pod({**pod, "status": {"phase": phase}})
        if phase in ("Failed", "Succeeded"):
            self.kubelet.free(name)

    def delete(self, name: str) -> None:
        if self._pod(name) is not None:
            self.store.delete_pod("default", name)
            self.kubelet.free(name)

    # ------------------------------------------------------------------------------------ kubelet
    def admit_one_container(self, pick: Callable[[list[str]], list[str]], *, lose: bool = False) -> None:
        """kubelet's next step: one container of the first pod it has not admitted yet. ``pick`` orders the free
        replicas kubelet chooses from when GetPreferredAllocation gave no usable answer; ``lose``: the answer
        never reaches kubelet (its call timed out), which fails the pod."""
        k = self.kubelet
        while k.queue and self._pod(k.queue[0]) is None:  # deleted before kubelet got to it
            k.queue.pop(0)
        if not k.queue:
            return
        name = k.queue[0]
        ctr = k.progress.get(name, 0)
        size = int(self.store.pods[("default", name)]["spec"]["containers"][ctr]["resources"]["limits"][RESOURCE])
        available = [i for d in DEVICES for i in replica_ids(d) if i not in k.used]
        if len(available) < size:  # kubelet refuses the pod itself: not enough free replicas
            self._admission_failed(name)
            return
        answer = self.client.preferred(available, [], size).container_responses
        ids = list(answer[0].deviceIDs) if answer else []
        if len(ids) != size or not set(ids) <= set(available):
            ids = pick(available)[:size]
        try:
            response = self.client.allocate(ids)
        except grpc.RpcError:
            self._admission_failed(name)
            return
        if lose:
            self._admission_failed(name)
            return
        handed = dict(response.container_responses[0].envs)["HANDED"]
        # the property: the container kubelet is admitting got exactly its own pod's booking for it, once
        assert (name, ctr) in self.expected, f"{name} (no booking) was handed {handed}"
        assert handed == self.expected[(name, ctr)], f"{name}/c{ctr} was handed {handed}, " \
                                                     f"booked {self.expected[(name, ctr)]}"
        assert handed not in k.served.values(), f"{handed} handed out twice"
        k.served[(name, ctr)] = handed
        for device_id in ids:
            k.used[device_id] = name
        k.progress[name] = ctr + 1
        if k.progress[name] == self.containers[name]:
            k.queue.pop(0)  # admitted; it stays Pending while its images are pulled, until "start"

    def _admission_failed(self, name: str) -> None:
        """kubelet fails a pod it cannot admit (UnexpectedAdmissionError): the pod is Failed."""
        self.kubelet.queue.pop(0)
        self.set_phase(name, "Failed")

    # ------------------------------------------------------------------------------------ the end
    def check(self) -> None:
        """No booking lost: a slot the plugin consumed reached its own container, unless kubelet failed the pod;
        a pod whose every container got its devices was never flipped to ``failed``."""
        served = self.kubelet.served
        for (_, name), pod in self.store.pods.items():
            if name.startswith("intruder"):
                continue
            annos = pod["metadata"].get("annotations") or {}
            slots = annos[keys.VGPU_DEVICES_TO_ALLOCATE].split(";")
            for ctr in range(self.containers[name]):
                if not slots[ctr] and (name, ctr) not in served:
                    assert pod["status"]["phase"] == "Failed", f"{name}/c{ctr}: consumed, never handed out"
                if (name, ctr) in served:
                    assert not slots[ctr], f"{name}/c{ctr}: handed out, still booked for another Allocate"
            if all((name, c) in served for c in range(self.containers[name])):
                assert annos.get(keys.BIND_PHASE) == keys.BIND_PHASE_SUCCESS, f"{name}: {annos.get(keys.BIND_PHASE)}"


_NAMES = st.sampled_from([f"p{i}" for i in range(PODS)])
OPS = st.lists(st.one_of(
    st.tuples(st.just("bind"), _NAMES),
    st.tuples(st.just("old-bind"), _NAMES),
    st.tuples(st.just("kubelet"), st.just("")),
    st.tuples(st.just("kubelet"), st.just("")),
    st.tuples(st.just("kubelet"), st.just("")),
    st.tuples(st.just("kubelet-lost"), st.just("")),
    st.tuples(st.just("expire"), st.just("")),
    st.tuples(st.just("fault"), st.sampled_from([f"{m} {k}" for m in ("get_node", "pods_on_node", "patch_pod",
                                                                      "patch_node") for k in ("500", "lost", "409")])),
    st.tuples(st.just("start"), _NAMES),
    st.tuples(st.just("finish"), _NAMES),
    st.tuples(st.just("delete"), _NAMES),
    st.tuples(st.just("intrude"), st.just("")),
), max_size=40)
BOOKINGS = st.lists(st.lists(st.sampled_from([(0,), (1,), (0, 1)]), min_size=1, max_size=2),
                    min_size=PODS, max_size=PODS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bookings=BOOKINGS, ops=OPS, data=st.data())
def test_no_pod_gets_devices_other_than_its_own_booking(plugin: Plugin, bookings: list[list[tuple[int, ...]]],
                                                        ops: list[tuple[str, str]], data: st.DataObject) -> None:
    model = Model(plugin, bookings)

    def pick(available: list[str]) -> list[str]:
        return data.draw(st.permutations(available))

    for op, arg in ops:
        if op == "bind":
            model.bind(arg)
        elif op == "old-bind":
            model.old_bind(arg)
        elif op == "kubelet":
            model.admit_one_container(pick)
        elif op == "kubelet-lost":
            model.admit_one_container(pick, lose=True)
        elif op == "expire":
            model.now += EXPIRY_S + 1
        elif op == "fault":
            method, kind = arg.split()
            model.view.faults.append((method, kind))
        elif op == "start":
            pod = model._pod(arg)  # an admitted pod's containers start once their images are pulled
            if (pod is not None and pod["status"]["phase"] == "Pending"
                    and model.kubelet.progress.get(arg) == model.containers[arg]):
                model.set_phase(arg, "Running")
        elif op == "finish":
            pod = model._pod(arg)
            if pod is not None and pod["status"]["phase"] == "Running":
                model.set_phase(arg, "Succeeded")
        elif op == "delete":
            model.delete(arg)
        elif op == "intrude":
            model.intrude()
    model.view.faults.clear()
    while model.kubelet.queue:  # kubelet gets to every pod bound so far
        model.admit_one_container(pick)
    model.check()


def test_the_swap_scenario_ends_with_each_pod_on_its_own_devices(plugin: Plugin) -> None:
    """The reproduction, step by step: p0 is bound and its Allocate is late; the lock expires; p1's bind is refused
    by hami-py (the holder waits), and when an old HAMi scheduler binds p1 anyway, kubelet's Allocate for p0 is
    refused rather than answered with p1's booking; p1's own Allocate then gets p1's devices."""
    model = Model(plugin, [[(0,)], [(1,)]])
    model.bind("p0")
    model.now += EXPIRY_S + 1
    model.bind("p1")
    assert model.kubelet.queue == ["p0"]  # kept: p0 still waits
    model.old_bind("p1")
    assert model.kubelet.queue == ["p0", "p1"]
    model.admit_one_container(list)  # no preferred answer (two pods wait): kubelet takes the first free replica
    assert model._pod("p0")["status"]["phase"] == "Failed"  # refused: two pods wait, the request names neither
    assert model.kubelet.served == {}
    model.admit_one_container(list)
    assert model.kubelet.served == {("p1", 0): model.expected[("p1", 0)]}
    model.check()
