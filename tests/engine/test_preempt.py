"""Device-aware victim choice (hami_core.engine.preempt): fewest, lowest-priority victims, by the engine's fit."""

from __future__ import annotations

import itertools
from typing import Any

from core_helpers import acme, acme_device, make_node, make_pod, scheduled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core.engine.preempt import Candidate, candidates_on, choose_victims, pod_priority, preemption_can_help


def placed(name: str, card: str, mem: int, priority: int, *, cores: int = 0) -> dict[str, Any]:
    pod = scheduled(make_pod(name, acme(1, mem, cores)), "n1", f"{card},ACME,{mem},{cores}:;")
    pod["spec"]["priority"] = priority
    pod["spec"]["nodeName"] = "n1"
    return pod


def preemptor(mem: int, priority: int = 1000, *, nums: int = 1, **annotations: str) -> dict[str, Any]:
    pod = make_pod("vip", acme(nums, mem), annotations=annotations)
    pod["spec"]["priority"] = priority
    return pod


def usage(engine: Any) -> list[tuple[str, int, int, int]]:
    return sorted((d.id, d.used, d.usedmem, d.usedcores) for d in engine.nodes["n1"].by_uuid.values())


def setup(engine: Any, pods: list[dict[str, Any]], cards: int = 2) -> list[Candidate]:
    engine.upsert_node(make_node("n1", [acme_device(i) for i in range(cards)]))
    for pod in pods:
        engine.upsert_pod(pod)
    return candidates_on(engine, "n1", pods, 1000)


def test_the_card_with_the_fewest_pods_is_freed(engine) -> None:
    pods = [placed("a", "dev0", 4000, 1), placed("b", "dev0", 4000, 1),
            placed("c", "dev1", 3000, 1), placed("d", "dev1", 3000, 1), placed("e", "dev1", 2000, 1)]
    candidates = setup(engine, pods)
    before = usage(engine)

    choice = choose_victims(engine, preemptor(8000), "n1", candidates)

    assert choice.fits
    assert [v.ref for v in choice.victims] == ["default/a", "default/b"]
    assert usage(engine) == before  # every trial put the bookings back


def test_lower_priority_is_preferred_among_equal_sized_sets(engine) -> None:
    pods = [placed("a", "dev0", 8000, 50), placed("b", "dev1", 8000, 10)]
    choice = choose_victims(engine, preemptor(6000), "n1", setup(engine, pods))
    assert [v.ref for v in choice.victims] == ["default/b"]


def test_a_pod_that_fits_needs_no_victims(engine) -> None:
    choice = choose_victims(engine, preemptor(4000), "n1", setup(engine, [placed("a", "dev0", 4000, 1)]))
    assert (choice.fits, choice.victims) == (True, ())


def test_equal_and_higher_priority_pods_are_never_victims(engine) -> None:
    pods = [placed("same", "dev0", 8000, 1000), placed("high", "dev1", 8000, 2000)]
    engine.upsert_node(make_node("n1", [acme_device(0), acme_device(1)]))
    for pod in pods:
        engine.upsert_pod(pod)
    everyone = [Candidate.of(p) for p in pods]  # even when a caller offers them

    choice = choose_victims(engine, preemptor(8000), "n1", everyone)

    assert not choice.fits
    assert choice.reason == "no lower-priority pod holds a device the pod asks for"
    assert candidates_on(engine, "n1", pods, 1000) == []


def test_no_preemption_fixes_a_node_with_too_few_cards(engine) -> None:
    candidates = setup(engine, [placed("a", "dev0", 8000, 1), placed("b", "dev1", 8000, 1)])
    pod = preemptor(1000, nums=3)
    assert not preemption_can_help(engine, pod, "n1", candidates)
    assert preemption_can_help(engine, preemptor(1000, nums=2), "n1", candidates)
    choice = choose_victims(engine, pod, "n1", candidates)
    assert not choice.fits and "does not fit even with every lower-priority pod gone" in choice.reason


def test_a_pod_holding_nothing_the_preemptor_asks_for_is_never_a_victim(engine) -> None:
    cpu_only = make_pod("cpu-only")
    cpu_only["spec"]["priority"] = 1
    cpu_only["spec"]["nodeName"] = "n1"
    candidates = setup(engine, [placed("a", "dev0", 8000, 1), placed("b", "dev1", 8000, 1), cpu_only])
    choice = choose_victims(engine, preemptor(8000), "n1", [*candidates, Candidate.of(cpu_only)])
    assert len(choice.victims) == 1 and choice.victims[0].ref in ("default/a", "default/b")


def test_two_cards_need_victims_on_both(engine) -> None:
    pods = [placed("a", "dev0", 6000, 1), placed("b", "dev1", 6000, 1), placed("c", "dev1", 1000, 1)]
    choice = choose_victims(engine, preemptor(4000, nums=2), "n1", setup(engine, pods))
    assert sorted(v.ref for v in choice.victims) == ["default/a", "default/b"]


def test_reprieve_beyond_the_exact_limit_keeps_only_necessary_victims(engine) -> None:
    pods = [placed(f"p{i}", f"dev{i % 2}", 1000, i) for i in range(16)]
    candidates = setup(engine, pods)
    choice = choose_victims(engine, preemptor(3000), "n1", candidates, exact_limit=4)
    assert choice.fits and len(choice.victims) == 3
    # each victim is necessary: giving any one back leaves the preemptor without room
    for v in choice.victims:
        rest = [c for c in choice.victims if c is not v]
        from hami_core.engine.preempt import _fits
        assert not _fits(engine, preemptor(3000), "n1", [c.key for c in rest])


def test_pod_priority_reads_spec_priority() -> None:
    assert pod_priority({"spec": {"priority": 7}}) == 7
    assert pod_priority({"spec": {"priority": True}}) == 0
    assert pod_priority({"spec": {}}) == 0 and pod_priority({}) == 0


pods_strategy = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 8), st.integers(0, 3)), min_size=1, max_size=7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=pods_strategy, need=st.integers(1, 8), nums=st.integers(1, 2), prio=st.integers(1, 4))
def test_victims_are_a_smallest_helping_set_of_lower_priority_pods(make_engine, layout, need, nums, prio) -> None:
    engine = make_engine()
    engine.upsert_node(make_node("n1", [acme_device(i) for i in range(3)]))
    pods = []
    free = {f"dev{i}": 8000 for i in range(3)}
    for i, (card, thousands, priority) in enumerate(layout):
        uuid = f"dev{card}"
        if free[uuid] < thousands * 1000:
            continue
        free[uuid] -= thousands * 1000
        pods.append(placed(f"p{i}", uuid, thousands * 1000, priority))
    for pod in pods:
        engine.upsert_pod(pod)
    before = usage(engine)
    vip = preemptor(need * 1000, prio, nums=nums)
    candidates = [Candidate.of(p) for p in pods]

    choice = choose_victims(engine, vip, "n1", candidates)

    assert usage(engine) == before
    lower = [c for c in candidates if c.priority < prio]
    from hami_core.engine.preempt import _fits
    if _fits(engine, vip, "n1", []):
        assert choice.fits and choice.victims == ()
        return
    helping = [set(s) for k in range(1, len(lower) + 1) for s in itertools.combinations(lower, k)
               if _fits(engine, vip, "n1", [c.key for c in s])]
    assert choice.fits == bool(helping)
    if helping:
        assert all(v.priority < prio for v in choice.victims)
        assert len(choice.victims) == min(len(s) for s in helping)
        assert _fits(engine, vip, "n1", [v.key for v in choice.victims])


# ------------------------------------------------------------------------------------ holds
def test_a_hold_keeps_the_room_for_the_preemptor_until_the_victims_go(engine) -> None:
    pods = [placed("a", "dev0", 8000, 1), placed("b", "dev1", 8000, 1)]
    candidates = setup(engine, pods)
    vip = preemptor(8000)
    choice = choose_victims(engine, vip, "n1", candidates)
    [victim] = choice.victims
    from hami_core.engine.preempt import without
    with without(engine, [victim.key]):
        decision = engine.schedule(vip, ["n1"])
    assert decision.ok

    engine.hold(vip, decision)
    assert engine.held_node(vip) == "n1"
    assert engine.holds() == {"uid-vip": "n1"}

    # The victim is terminating, not gone: the preemptor does not fit yet, and its hold stays booked.
    assert not engine.refilter(vip, ["n1"]).ok
    assert engine.held_node(vip) == "n1"
    # A lower-priority pod filtered meanwhile cannot take the card the victim frees.
    engine.remove_pod(next(p for p in pods if p["metadata"]["name"] == victim.ref.split("/")[1]))
    late = make_pod("late", acme(1, 8000))
    assert not engine.refilter(late, ["n1"]).ok
    # The preemptor now fits; its reservation replaces the hold.
    assert engine.refilter(vip, ["n1"]).ok
    assert engine.held_node(vip) is None


def test_releasing_a_hold_frees_its_booking(engine) -> None:
    setup(engine, [placed("a", "dev0", 8000, 1)])
    vip = preemptor(8000)
    decision = engine.schedule(vip, ["n1"])
    engine.hold(vip, decision)
    assert not engine.schedule(make_pod("other", acme(1, 8000)), ["n1"]).ok
    engine.release_hold(vip)
    assert engine.held_node(vip) is None
    assert engine.schedule(make_pod("other", acme(1, 8000)), ["n1"]).ok
    engine.release_hold(vip)  # idempotent


def test_placed_candidates_come_from_the_engine_alone(engine) -> None:
    pods = [placed("a", "dev0", 4000, 5), placed("b", "dev1", 4000, 2000)]
    setup(engine, pods)
    engine.reserve(make_pod("pending", acme(1, 1000)), engine.schedule(make_pod("pending", acme(1, 1000)), ["n1"]))
    from hami_core.engine.preempt import placed_candidates
    assert placed_candidates(engine, "n1", 1000) == [Candidate("uid-a", "default/a", "uid-a", 5)]
    engine.remove_pod(pods[0])
    assert placed_candidates(engine, "n1", 1000) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1), st.integers(1, 8), st.integers(0, 3)),
                       min_size=1, max_size=12),
       need=st.integers(1, 8), nums=st.integers(1, 2), prio=st.integers(1, 4))
def test_helpful_nodes_agrees_with_each_node_alone(make_engine, layout, need, nums, prio) -> None:
    """The batched answer (every candidate of every node out at once, one fit) is the per-node answer."""
    from hami_core.engine.preempt import helpful_nodes, placed_candidates

    engine = make_engine()
    nodes = [f"n{i}" for i in range(4)]
    for node in nodes:
        engine.upsert_node(make_node(node, [acme_device(i, id=f"{node}-dev{i}") for i in range(2)]))
    free: dict[tuple[str, int], int] = {}
    for i, (n, card, thousands, priority) in enumerate(layout):
        node, uuid = nodes[n], f"{nodes[n]}-dev{card}"
        if free.setdefault((node, card), 8000) < thousands * 1000:
            continue
        free[node, card] -= thousands * 1000
        pod = scheduled(make_pod(f"p{i}", acme(1, thousands * 1000)), node, f"{uuid},ACME,{thousands * 1000},0:;")
        pod["spec"].update(priority=priority, nodeName=node)
        engine.upsert_pod(pod)
    before = {n: sorted((d.id, d.used, d.usedmem) for d in engine.nodes[n].by_uuid.values()) for n in nodes}
    vip = preemptor(need * 1000, prio, nums=nums)

    batched = helpful_nodes(engine, vip, nodes)

    alone = [n for n in nodes if preemption_can_help(engine, vip, n, placed_candidates(engine, n, prio))]
    assert list(batched) == alone
    assert {n: sorted((d.id, d.used, d.usedmem) for d in engine.nodes[n].by_uuid.values()) for n in nodes} == before
    for node, candidates in batched.items():
        assert candidates and all(c.priority < prio for c in candidates)
        assert choose_victims(engine, vip, node, candidates, helpful=True).fits
