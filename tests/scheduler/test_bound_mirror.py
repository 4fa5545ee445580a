"""Bind's over-commit check keeps one mirror ledger per node between binds (hami_core/engine/bindcheck.py). Synced
with whatever set of pods the API server lists as bound there, in any order of changes, it must book exactly what
a ledger built from nothing books for that set: that is what the check compared against before the cache."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import gpu_pod, make_engine, nvidia_node

from hami_core.engine.facade import Engine
from hami_core.engine.state import ClusterState
from hami_core.scheduler.bound import BoundLedgers

NODE = nvidia_node("node-a", gpus=2)


def _pool() -> list[dict[str, Any]]:
    """Eight pods placed on node-a with real allocation annotations."""
    engine = make_engine()
    engine.upsert_node(NODE)
    pods = []
    for i in range(8):
        pod = gpu_pod(f"p{i}", mem=1000 * (1 + i % 3), cores=5 * (i % 4))
        decision = engine.schedule(pod)
        assert decision.node == "node-a"
        engine.reserve(pod, decision)
        pod["metadata"]["annotations"] = dict(decision.annotations)
        pod["metadata"]["resourceVersion"] = str(10 + i)
        pod["spec"]["nodeName"] = "node-a"
        pods.append(pod)
    return pods


POOL = _pool()


def _usage(engine: Engine | ClusterState) -> dict[str, tuple[int, int, int]]:
    state = engine.nodes["node-a"]
    return {d.id: (d.used, d.usedmem, d.usedcores) for d in state.by_uuid.values()}


def _version(pod: dict[str, Any], bump: bool, finished: bool) -> dict[str, Any]:
    # as the API server does, every distinct object has its own resourceVersion
    meta = {**pod["metadata"],
            "resourceVersion": str(int(pod["metadata"]["resourceVersion"]) + 100 * bump + 1000 * finished)}
    status = {"phase": "Succeeded"} if finished else pod["status"]
    return {**pod, "metadata": meta, "status": status}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 7), st.booleans(), st.booleans()), max_size=8), min_size=1,
                max_size=6))
def test_a_kept_mirror_books_what_a_fresh_ledger_books(reads: list[list[tuple[int, bool, bool]]]) -> None:
    template = make_engine()
    ledgers = BoundLedgers(template, size=4)
    for read in reads:
        bound = list({i: _version(POOL[i], bump, done) for i, bump, done in read}.values())
        fresh = make_engine()
        fresh.upsert_node(NODE)
        for pod in bound:
            fresh.upsert_pod(pod)
        with ledgers.bound("node-a", NODE, bound) as mirror:
            assert _usage(mirror) == _usage(fresh)
            extra = gpu_pod("checked", mem=500)  # what bind books to check, then takes out again
            decision = fresh.schedule(extra)  # a mirror is a state without a planner: the engine of the same pods
            if decision.node is not None:
                extra["metadata"]["annotations"] = dict(decision.annotations)
                mirror.upsert_pod(extra)
                mirror.remove_pod(extra)
            assert _usage(mirror) == _usage(fresh)


def test_a_mirror_in_use_is_not_shared_and_a_failed_check_drops_it() -> None:
    ledgers = BoundLedgers(make_engine())
    # the second enters while the first is in use (e.g. after a node-lock expiry)
    with ledgers.bound("node-a", NODE, POOL[:2]) as first, ledgers.bound("node-a", NODE, POOL[:3]) as second:
        assert first is not second
    with ledgers.bound("node-a", NODE, POOL[:3]) as again:
        assert again is first  # the last one given back (the outer) is reused
    try:
        with ledgers.bound("node-a", NODE, POOL[:3]) as broken:
            raise RuntimeError("check failed half way")
    except RuntimeError:
        pass
    with ledgers.bound("node-a", NODE, POOL[:3]) as after:
        assert after is not broken
