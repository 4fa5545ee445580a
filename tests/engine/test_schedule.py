"""Engine.schedule / reserve against HAMi's rules (scheduler.md §6-§7), with the vendor-neutral Acme plugin."""

from __future__ import annotations

import pytest
from core_helpers import (
    ACME_ALLOCATED,
    ACME_TO_ALLOCATE,
    acme,
    acme_device,
    container,
    make_node,
    make_pod,
    scheduled,
)

from hami_core.engine.facade import Engine


def _worked_example(engine: Engine) -> None:
    """spec §7.5: node1 dev1 (2000 MiB/25 used) + dev2 idle; node2 dev3 idle + dev4 (6000/75 used)."""
    engine.upsert_node(make_node("node1", [acme_device(1), acme_device(2)]))
    engine.upsert_node(make_node("node2", [acme_device(3), acme_device(4)]))
    engine.upsert_pod(scheduled(make_pod("u1", acme(1, 2000, 25)), "node1", "dev1,ACME,2000,25:;"))
    engine.upsert_pod(scheduled(make_pod("u2", acme(1, 6000, 75)), "node2", "dev4,ACME,6000,75:;"))


@pytest.mark.parametrize(("node_policy", "gpu_policy", "node", "device"), [
    ("binpack", "binpack", "node2", "dev4"),
    ("binpack", "spread", "node2", "dev3"),
    ("spread", "binpack", "node1", "dev1"),
    ("spread", "spread", "node1", "dev2"),
])
def test_worked_example_policies(engine: Engine, node_policy: str, gpu_policy: str, node: str, device: str) -> None:
    _worked_example(engine)
    pod = make_pod("p", acme(1, 1000, 20), annotations={"hami.io/node-scheduler-policy": node_policy,
                                                       "hami.io/gpu-scheduler-policy": gpu_policy})
    d = engine.schedule(pod)
    assert d.node == node
    assert d.scores == pytest.approx({"node1": 3.0, "node2": 8.0})
    assert d.annotations[ACME_ALLOCATED] == f"{device},ACME,1000,20:;"
    assert d.annotations[ACME_TO_ALLOCATE] == d.annotations[ACME_ALLOCATED]
    assert d.annotations["hami.io/vgpu-node"] == node
    assert d.annotations["hami.io/vgpu-time"] == "1748765730"
    assert d.nodes == ((node, "node1") if node == "node2" else (node, "node2"))
    assert d.failed == {}


def test_default_policies_are_binpack_nodes_and_spread_devices(engine: Engine) -> None:
    _worked_example(engine)
    d = engine.schedule(make_pod("p", acme(1, 1000, 20)))
    assert (d.node, d.devices["ACME"][0][0].uuid) == ("node2", "dev3")


def test_scheduler_section_sets_defaults(make_engine) -> None:
    engine = make_engine({"acme": {}, "scheduler": {"nodeSchedulerPolicy": "spread", "gpuSchedulerPolicy": "binpack"}})
    _worked_example(engine)
    d = engine.schedule(make_pod("p", acme(1, 1000, 20)))
    assert (d.node, d.devices["ACME"][0][0].uuid) == ("node1", "dev1")


def test_init_container_variant(engine: Engine) -> None:
    """Appendix C: init 5000/20 + app 4000/20, binpack ⇒ node2/dev3 (dev4 has only 2000 MiB free)."""
    _worked_example(engine)
    pod = make_pod("p", acme(1, 4000, 20, name="app"), init=[acme(1, 5000, 20, name="init")],
                   annotations={"hami.io/node-scheduler-policy": "binpack", "hami.io/gpu-scheduler-policy": "binpack"})
    d = engine.schedule(pod)
    assert d.node == "node2"
    assert d.annotations[ACME_ALLOCATED] == "dev3,ACME,5000,20:;dev3,ACME,4000,20:;"


def test_schedule_changes_no_state_and_reserve_books(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0, devmem=8000)]))
    pod = make_pod("a", acme(1, 5000))
    d = engine.schedule(pod)
    assert engine.schedule(pod) == d
    assert engine.nodes["n"].devices["ACME"][0].usedmem == 0
    engine.reserve(pod, d)
    dev = engine.nodes["n"].devices["ACME"][0]
    assert (dev.used, dev.usedmem) == (1, 5000)
    second = engine.schedule(make_pod("b", acme(1, 5000)))
    assert second.node is None
    assert second.failed == {"n": "1/1 CardInsufficientMemory"}


def test_rescheduling_ignores_own_reservation(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0, devmem=8000)]))
    pod = make_pod("a", acme(1, 6000))
    first = engine.schedule(pod)
    engine.reserve(pod, first)
    again = engine.schedule(pod)
    assert again.node == "n"
    assert again.scores == first.scores  # its own 6000 MiB are not counted against it
    engine.reserve(pod, again)  # replaces, does not double
    assert engine.nodes["n"].devices["ACME"][0].usedmem == 6000
    engine.unreserve(pod)
    engine.unreserve(pod)
    assert engine.nodes["n"].devices["ACME"][0].usedmem == 0


def test_multi_container_pod_accumulates_on_the_node(engine: Engine) -> None:
    engine.upsert_node(make_node("one", [acme_device(0, devmem=8000)]))
    engine.upsert_node(make_node("two", [acme_device(0, id="a"), acme_device(1, id="b")]))
    pod = make_pod("p", acme(1, 5000, name="c0"), container("side"), acme(1, 5000, name="c2"))
    d = engine.schedule(pod)
    assert d.failed == {"one": "1/1 CardInsufficientMemory"}
    assert d.node == "two"
    # one entry per container, the container without a device padded empty
    assert d.annotations[ACME_ALLOCATED] == "b,ACME,5000,0:;;a,ACME,5000,0:;"
    engine.reserve(pod, d)
    state = engine.nodes["two"]
    assert sorted((x.id, x.used, x.usedmem) for x in state.devices["ACME"]) == [("a", 1, 5000), ("b", 1, 5000)]


def test_two_app_containers_may_share_a_device(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0, devmem=8000)]))
    pod = make_pod("p", acme(1, 3000, 10, name="a"), acme(1, 4000, 20, name="b"))
    d = engine.schedule(pod)
    assert d.annotations[ACME_ALLOCATED] == "dev0,ACME,3000,10:;dev0,ACME,4000,20:;"
    engine.reserve(pod, d)
    dev = engine.nodes["n"].devices["ACME"][0]
    assert (dev.used, dev.usedmem, dev.usedcores) == (2, 7000, 30)


def test_init_containers_are_fitted_one_at_a_time(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0, devmem=8000)]))
    pod = make_pod("p", acme(1, 7000, name="app"), init=[acme(1, 7000, name="i1"), acme(1, 7000, name="i2")])
    d = engine.schedule(pod)
    assert d.node == "n"
    engine.reserve(pod, d)
    dev = engine.nodes["n"].devices["ACME"][0]
    assert (dev.used, dev.usedmem) == (1, 7000)  # init peak and app sum overlap, not add


def test_unregistered_and_unknown_nodes(engine: Engine) -> None:
    engine.upsert_node(make_node("gpu", [acme_device(0)]))
    engine.upsert_node(make_node("cpu"))
    d = engine.schedule(make_pod("p", acme(1, 1000)), ["gpu", "cpu", "ghost"])
    assert d.node == "gpu"
    assert d.failed == {"cpu": "node unregistered", "ghost": "node unregistered"}
    only = engine.schedule(make_pod("p", acme(1, 1000)), ["cpu"])
    assert only.node is None and only.nodes == ()


def test_node_insufficient_device(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0)]))
    d = engine.schedule(make_pod("p", acme(2, 1000)))
    assert d.failed == {"n": "NodeInsufficientDevice"}


def test_pod_without_requests_is_skipped(engine: Engine) -> None:
    engine.upsert_node(make_node("a", [acme_device(0)]))
    d = engine.schedule(make_pod("web", container("nginx")), ["a", "b"])
    assert d.skipped and d.node is None and d.nodes == ("a", "b")


def test_invalid_scoring_weights_is_a_pod_error(engine: Engine) -> None:
    engine.upsert_node(make_node("a", [acme_device(0)]))
    d = engine.schedule(make_pod("p", acme(1, 1000), annotations={"hami.io/device-scoring-weights": "slot=1,core=1"}))
    assert d.node is None
    assert d.error is not None and d.error.startswith("calcScore failed") and "default/p" in d.error


def test_scoring_weights_change_device_order(engine: Engine) -> None:
    """Appendix C: with memory weight 3, binpack prefers gpu-b (27) over gpu-a (26)."""
    engine.upsert_node(make_node("n", [acme_device(0, id="gpu-a", devmem=100), acme_device(1, id="gpu-b", devmem=100)]))
    engine.upsert_pod(scheduled(make_pod("x"), "n", "gpu-a,ACME,10,90:;"))
    engine.upsert_pod(scheduled(make_pod("y"), "n", "gpu-b,ACME,20,10:;" + "".join(
        "gpu-b,ACME,0,0:;" for _ in range(6))))
    annos = {"hami.io/gpu-scheduler-policy": "binpack", "hami.io/device-scoring-weights": "slot=1,core=1,memory=3"}
    d = engine.schedule(make_pod("p", acme(1, 1), annotations=annos))
    assert d.devices["ACME"][0][0].uuid == "gpu-b"
    spread = engine.schedule(make_pod("p", acme(1, 1), annotations={**annos, "hami.io/gpu-scheduler-policy": "spread"}))
    assert spread.devices["ACME"][0][0].uuid == "gpu-a"


def test_mutex_policy_prefers_idle_devices(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0, id="idle"), acme_device(1, id="busy")]))
    engine.upsert_pod(scheduled(make_pod("x"), "n", "busy,ACME,100,0:;"))
    pod = make_pod("p", acme(1, 100), annotations={"hami.io/gpu-scheduler-policy": "mutex"})
    assert engine.schedule(pod).devices["ACME"][0][0].uuid == "idle"
    two = make_pod("p", acme(2, 100), annotations={"hami.io/gpu-scheduler-policy": "mutex"})
    assert engine.schedule(two).failed == {
        "n": "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict"}


def test_numa_bind_keeps_a_container_on_one_numa_node(engine: Engine) -> None:
    engine.upsert_node(make_node("n", [acme_device(0, id="a0", numa=0), acme_device(1, id="b1", numa=1),
                                       acme_device(2, id="a2", numa=0)]))
    pod = make_pod("p", acme(2, 100), annotations={"nvidia.com/numa-bind": "true"})
    d = engine.schedule(pod)
    assert sorted(x.uuid for x in d.devices["ACME"][0]) == ["a0", "a2"]
