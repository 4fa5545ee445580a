"""The engine's per-decision shortcuts stay correct as the cluster changes (issue 11 hot path).

``schedule`` keeps the candidate set of the last ``node_names`` list and a name-ordered index of the
node table; ``upsert_node`` reuses registrations read from unchanged node content. These tests change
the cluster between decisions that name the *same* list and check that every change is seen.
"""

from __future__ import annotations

import json
import random
from typing import Any

from core_helpers import ACME_REGISTER, acme, acme_device, make_node, make_pod, scheduled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hami_core import hookimpl
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceBackend
from hami_core.wire import keys
from hami_core.wire.reasons import NODE_UNREGISTERED


def _usage(engine: Engine, node: str) -> dict[str, tuple[int, int, int]]:
    return {d.id: (d.used, d.usedmem, d.usedcores) for devs in engine.nodes[node].devices.values() for d in devs}


def _cluster(engine: Engine, names: list[str]) -> None:
    for i, name in enumerate(names):
        engine.upsert_node(make_node(name, [acme_device(0, id=f"{name}-g0")]))
        # fuller nodes sort first under binpack: node i carries i * 500 MiB
        if i:
            engine.upsert_pod(scheduled(make_pod(f"run-{name}", acme(1, 500 * i)), name,
                                        f"{name}-g0,ACME,{500 * i},0:;"))


def test_same_names_list_sees_quarantine_removal_and_new_nodes(engine: Engine) -> None:
    names = ["a", "b", "c"]
    _cluster(engine, names)
    pod = make_pod("p", acme(1, 100))
    assert engine.schedule(pod, names, limit=1).node == "c"  # the fullest
    bad = scheduled(make_pod("bad", acme(1, 100)), "c", "c-g0,ACME,lots,0:;")
    engine.upsert_pod(bad)  # quarantines c
    d = engine.schedule(pod, names, limit=1)
    assert d.node == "b" and d.failed["c"].startswith("node quarantined: pod default/bad")
    engine.remove_pod(bad)
    assert engine.schedule(pod, names, limit=1).node == "c"
    engine.remove_node("c")
    d = engine.schedule(pod, names, limit=1)
    assert d.node == "b" and d.failed == {"c": NODE_UNREGISTERED}
    engine.upsert_node(make_node("c", [acme_device(0, id="c-g0")]))  # back, with its booking
    assert engine.schedule(pod, names, limit=1).node == "c"
    engine.upsert_node(make_node("c"))  # registration gone
    d = engine.schedule(pod, names, limit=1)
    assert d.node == "b" and d.failed == {"c": NODE_UNREGISTERED}


def test_same_list_object_changed_in_place_is_a_new_candidate_set(engine: Engine) -> None:
    names = ["a", "b"]
    _cluster(engine, ["a", "b", "c"])
    pod = make_pod("p", acme(1, 100))
    assert engine.schedule(pod, names, limit=1).node == "b"
    names.append("c")
    assert engine.schedule(pod, names, limit=1).node == "c"
    names.remove("c")
    assert engine.schedule(pod, names, limit=1).node == "b"


def test_unknown_and_repeated_names(engine: Engine) -> None:
    _cluster(engine, ["a", "b"])
    pod = make_pod("p", acme(1, 100))
    d = engine.schedule(pod, ["zz", "b", "a", "b", "ghost"])
    assert d.node == "b"
    assert d.nodes == ("b", "a")  # b once, though named twice
    assert d.failed == {"ghost": NODE_UNREGISTERED, "zz": NODE_UNREGISTERED}
    assert list(d.failed) == ["ghost", "zz"]  # in name order
    assert engine.schedule(pod, iter(["a"])).node == "a"  # any iterable of names
    nothing = engine.schedule(pod, [])
    assert nothing.node is None and nothing.failed == {}


def test_names_in_any_order_give_the_name_order_tie_break(engine: Engine) -> None:
    for name in ("n3", "n1", "n2"):  # equal nodes, added out of order
        engine.upsert_node(make_node(name, [acme_device(0, id=f"{name}-g0")]))
    pod = make_pod("p", acme(1, 100))
    for names in (["n3", "n2", "n1"], ["n2", "n3", "n1"], None):
        d = engine.schedule(pod, names)
        assert d.node == "n1" and d.nodes == ("n1", "n2", "n3")
        assert engine.schedule(pod, names, limit=1).node == "n1"


class CountingReads:
    """Counts ``hami_node_devices`` calls for ACME (a hook wrapper; the ACME plugin still answers)."""

    def __init__(self) -> None:
        self.reads = 0

    @hookimpl(hookwrapper=True)
    def hami_node_devices(self, backend: DeviceBackend, node: Any) -> Any:
        if backend.name == "ACME":
            self.reads += 1
        yield


def test_lock_annotation_change_reuses_registration_and_keeps_usage(make_engine: Any) -> None:
    counter = CountingReads()
    engine: Engine = make_engine(None, counter)
    node = make_node("n", [acme_device(0), acme_device(1)])
    engine.upsert_node(node)
    engine.upsert_pod(scheduled(make_pod("run", acme(1, 1000)), "n", "dev0,ACME,1000,0:;"))
    generation = engine.nodes["n"].generation
    reads = counter.reads

    locked = json.loads(json.dumps(node))
    locked["metadata"]["annotations"][keys.NODE_LOCK] = "2025-01-01T00:00:00Z,default,p"
    locked["metadata"]["resourceVersion"] = "42"
    status = engine.upsert_node(locked)
    assert counter.reads == reads  # nothing but the lock changed: no registration was read again
    assert status.devices == {"ACME": 2}
    assert engine.nodes["n"].generation == generation  # devices untouched, usage kept
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0), "dev1": (0, 0, 0)}

    # The registration changes in place on the same dict: it is read again and the booking re-applied.
    locked["metadata"]["annotations"][ACME_REGISTER] = json.dumps([acme_device(0, devmem=9000)])
    status = engine.upsert_node(locked)
    assert counter.reads == reads + 1
    assert status.devices == {"ACME": 1}
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0)}
    assert engine.nodes["n"].devices["ACME"][0].totalmem == 9000

    # A label change is read again too (a plugin may read labels); the same devices keep their usage.
    locked["metadata"]["labels"] = {"zone": "b"}
    engine.upsert_node(locked)
    assert counter.reads == reads + 2
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0)}


def test_unreadable_registration_is_not_cached_as_devices(make_engine: Any) -> None:
    counter = CountingReads()
    engine: Engine = make_engine(None, counter)
    engine.upsert_node(make_node("n", [acme_device(0)]))
    broken = make_node("n", annotations={ACME_REGISTER: "[{not json"})
    first = engine.upsert_node(broken)
    again = engine.upsert_node(broken)
    assert first.errors == again.errors and ACME_REGISTER in again.errors["ACME"]
    assert again.devices == {"ACME": 1}  # the previous devices are still kept
    fixed = engine.upsert_node(make_node("n", [acme_device(0), acme_device(1)]))
    assert fixed.devices == {"ACME": 2} and not fixed.errors


def test_stale_handshake_is_checked_on_a_lock_only_change(make_engine: Any, clock: list[float]) -> None:
    """Health runs on every upsert even when the registration is reused."""
    engine: Engine = make_engine({"acme": {}})
    seen: list[float] = []

    class Health:
        @hookimpl
        def hami_node_health(self, backend: DeviceBackend, node: Any, devices: Any, now: float, state: Any) -> Any:
            seen.append(now)
            return None

    engine.plugins.register(Health())
    node = make_node("n", [acme_device(0)])
    engine.upsert_node(node)
    node["metadata"]["annotations"][keys.NODE_LOCK] = "x"
    clock[0] += 5
    engine.upsert_node(node)
    assert len(seen) == 2 and seen[1] == seen[0] + 5


def test_precomputed_requests_give_the_same_decision(engine: Engine) -> None:
    _cluster(engine, ["a", "b"])
    pod = make_pod("p", acme(1, 100))
    plain = engine.schedule(pod, ["a", "b"], limit=1)
    given = engine.schedule(pod, ["a", "b"], limit=1, requests=engine.requests(pod))
    assert plain.node == "b"
    assert (given.node, given.annotations, given.devices, given.requests) == (
        plain.node, plain.annotations, plain.devices, plain.requests)


def test_repeated_pod_update_does_not_rebook(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0), acme_device(1)]))
    pod = scheduled(make_pod("run", acme(1, 1000)), "n", "dev0,ACME,1000,0:;")
    engine.upsert_pod(pod)
    generation = engine.nodes["n"].generation
    pod["metadata"]["annotations"]["hami.io/bind-phase"] = "allocating"  # an update that keeps the allocation
    engine.upsert_pod(pod)
    assert engine.nodes["n"].generation == generation
    assert _usage(engine, "n") == {"dev0": (1, 1000, 0), "dev1": (0, 0, 0)}
    moved = scheduled(make_pod("run", acme(1, 2000)), "n", "dev1,ACME,2000,0:;")
    engine.upsert_pod(moved)
    assert engine.nodes["n"].generation != generation
    assert _usage(engine, "n") == {"dev0": (0, 0, 0), "dev1": (1, 2000, 0)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), policy=st.sampled_from(["binpack", "spread"]))
def test_named_candidates_do_not_depend_on_order_repeats_or_the_cache(make_engine: Any, seed: int,
                                                                      policy: str) -> None:
    """Any order, repeated and unknown names: the same decision as the sorted distinct list, call after call."""
    rng = random.Random(seed)
    engine: Engine = make_engine()
    nodes = [f"node-{n:02d}" for n in range(rng.randint(1, 10))]
    for n, name in enumerate(nodes):
        devs = [acme_device(g, id=f"{name}-g{g}", count=rng.choice([1, 10]), devmem=rng.choice([1000, 4000]))
                for g in range(rng.randint(0, 3))]  # 0 devices: an unregistered node
        engine.upsert_node(make_node(name, devs))
        for g, dev in enumerate(devs):
            if rng.random() < 0.5:
                engine.upsert_pod(scheduled(make_pod(f"run-{n}-{g}", acme(1, 100)), name,
                                            f"{dev['id']},ACME,{rng.randint(0, dev['devmem'] // 2)},0:;"))
    annos = {"hami.io/node-scheduler-policy": policy}
    for i in range(4):
        names = rng.sample(nodes, rng.randint(0, len(nodes))) + ["ghost"] * rng.randint(0, 1)
        names += rng.sample(names, min(len(names), rng.randint(0, 2)))  # repeats
        rng.shuffle(names)
        pod = make_pod(f"p{i}", acme(1, rng.choice([100, 900, 3000])), annotations=annos)
        reference = engine.schedule(pod, sorted(set(names)))
        for _ in range(2):  # the second call is answered from the candidate cache
            fast = engine.schedule(pod, names, limit=1)
            full = engine.schedule(pod, list(names))
            assert (full.node, full.nodes, full.failed) == (reference.node, reference.nodes, reference.failed)
            assert fast.node == reference.node
            if reference.node is None:
                assert fast.failed == reference.failed
        if "ghost" in names:
            assert reference.failed["ghost"] == NODE_UNREGISTERED
        if reference.node is not None:
            engine.reserve(pod, reference)  # the next pod sees a changed cluster
