"""The defragmentation planner on small hand-built clusters (ACME devices: 8000 MiB, 100 cores each)."""

from __future__ import annotations

from typing import Any

from core_helpers import acme, acme_device, make_node, make_pod, scheduled

from hami_core.defrag import Budget, plan_defrag
from hami_core.engine.facade import Engine

OWNER = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True}]


def running(name: str, node: str, dev: str, mem: int, cores: int, *, owner: bool = True,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    pod = scheduled(make_pod(name, acme(1, mem, cores)), node, f"{dev},ACME,{mem},{cores}:;")
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    if owner:
        pod["metadata"]["ownerReferences"] = OWNER
    pod["metadata"]["labels"] = {"app": "web", **(labels or {})}
    return pod


def fragmented() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """node1: dev1 half used, dev2 idle; node2: dev3 and dev4 each half used. Moving the half on dev1 onto dev3
    or dev4 (4000 + 4000 MiB fill it) frees dev1: one move, one whole device."""
    nodes = [make_node("node1", [acme_device(1), acme_device(2)]), make_node("node2", [acme_device(3), acme_device(4)])]
    pods = [running("a", "node1", "dev1", 4000, 50), running("b", "node2", "dev3", 4000, 50),
            running("c", "node2", "dev4", 4000, 50)]
    return nodes, pods


def test_one_move_frees_a_whole_device(engine: Engine) -> None:
    nodes, pods = fragmented()
    plan = plan_defrag(engine, nodes, pods, budget=Budget(percent=100, max_moves=1))
    assert len(plan.moves) == 1
    assert plan.gpus_freed == 1
    assert plan.idle_before == 1 and plan.idle_after == 2
    assert plan.frag_after <= plan.frag_before
    move = plan.moves[0]
    assert move.to_node != move.from_node and move.owner == "ReplicaSet/rs"


def test_budget_rounds_down_and_is_respected(engine: Engine) -> None:
    nodes, pods = fragmented()
    plan = plan_defrag(engine, nodes, pods)  # 5 % of 3 pods: no move at all
    assert plan.budget == 0 and plan.moves == ()
    assert Budget(percent=50).moves(10) == 5 and Budget(percent=50, max_moves=2).moves(10) == 2


def test_do_not_move_label_and_missing_owner(make_engine: Any) -> None:
    nodes, pods = fragmented()
    for p in pods:
        p["metadata"]["labels"]["hami.io/defrag"] = "false"
    plan = plan_defrag(make_engine(), nodes, pods, budget=Budget(percent=100))
    assert plan.moves == () and all("hami.io/defrag" in r for r in plan.skipped.values())
    nodes, pods = fragmented()
    for p in pods:
        del p["metadata"]["ownerReferences"]
    plan = plan_defrag(make_engine(), nodes, pods, budget=Budget(percent=100))
    assert plan.moves == () and all("controller" in r for r in plan.skipped.values())
    # only the unowned one stays: the others may still move
    nodes, pods = fragmented()
    del pods[1]["metadata"]["ownerReferences"]
    plan = plan_defrag(make_engine(), nodes, pods, budget=Budget(percent=100, max_moves=1))
    assert [m.pod for m in plan.moves] == ["default/a"] and plan.gpus_freed == 1
    assert "default/b" in plan.skipped


def pdb(allowed: int, *, generation: int = 1, observed: int = 1) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "default", "generation": generation},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": observed}}


def test_pdb_respected(make_engine: Any) -> None:
    nodes, pods = fragmented()
    assert plan_defrag(make_engine(), nodes, pods, [pdb(0)], Budget(percent=100)).moves == ()
    # a PDB whose status lags its spec allows nothing, as in the Eviction API
    assert plan_defrag(make_engine(), nodes, pods, [pdb(5, generation=2)], Budget(percent=100)).moves == ()
    plan = plan_defrag(make_engine(), nodes, pods, [pdb(1)], Budget(percent=100))
    assert len(plan.moves) == 1
    # two PDBs covering a pod: the Eviction API refuses it
    other = pdb(5)
    other["metadata"]["name"] = "all"
    other["spec"]["selector"] = {}
    assert plan_defrag(make_engine(), nodes, pods, [pdb(5), other], Budget(percent=100)).moves == ()


def test_never_over_allocates_the_target(engine: Engine) -> None:
    # node2's devices are 3/4 used: the 4000 MiB pod on node1 fits on neither; nothing can move
    nodes = [make_node("node1", [acme_device(1), acme_device(2)]), make_node("node2", [acme_device(3), acme_device(4)])]
    pods = [running("a", "node1", "dev1", 4000, 50), running("b", "node2", "dev3", 6000, 50),
            running("c", "node2", "dev4", 6000, 50)]
    plan = plan_defrag(engine, nodes, pods, budget=Budget(percent=100))
    assert all(m.pod != "default/a" for m in plan.moves)
    for state in engine.nodes.values():
        for d in state.by_uuid.values():
            assert d.usedmem <= d.totalmem and d.usedcores <= d.totalcore


def test_no_move_when_nothing_helps(engine: Engine) -> None:
    # every device full or idle: no fragment to close
    nodes = [make_node("node1", [acme_device(1), acme_device(2)]), make_node("node2", [acme_device(3)])]
    pods = [running("a", "node1", "dev1", 8000, 100), running("b", "node2", "dev3", 8000, 100)]
    plan = plan_defrag(engine, nodes, pods, budget=Budget(percent=100))
    assert plan.moves == () and plan.gpus_freed == 0 and plan.frag_after == plan.frag_before


def test_fragmentation_falls_as_hand_computed(engine: Engine) -> None:
    # mix: three half-card pods and one whole-card pod. A half-free card is a fragment for the whole-card class
    # (weight 1/4): 3 x 500 milli before; a moved onto dev3 or dev4 leaves one, and dev1 idle
    nodes, pods = fragmented()
    pods.append(running("w", "node1", "dev2", 8000, 100))
    plan = plan_defrag(engine, nodes, pods, budget=Budget(percent=100, max_moves=1))
    assert [m.pod for m in plan.moves] == ["default/a"]
    assert plan.frag_before == 0.25 * 3 * 500 and plan.frag_after == 0.25 * 500
    assert plan.idle_before == 0 and plan.idle_after == 1
