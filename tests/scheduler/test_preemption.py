"""Device-aware preemption in the scheduler (hami_core.scheduler.preemption) on MemoryCluster and the NVIDIA backend:
hami's own path after a filter that found no node, kube-scheduler's preempt verb, holds and nominations."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.cluster.memory import MemoryCluster
from hami_core.scheduler.extwire import BadRequest
from hami_core.scheduler.preemption import Preemption
from hami_core.wire import keys


def running(name: str, node: str, card: int, mem: int, priority: int, *, labels: dict | None = None) -> dict:
    pod = gpu_pod(name, mem=mem, labels=labels)
    pod["spec"]["priority"] = priority
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    pod["metadata"]["annotations"] = {keys.VGPU_NODE: node,
                                      "hami.io/vgpu-devices-allocated": f"GPU-{node}-{card},NVIDIA,{mem},0:;"}
    return pod


def vip(mem: int = 24576, priority: int = 1000, *, gpus: int = 1, **spec: Any) -> dict:
    pod = gpu_pod("vip", gpus=gpus, mem=mem)
    pod["spec"]["priority"] = priority
    pod["spec"].update(spec)
    return pod


class World:
    def __init__(self, nodes: list[dict], pods: list[dict], pdbs: list[dict] | None = None) -> None:
        self.engine = make_engine()
        self.cluster = MemoryCluster(nodes=nodes, pods=pods)
        self.cluster.pdbs.extend(pdbs or [])
        for node in nodes:
            self.engine.upsert_node(node)
        for pod in pods:
            self.engine.upsert_pod(pod)
        self.events: list[tuple[str, str, str, str]] = []
        self.preemption = Preemption(self.engine, self.cluster, threading.RLock(), event=self._event)

    def _event(self, obj: Any, kind: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], kind, reason, message))

    def failed(self, pod: dict) -> dict[str, str]:
        decision = self.engine.schedule(pod)
        assert not decision.ok
        return dict(decision.failed)

    def names(self) -> set[str]:
        return {p["metadata"]["name"] for p in self.cluster.list_pods()}


def test_a_high_priority_pod_evicts_exactly_the_pods_on_one_card() -> None:
    pods = [running("a", "n1", 0, 12000, 1), running("b", "n1", 0, 12000, 1),
            running("c", "n1", 1, 8000, 1), running("d", "n1", 1, 8000, 1), running("e", "n1", 1, 8000, 1)]
    world = World([nvidia_node("n1")], pods)
    pod = vip()
    world.cluster.add_pod(pod)

    done = world.preemption.after_no_fit(pod, world.failed(pod))

    assert done is not None and done.node == "n1"
    assert sorted(v.ref for v in done.victims) == ["default/a", "default/b"]
    assert world.names() == {"c", "d", "e", "vip"}
    assert ("a", "Normal", "Preempted", "Preempted by pod uid-default-vip on node n1") in world.events
    assert world.cluster.get_pod("default", "vip")["status"]["nominatedNodeName"] == "n1"
    assert world.engine.held_node(pod) == "n1"
    assert world.preemption.results["preempted"] == 1 and world.preemption.victims_total == 2


def test_the_freed_card_waits_for_the_preemptor() -> None:
    world = World([nvidia_node("n1", gpus=1)], [running("a", "n1", 0, 24576, 1)])
    pod = vip()
    world.preemption.after_no_fit(pod, world.failed(pod))
    # The victim is deleted; until the sync sees it, the engine still books it. Then it goes.
    world.engine.remove_pod(running("a", "n1", 0, 24576, 1))
    late = gpu_pod("late", mem=24576)
    late["spec"]["priority"] = 1
    assert not world.engine.refilter(late, ["n1"]).ok
    assert world.engine.refilter(pod, ["n1"]).ok


def test_a_pod_holding_room_does_not_preempt_again() -> None:
    world = World([nvidia_node("n1", gpus=1)], [running("a", "n1", 0, 24576, 1)])
    pod = vip()
    failed = world.failed(pod)
    assert world.preemption.after_no_fit(pod, failed) is not None
    assert world.preemption.after_no_fit(pod, failed) is None
    assert world.preemption.results["held"] == 1


def test_preemption_policy_never_preempts_nothing() -> None:
    world = World([nvidia_node("n1", gpus=1)], [running("a", "n1", 0, 24576, 1)])
    pod = vip(preemptionPolicy="Never")
    assert world.preemption.after_no_fit(pod, world.failed(pod)) is None
    assert world.names() == {"a"}
    assert world.preemption.unresolvable(pod, world.failed(pod)) == {}


def test_equal_priority_pods_are_not_evicted() -> None:
    world = World([nvidia_node("n1", gpus=1)], [running("a", "n1", 0, 24576, 1000)])
    pod = vip()
    assert world.preemption.after_no_fit(pod, world.failed(pod)) is None
    assert world.preemption.results["no_victims"] == 1


def test_nodes_that_no_preemption_fixes_are_unresolvable() -> None:
    world = World([nvidia_node("n1", gpus=1), nvidia_node("n2", gpus=2)],
                  [running("a", "n1", 0, 24576, 1), running("b", "n2", 0, 24576, 1), running("c", "n2", 1, 24576, 1)])
    pod = vip(gpus=2)
    failed = world.failed(pod)
    assert set(world.preemption.unresolvable(pod, failed)) == {"n1"}  # one card: no eviction gives it two


def test_without_any_pod_to_preempt_the_answer_is_hamis_own() -> None:
    world = World([nvidia_node("n1", gpus=1)], [running("a", "n1", 0, 24576, 5000)])
    pod = vip(gpus=2)
    assert world.preemption.unresolvable(pod, world.failed(pod)) == {}


def test_a_node_whose_victim_breaks_a_pdb_is_avoided() -> None:
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "keep-a", "namespace": "default"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "a"}}}, "status": {"disruptionsAllowed": 0}}
    world = World([nvidia_node("n1", gpus=1), nvidia_node("n2", gpus=1)],
                  [running("a", "n1", 0, 24576, 1, labels={"app": "a"}), running("b", "n2", 0, 24576, 1)], [pdb])
    pod = vip()
    done = world.preemption.after_no_fit(pod, world.failed(pod))
    assert done is not None and (done.node, done.pdb_violations) == ("n2", 0)
    assert world.names() == {"a"}


def test_adopt_holds_room_on_a_nominated_node_after_a_restart() -> None:
    victim = running("a", "n1", 0, 24576, 1)
    world = World([nvidia_node("n1", gpus=1)], [victim])
    pod = vip()
    pod["status"]["nominatedNodeName"] = "n1"
    with world.preemption.lock:
        assert not world.preemption.adopt(pod)  # nothing terminating there: no room to hold
        assert world.preemption.adopt(pod, terminating=["uid-default-a"])
    assert world.engine.held_node(pod) == "n1"


# ------------------------------------------------------------------------------------ /preempt
def _world_for_verb() -> World:
    return World([nvidia_node("n1"), nvidia_node("n2", gpus=1)],
                 [running("a", "n1", 0, 12000, 1), running("b", "n1", 0, 12000, 1), running("c", "n1", 1, 24576, 5),
                  running("d", "n2", 0, 24576, 2000)])


def test_verb_keeps_kubes_victims_and_adds_the_device_victims() -> None:
    world = _world_for_verb()
    args = {"Pod": vip(), "NodeNameToMetaVictims": {
        "n1": {"Pods": [{"UID": "uid-default-a"}], "NumPDBViolations": 1},
        "n2": {"Pods": [{"UID": "uid-default-d"}], "NumPDBViolations": 0}}}
    result = world.preemption.verb(args)
    n1 = result["NodeNameToMetaVictims"]["n1"]
    assert [p["UID"] for p in n1["Pods"]] == ["uid-default-a", "uid-default-b"]
    assert n1["NumPDBViolations"] == 1
    # n2's victim, chosen by kube, frees its only card: kept as it is
    assert result["NodeNameToMetaVictims"]["n2"]["Pods"] == [{"UID": "uid-default-d"}]


def test_verb_drops_a_node_where_nothing_helps_and_reads_the_full_form_case_insensitively() -> None:
    world = _world_for_verb()
    victim = running("d", "n2", 0, 24576, 2000)
    args = {"pod": vip(gpus=2), "nodeNameToVictims": {"n2": {"pods": [victim], "numPDBViolations": 0}}}
    assert world.preemption.verb(args) == {"NodeNameToMetaVictims": {}}
    assert world.preemption.results["verb_node_dropped"] == 1


@pytest.mark.parametrize(("args", "needle"), [
    ([], "ExtenderPreemptionArgs must be a JSON object"),
    ({"Pod": "x"}, "ExtenderPreemptionArgs.Pod must be a Pod object"),
    ({"Pod": {}, "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims must be an object"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": {}}}}, r"NodeNameToMetaVictims\[n1\].Pods must be a list"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}}, r"Pods\[0\] has no UID"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [7]}}}, r"Pods\[0\] must be an object"),
])
def test_verb_refuses_bad_bodies_naming_the_field(args: Any, needle: str) -> None:
    with pytest.raises(BadRequest, match=needle):
        _world_for_verb().preemption.verb(args)


# ------------------------------------------------------------------------------------ over HTTP
def test_filter_preempts_and_preempt_verb_answers_over_http() -> None:
    from sched_helpers import post

    from hami_core.scheduler.app import Options, Scheduler

    low = running("low", "n1", 0, 24576, 1)
    cluster = MemoryCluster(nodes=[nvidia_node("n1", gpus=1), nvidia_node("n2", gpus=1)],
                            pods=[low, running("high", "n2", 0, 24576, 5000)])
    svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host="127.0.0.1",
                                                     metrics_port=0, sync_wait_s=2.0))
    svc.start()
    try:
        pod = cluster.add_pod(vip())
        status, _, result = post(svc.server.url + "/filter", {"Pod": pod, "NodeNames": ["n1", "n2"]})
        assert status == 200
        assert result["NodeNames"] is None
        assert set(result["FailedNodes"]) == {"n1"} and set(result["FailedAndUnresolvableNodes"]) == {"n2"}
        assert {p["metadata"]["name"] for p in cluster.list_pods()} == {"high", "vip"}
        assert cluster.get_pod("default", "vip")["status"]["nominatedNodeName"] == "n1"
        assert any(e["reason"] == "Preempted" and e["involvedObject"]["name"] == "low" for e in cluster.events)

        two = vip(gpus=2)
        status, _, result = post(svc.server.url + "/preempt", {
            "Pod": two, "NodeNameToMetaVictims": {"n2": {"Pods": [{"UID": "uid-default-high"}]}}})
        assert status == 200 and result == {"NodeNameToMetaVictims": {}}  # one card: no eviction gives it two
        status, _, text = post(svc.server.url + "/preempt", {"Pod": 3})
        assert status == 400 and "ExtenderPreemptionArgs.Pod must be a Pod object" in text

        import urllib.request

        assert svc.metrics_url is not None
        with urllib.request.urlopen(svc.metrics_url, timeout=10) as resp:
            metrics = resp.read().decode()
        assert 'hami_preemption_decisions_total{result="preempted"} 1.0' in metrics
        assert "hami_preemption_victims_total 1.0" in metrics
        assert "hami_preemption_holds 1.0" in metrics
    finally:
        svc.stop()


def test_a_restarted_scheduler_holds_room_for_a_nominated_pod_from_the_watch() -> None:
    from hami_core.scheduler.app import Options, Scheduler

    victim = running("low", "n1", 0, 24576, 1)
    victim["metadata"]["deletionTimestamp"] = "2026-12-03T00:00:00Z"  # being deleted: kubelet has not confirmed
    pod = vip()
    pod["status"]["nominatedNodeName"] = "n1"
    cluster = MemoryCluster(nodes=[nvidia_node("n1", gpus=1)], pods=[victim, pod])
    svc = Scheduler(make_engine(), cluster, Options(host="127.0.0.1", port=0, metrics_host="127.0.0.1",
                                                     metrics_port=0, sync_wait_s=2.0))
    svc.start()
    try:
        assert svc.sync.wait_synced(5)
        engine = svc.extender.engine
        with svc.lock:
            assert engine.held_node(pod) == "n1"
        cluster.delete_pod("default", "low")
        late = cluster.add_pod(gpu_pod("late", mem=24576))
        with svc.lock:
            assert not engine.schedule(late, ["n1"]).ok  # the freed card waits for vip
            assert engine.refilter(pod, ["n1"]).ok
    finally:
        svc.stop()


def test_the_hold_goes_with_its_nomination() -> None:
    """Room is held until the preemptor binds or its nomination goes: an event without the nomination, once the
    nomination has been seen, releases it; one before (our own status patch still on its way) does not."""
    world = World([nvidia_node("n1", gpus=1)], [running("a", "n1", 0, 24576, 1)])
    pod = vip()
    world.cluster.add_pod(pod)
    assert world.preemption.after_no_fit(pod, world.failed(pod)) is not None
    world.engine.remove_pod(running("a", "n1", 0, 24576, 1))
    world.preemption.on_pending(pod)  # an older version of the pod, without the nomination
    assert world.engine.held_node(pod) == "n1"
    nominated = world.cluster.get_pod("default", "vip")
    world.preemption.on_pending(nominated)
    assert world.engine.held_node(pod) == "n1"
    cleared = {**nominated, "status": {**nominated["status"], "nominatedNodeName": ""}}
    world.preemption.on_pending(cleared)  # kube-scheduler cleared the nomination
    assert world.engine.held_node(pod) is None
    late = gpu_pod("late", mem=24576)
    late["spec"]["priority"] = 1
    assert world.engine.schedule(late, ["n1"]).ok  # the room is free for anyone again
    # a bound preemptor and a deleted one leave nothing behind
    world.preemption.on_pending(nominated)
    world.preemption.forget(pod)
    assert not world.preemption._nominated


def test_a_nomination_moved_to_another_node_moves_the_hold() -> None:
    nodes = [nvidia_node("n1", gpus=1), nvidia_node("n2", gpus=1)]
    world = World(nodes, [running("a", "n1", 0, 24576, 1), running("b", "n2", 0, 24576, 1)])
    pod = vip()
    world.cluster.add_pod(pod)
    done = world.preemption.after_no_fit(pod, world.failed(pod))
    assert done is not None and done.node == "n1"
    world.engine.remove_pod(running("a", "n1", 0, 24576, 1))
    moved = world.cluster.get_pod("default", "vip")
    moved = {**moved, "status": {**moved["status"], "nominatedNodeName": "n2"}}
    world.cluster.delete_pod("default", "b")  # n2's pod is gone too: the pod fits there
    world.engine.remove_pod(running("b", "n2", 0, 24576, 1))
    world.preemption.on_pending(moved)
    assert world.engine.held_node(pod) == "n2"
    late = gpu_pod("late", mem=24576)
    late["spec"]["priority"] = 1
    assert world.engine.schedule(late, ["n1"]).ok and not world.engine.schedule(late, ["n2"]).ok
