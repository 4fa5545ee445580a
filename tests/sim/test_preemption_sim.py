"""``hami simulate --preemption``: priorities from PriorityClasses or the openb ``qos`` column, and a replay in which a
pod that fits nowhere evicts the fewest lower-priority pods whose devices it needs (never an equal or higher one),
with the ledger, the allocation measure and the report kept true."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from hami_core.cli import main
from hami_core.engine.config import load_config
from hami_core.engine.facade import Engine
from hami_core.engine.pods import pod_priority
from hami_core.plugins.manager import get_plugin_manager
from hami_core.sim import openb
from hami_core.sim.experiment import Experiment, Policy
from hami_core.sim.loader import InputError
from hami_core.sim.openb import QOS_PRIORITY, Task, TraceNode
from hami_core.sim.priority import resolve_priorities
from hami_core.sim.replay import Replay
from hami_core.sim.workload import from_task

BINPACK = Policy("binpack", "binpack", "binpack")


def _pc(name: str, value: object, default: bool = False) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value, **({"globalDefault": True} if default else {})}


def _pod(name: str, spec: dict | None = None) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": dict(spec or {})}


def test_priority_classes_resolve_as_the_priority_admission_plugin() -> None:
    pods = [_pod("a", {"priorityClassName": "high"}), _pod("b"), _pod("c", {"priority": 7})]
    resolve_priorities(pods, [_pc("high", 1000), _pc("low", 5, default=True)], source="w.yaml")
    assert [p["spec"]["priority"] for p in pods] == [1000, 5, 7]
    plain = [_pod("d")]
    resolve_priorities(plain, [_pc("high", 1000)], source="w.yaml")
    assert pod_priority(plain[0]) == 0  # no class, no default: priority 0


@pytest.mark.parametrize(("pods", "classes", "message"), [
    ([_pod("a", {"priorityClassName": "gold"})], [_pc("high", 1)],
     "w.yaml: pod ns/a: spec.priorityClassName: no PriorityClass 'gold' in the workload file"),
    ([], [_pc("x", "high")], "w.yaml: PriorityClass x: value must be an integer in"),
    ([], [_pc("x", True)], "PriorityClass x: value must be an integer"),
    ([], [_pc("x", 2_000_000_000)], "PriorityClass x: value must be an integer in [-1000000000, 1000000000]"),
    ([], [_pc("x", 1, default=True), _pc("y", 2, default=True)], "PriorityClass y: globalDefault is set on more"),
    ([], [{"kind": "PriorityClass", "value": 1}], "w.yaml: a PriorityClass has no metadata.name"),
])
def test_bad_priority_classes_name_the_object_and_field(pods: list, classes: list, message: str) -> None:
    with pytest.raises(InputError) as info:
        resolve_priorities(pods, classes, source="w.yaml")
    assert message in str(info.value)


def test_openb_qos_column_is_the_priority(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
                    "deletion_time,scheduled_time\n"
                    "p-ls,1000,1024,1,500,,LS,Running,0,0,0\np-bu,1000,1024,1,500,,Burstable,Running,0,0,0\n"
                    "p-be,1000,1024,1,500,,BE,Running,0,0,0\np-gu,1000,1024,1,500,,Guaranteed,Running,0,0,0\n"
                    "p-xx,1000,1024,1,500,,Odd,Running,0,0,0\n")
    tasks = openb.load_tasks(path)
    assert [t.qos for t in tasks] == ["LS", "Burstable", "BE", "Guaranteed", "Odd"]
    assert [pod_priority(openb.pod_object(t)) for t in tasks] == [2000, 1000, 0, 2000, 0]
    assert QOS_PRIORITY["LS"] > QOS_PRIORITY["Burstable"] > QOS_PRIORITY["BE"]


def _replay(gpus: int = 2, nodes: int = 1, *, preemption: bool = True) -> Replay:
    config = load_config({"scheduler": {"gpuSchedulerPolicy": "binpack"}})
    trace = [openb.node_object(TraceNode(f"n{i}", 64000, 262144, gpus, "V100M32")) for i in range(nodes)]
    return Replay(Engine(config, plugins=get_plugin_manager()), trace, policy="binpack", seed=None,
                  keep_placements=True, preemption=preemption)


def _task(name: str, qos: str, num: int = 1, milli: int = 500, cpu: int = 1000) -> object:
    return from_task(Task(name, cpu, 1024, num, milli, "", qos))


def _gpu_of(placed: object) -> set[str]:
    return {d.uuid for ctr in placed.decision.devices.values() for devs in ctr for d in devs}


def test_a_high_priority_pod_evicts_exactly_the_pods_of_one_card() -> None:
    replay = _replay()
    low = [replay.place(_task(f"be-{i}", "BE")) for i in range(4)]  # two halves on each card
    assert all(p.node == "n0" for p in low)
    vip = replay.place(_task("vip", "LS", milli=1000))
    assert vip.node == "n0"
    r = replay.result
    assert (r.preemptions, r.evicted, r.evicted_milli) == (1, 2, 1000)
    evicted = [p for p in low if p.evicted_by == "openb/vip"]
    assert sorted(vip.preempted) == sorted(p.pod for p in evicted) and len(evicted) == 2
    assert set().union(*(_gpu_of(p) for p in evicted)) == _gpu_of(vip)  # the victims held exactly vip's card
    # the ledger holds the survivors and vip, nothing of the victims; the allocation measure agrees with it
    booked = {b.key for b in replay.engine.ledger.on_node("n0")}
    assert booked == set(replay.live) and len(booked) == 3
    assert r.allocated_milli == pytest.approx(2000)  # vip's whole card + two halves
    assert replay.engine.nodes["n0"].by_uuid  # usage is still per device


def test_no_preemption_among_equals_or_when_off() -> None:
    for qos, on in (("LS", True), ("BE", False)):
        replay = _replay(preemption=on)
        for i in range(4):
            replay.place(_task(f"p-{i}", qos))
        vip = replay.place(_task("vip", "LS", milli=1000))
        assert vip.node is None and replay.result.evicted == 0 and not vip.preempted


def test_the_victims_are_the_lowest_priority_and_the_fewest() -> None:
    replay = _replay()
    replay.place(_task("bu-0", "Burstable", milli=500))  # card A: a Burstable half, a BE half
    replay.place(_task("be-0", "BE", milli=500))
    replay.place(_task("be-1", "BE", milli=1000))  # card B: one whole BE pod
    vip = replay.place(_task("vip", "LS", milli=1000))
    # one victim (the whole-card BE pod) beats two on card A, and a Burstable pod is never chosen over it
    assert vip.preempted == ("openb/be-1",)
    # a Burstable pod needing a whole card: on card A only be-0 is below it, and evicting it frees half a card
    assert replay.place(_task("bu-1", "Burstable", milli=1000)).node is None
    assert replay.result.evicted == 1


def test_a_pod_no_eviction_can_help_stays_pending() -> None:
    replay = _replay()
    for i in range(4):
        replay.place(_task(f"be-{i}", "BE"))
    vip = replay.place(_task("vip", "LS", num=4, milli=1000))  # four cards on a two-card node
    assert vip.node is None and replay.result.evicted == 0


def test_random_replays_keep_the_ledger_true() -> None:
    """Random mixes of priorities and shapes: every eviction is of a strictly lower-priority pod, no pod is booked
    twice or after its eviction, and the allocation measure equals the ledger's."""
    rng = random.Random(11)
    for trial in range(15):
        replay = _replay(gpus=4, nodes=2)
        prio: dict[str, int] = {}
        for i in range(30):
            qos = rng.choice(["BE", "BE", "Burstable", "LS"])
            num = rng.choice([1, 1, 1, 2])
            task = _task(f"t{trial}-{i}", qos, num=num, milli=1000 if num > 1 else rng.choice([250, 500, 1000]))
            prio[f"openb/{task.pod['metadata']['name']}"] = QOS_PRIORITY[qos]
            placed = replay.place(task)
            for victim in placed.preempted:
                assert prio[victim] < prio[placed.pod]
        booked = [b.key for n in ("n0", "n1") for b in replay.engine.ledger.on_node(n)]
        assert len(booked) == len(set(booked)) and set(booked) == set(replay.live)
        evicted = {p.pod for p in replay.result.placements if p.evicted_by}
        assert not evicted & {t[3].pod for t in replay.live.values()}
        assert len(evicted) == replay.result.evicted
        shares = sum(replay.device_share(u) for n in ("n0", "n1") for u in replay.engine.nodes[n].by_uuid.values())
        assert replay.result.allocated_milli == pytest.approx(shares)


def test_experiment_and_cli_report_the_evictions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [openb.node_object(TraceNode("n0", 64000, 262144, 2, "V100M32"))]
    docs = [_pc("low", 10), _pc("high", 1000)]
    for i in range(4):
        docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"low-{i}"},
                     "spec": {"priorityClassName": "low", "containers": [{"name": "c", "resources": {"limits": {
                         "nvidia.com/gpu": "1", "nvidia.com/gpumem": "16000"}}}]}})
    docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "vip"},
                 "spec": {"priorityClassName": "high", "containers": [{"name": "c", "resources": {"limits": {
                     "nvidia.com/gpu": "1", "nvidia.com/gpumem": "32000"}}}]}})
    cluster, workload, report = tmp_path / "c.yaml", tmp_path / "w.yaml", tmp_path / "r.json"
    cluster.write_text(yaml.safe_dump_all(nodes))
    workload.write_text(yaml.safe_dump_all(docs))
    base = ["simulate", "--cluster", str(cluster), "--workload", str(workload), "--node-policy", "binpack",
            "--gpu-policy", "binpack", "--report", str(report)]
    assert main(base) == 0
    off = json.loads(report.read_text())["runs"][0]
    assert off["evicted"] == 0 and [p["node"] for p in off["placements"]][-1] is None
    assert main([*base, "--preemption"]) == 0
    out = capsys.readouterr().out
    assert "preemption: on" in out and "(2 of them evicted later by preemption)" in out
    on = json.loads(report.read_text())["runs"][0]
    assert (on["preemptions"], on["evicted"]) == (1, 2)
    assert on["evicted_gpus"] == pytest.approx(2 * 16000 / 32768, abs=1e-3)  # the share the victims held
    vip = on["placements"][-1]
    assert vip["node"] == "n0" and len(vip["preempted"]) == 2 and "preempted default/low-" in vip["note"]
    assert sorted(p["pod"] for p in on["placements"] if p["evicted_by"] == "default/vip") == sorted(vip["preempted"])

    docs[-1]["spec"]["priorityClassName"] = "gold"
    workload.write_text(yaml.safe_dump_all(docs))
    assert main([*base, "--preemption"]) == 1
    err = capsys.readouterr().err
    assert "pod default/vip: spec.priorityClassName: no PriorityClass 'gold'" in err and "Traceback" not in err


def test_experiment_passes_preemption_to_each_run() -> None:
    nodes = [openb.node_object(TraceNode("n0", 64000, 262144, 1, "V100M32"))]
    tasks = [_task("be-0", "BE", milli=1000), _task("ls-0", "LS", milli=1000)]
    config, pm = load_config(None), get_plugin_manager()
    on = Experiment(config, pm, nodes, tasks, [BINPACK], keep_placements=True, preemption=True).run()[0]
    off = Experiment(config, pm, nodes, tasks, [BINPACK], keep_placements=True).run()[0]
    assert (on.evicted, on.placements[1].node) == (1, "n0")
    assert (off.evicted, off.placements[1].node) == (0, None)
