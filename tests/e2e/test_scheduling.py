"""Scenarios 3 and 4: one GPU pod end to end through the real kube-scheduler and the real device plugin, and a pod
that fits nowhere."""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from realkube.hami import HamiDevicePlugin
from realkube.objects import allocated, create_node, gpu_devices, gpu_pod
from realkube.procs import wait_until
from realkube.stack import Stack

from hami_core.testing.fake_kubelet import FakeKubelet
from hami_core.wire import keys

pytestmark = pytest.mark.e2e


@pytest.fixture
def real_node(stack: Stack) -> Iterator[tuple[str, FakeKubelet, HamiDevicePlugin]]:
    """A node whose devices are registered by a real ``hami device-plugin`` process, talking to the project's fake
    kubelet over the kubelet's own sockets."""
    name = "dp-node-0"
    folder = Path(tempfile.mkdtemp(prefix="hk", dir="/tmp"))  # unix socket paths must stay short
    kubelet = FakeKubelet(folder).start()
    create_node(stack.plane.core(), name, gpus=2, register=False)  # no annotation: the plugin writes it
    plugin = HamiDevicePlugin(stack.workdir, stack.device_kubeconfig, name, folder, gpu_devices(name, 2)).start()
    try:
        yield name, kubelet, plugin
    finally:
        plugin.stop()
        kubelet.stop()
        stack.delete_nodes([name])
        shutil.rmtree(folder, ignore_errors=True)


def test_one_gpu_pod_end_to_end(stack: Stack, ns: str, real_node: tuple[str, FakeKubelet, HamiDevicePlugin]) -> None:
    node, kubelet, _plugin = real_node
    registration = kubelet.next_registration(timeout=30)
    assert registration.resource_name == "nvidia.com/gpu" and registration.version == "v1beta1"
    stack.wait_hami_nodes([node])  # the plugin's registration annotation, through the real API server

    stack.create_pods(ns, [gpu_pod("train", namespace=ns, mem=20000, cores=30)])
    pod = stack.wait_bound(ns, 1, 60)[0]
    meta = pod["metadata"]
    annos = meta["annotations"]
    assert pod["spec"]["nodeName"] == node and pod["spec"]["schedulerName"] == "hami-scheduler"
    assert annos[keys.VGPU_NODE] == node and annos[keys.BIND_PHASE] == keys.BIND_PHASE_ALLOCATING
    ((uuid, mem, cores),) = allocated(pod)
    assert (mem, cores) == (20000, 30) and uuid in {d["uuid"] for d in gpu_devices(node, 2)}
    lock = stack.plane.core().read_node(node).metadata.annotations[keys.NODE_LOCK]
    assert lock.endswith(f",{ns},train"), lock

    # kubelet: the plugin's devices from ListAndWatch, then Allocate for the container's one vGPU
    with kubelet.connect(registration.endpoint) as client:
        stream = client.list_and_watch()
        ids = [d.ID for d in next(stream).devices]
        stream.cancel()
        assert len(ids) == 20  # 2 GPUs x deviceSplitCount 10
        preferred = client.preferred(ids, [], 1).container_responses[0].deviceIDs
        assert [i.rsplit("-", 1)[0] for i in preferred] == [uuid]  # steered to the scheduler's card
        response = client.allocate(list(preferred)).container_responses[0]
    env = dict(response.envs)
    assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20000m" and env["CUDA_DEVICE_SM_LIMIT"] == "30"

    def released() -> bool:
        node_annos = stack.plane.core().read_node(node).metadata.annotations or {}
        return keys.NODE_LOCK not in node_annos

    wait_until("node lock released", released, 15)
    assert stack.pod(ns, "train")["metadata"]["annotations"][keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS

    # the events: hami's filter and bind, kube-scheduler's Scheduled; one Event object per reason (repeats of the
    # same reason are counted on it, not posted again)
    def reasons() -> Counter[str] | None:
        found = Counter(e["reason"] for e in stack.events(ns) if e["involvedObject"].get("name") == "train")
        return found if {"FilteringSucceed", "BindingSucceed", "Scheduled"} <= set(found) else None

    found = wait_until("the pod's events", reasons, 20)
    assert found["FilteringSucceed"] == found["BindingSucceed"] == found["Scheduled"] == 1, found
    assert stack.hami_ledger(ns) == stack.api_ledger(ns) == {(ns, "train", node, uuid): (20000, 30)}


def test_pod_that_fits_nowhere_stays_pending_with_hamis_reasons(stack: Stack, ns: str, make_nodes) -> None:
    nodes = make_nodes(2, "small", gpus=1)
    stack.create_pods(ns, [gpu_pod("huge", namespace=ns, mem=200000)])  # more than any card's 80 GiB

    def failed() -> dict | None:
        events = [e for e in stack.events(ns) if e["reason"] == "FailedScheduling"
                  and e["involvedObject"].get("name") == "huge"]
        return events[-1] if events else None

    event = wait_until("FailedScheduling", failed, 30)
    message = event.get("message") or event.get("note") or ""
    # kube-scheduler's message carries the extender's reason for each node it asked about
    assert "CardInsufficientMemory" in message, message
    assert f"{len(nodes)} " in message or all(n in message for n in nodes), message
    pod = stack.pod(ns, "huge")
    assert not pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending"
    assert stack.hami_ledger(ns) == {}
