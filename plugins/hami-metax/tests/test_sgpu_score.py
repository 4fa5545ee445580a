"""MetaX sGPU node score, policy neutral (vendors G.2, A.1; TestScoreExclusiveDevices, TestNeedScore,
TestScoreOnlineDevices, TestLinkDevicesScore)."""

from __future__ import annotations

import json

import pytest
from metax_testlib import (
    NODE_POLICY,
    Clock,
    backends,
    gpu_node,
    make_engine,
    make_pod,
    running_pod,
    sdev,
    sgpu_container,
    sgpu_node,
    usage,
)

from hami_core.engine import cycle
from hami_core.plugins.types import ContainerDevice, GpuPolicy, NodeScore, ScoreCandidate, UsageTotals
from hami_metax import common
from hami_metax import sgpu as mx
from hami_metax.gpu import TOPOLOGY_LOSSES

APP = mx.APP_CLASS
TOPO = mx.TOPOLOGY_AWARE


def excl(uuid: str, zone: int, *, topology: bool = False, cores: int = 100) -> ContainerDevice:
    return ContainerDevice(uuid, "Metax-SGPU", 1024, cores,
                           custom_info={mx.INFO_LINK_ZONE: zone, mx.INFO_TOPOLOGY_AWARE: topology})


def prev(*items: tuple[str, int, int]) -> list:
    """Previous usage: (uuid, used, zone)."""
    return [usage(uuid, used=used, zone=zone) for uuid, used, zone in items]


# ------------------------------------------------------------------------------------ link scores
@pytest.mark.parametrize(("devices", "expected"), [
    ([], 0),
    ([("GPU-0", 1)], 0),
    ([("GPU-0", 1), ("GPU-1", 1)], 10),
    ([("GPU-0", 1), ("GPU-1", 2)], 0),
    ([("GPU-0", 1), ("GPU-1", 1), ("GPU-2", 1)], 30),
    ([("GPU-0", 1), ("GPU-1", 1), ("GPU-2", 2)], 10),
    ([("GPU-0", 0), ("GPU-1", 0)], 0),
    ([("GPU-0", 1), ("GPU-0", 1)], 0),   # same uuid
    ([("GPU-0", -1), ("GPU-1", -1)], 10),  # Go only excludes zone 0 here
])
def test_link_score(devices: list, expected: int) -> None:
    assert mx.link_score(devices) == expected


# ------------------------------------------------------------------------------------ exclusive topology score
@pytest.mark.parametrize(("allocated", "previous", "expected"), [
    # allocate one device, rest zero device
    ([excl("GPU-4", 1)], prev(("GPU-1", 1, 1), ("GPU-2", 1, 1), ("GPU-3", 1, 1), ("GPU-4", 0, 1)), 0),
    # allocate one device, rest three device
    ([excl("GPU-4", 1)], prev(("GPU-1", 0, 1), ("GPU-2", 0, 1), ("GPU-3", 0, 1), ("GPU-4", 0, 1)), -30),
    # allocate two device, best result
    ([excl("GPU-3", 1), excl("GPU-4", 1)],
     prev(("GPU-1", 0, 1), ("GPU-2", 0, 1), ("GPU-3", 0, 1), ("GPU-4", 0, 1)), 60),
    # allocate two device, bad result
    ([excl("GPU-4", 1), excl("GPU-5", 2)],
     prev(("GPU-1", 1, 1), ("GPU-2", 1, 1), ("GPU-3", 1, 1), ("GPU-4", 0, 1), ("GPU-5", 0, 2), ("GPU-6", 1, 2),
          ("GPU-7", 1, 2), ("GPU-8", 1, 2)), 0),
    # allocate four device, best result
    ([excl(f"GPU-{i}", 1) for i in range(1, 5)],
     prev(("GPU-1", 0, 1), ("GPU-2", 0, 1), ("GPU-3", 0, 1), ("GPU-4", 0, 1), ("GPU-5", 0, 2)), 600),
    # allocate four device, bad result
    ([excl("GPU-3", 1), excl("GPU-4", 1), excl("GPU-5", 2), excl("GPU-6", 2)],
     prev(("GPU-2", 0, 1), ("GPU-3", 0, 1), ("GPU-4", 0, 1), ("GPU-5", 0, 2), ("GPU-6", 0, 2)), 180),
    # allocate eight device
    ([excl(f"GPU-{i}", 1 if i <= 4 else 2) for i in range(1, 9)],
     prev(*((f"GPU-{i}", 0, 1 if i <= 4 else 2) for i in range(1, 9))), 1200),
    # shared (non-exclusive) devices are not "taken": no pair is broken
    ([excl("GPU-1", 1, cores=50)], prev(("GPU-1", 0, 1), ("GPU-2", 0, 1)), 0),
])
def test_score_exclusive(allocated: list, previous: list, expected: int) -> None:
    assert mx.score_exclusive(allocated, previous) == expected


@pytest.mark.parametrize(("devices", "annotations", "expected"), [
    ([[excl("a", 1)]], {TOPO: "true"}, True),                         # enable, allocate 100 core
    ([[excl("a", 1, topology=True)]], {TOPO: "false"}, False),        # disable, allocate 100 core
    ([[excl("a", 1, cores=99)]], {TOPO: "true"}, False),              # enable, allocate 99 core
    ([[excl("a", 1, cores=99)], [excl("b", 1)]], {TOPO: "true"}, True),
    ([[excl("a", 1, topology=True)]], {}, True),                      # sgpuTopologyAware from the config
    ([[excl("a", 1)]], {}, False),
    ([[excl("a", 1, topology=True)]], {TOPO: "yes"}, True),           # not a Go bool: the config decides
    ([[excl("a", 1)]], {TOPO: "1"}, True),
])
def test_topology_aware_enabled(devices: list, annotations: dict, expected: bool) -> None:
    flat = [d for ctr in devices for d in ctr]
    assert mx.topology_aware_enabled(annotations, flat) is expected


# ------------------------------------------------------------------------------------ online score
@pytest.mark.parametrize(("classes", "expected"), [
    ((0, 0), 0),       # idle device
    ((2, 0), -40),     # only online device
    ((0, 2), -200),    # only offline device
    ((2, 2), -44),     # online/offline device
])
def test_score_online(classes: tuple[int, int], expected: int) -> None:
    previous = [usage("GPU-123", used=sum(classes)), usage("GPU-other", used=5)]
    assert mx.score_online(["GPU-123"], previous, {"GPU-123": classes, "GPU-other": (5, 0)}) == expected


def test_sgpu_score_picks_the_online_rule_then_topology() -> None:
    online_dev = ContainerDevice("GPU-1", "Metax-SGPU", 1024, 0, custom_info={mx.INFO_POD_CLASSES: (1, 1)})
    previous = prev(("GPU-1", 2, 1), ("GPU-2", 0, 1))
    assert mx.sgpu_score({APP: "online"}, ((online_dev,),), previous) == -22
    exclusive = excl("GPU-2", 1, topology=True)
    assert mx.sgpu_score({}, ((exclusive,),), prev(("GPU-2", 0, 1), ("GPU-3", 0, 1))) == -10
    assert mx.sgpu_score({TOPO: "false"}, ((exclusive,),), prev(("GPU-2", 0, 1), ("GPU-3", 0, 1))) == 0
    assert mx.sgpu_score({}, ((), ()), []) == 0


# ------------------------------------------------------------------------------------ the score hook
def score_candidate(assignment: dict, previous: list, annotations: dict | None = None) -> ScoreCandidate:
    from metax_testlib import FakeNode

    return ScoreCandidate(FakeNode(annotations=annotations or {}), assignment, {"Metax-SGPU": previous},
                          UsageTotals())


def metax_scores(pod: dict, candidates: list[ScoreCandidate], policy: GpuPolicy) -> list[NodeScore | None]:
    """What hami-metax answers per candidate: its two backends' score hooks, of which at most one answers for a
    node (the GPU backend's answer carries the sGPU score where the pod got both, see :mod:`hami_metax.common`)."""
    gpu, sgpu = backends()
    out = []
    answers = zip(gpu.hami_score_nodes(pod, candidates, policy), sgpu.hami_score_nodes(pod, candidates), strict=True)
    for whole, shared in answers:
        assert whole is None or shared is None, (whole, shared)
        out.append(shared if whole is None else whole)
    return out


def test_neutral_factor_is_the_engines() -> None:
    assert common.NEUTRAL_SCORE_FACTOR == cycle.NEUTRAL_SCORE_FACTOR


def test_hook_answers_per_candidate() -> None:
    online = ContainerDevice("GPU-1", "Metax-SGPU", 1024, 0, custom_info={mx.INFO_POD_CLASSES: (1, 0)})
    cards = (ContainerDevice("g-0", "Metax-GPU", 65536, 100), ContainerDevice("g-1", "Metax-GPU", 65536, 100))
    pod = make_pod(sgpu_container(), annotations={APP: "online"})
    candidates = [
        score_candidate({"NVIDIA": ((ContainerDevice("x", "NVIDIA", 1, 1),),)}, []),
        score_candidate({"Metax-SGPU": ((online,),)}, prev(("GPU-1", 1, 0))),
        score_candidate({"Metax-GPU": (cards,)}, [], {TOPOLOGY_LOSSES: '{"2":200}'}),
        score_candidate({"Metax-GPU": (cards,), "Metax-SGPU": ((online,),)}, prev(("GPU-1", 1, 0)),
                        {TOPOLOGY_LOSSES: '{"2":200}'}),
    ]
    binpack = metax_scores(pod=pod, candidates=candidates, policy=GpuPolicy(node="binpack"))
    assert binpack == [None, NodeScore(-20, neutral=True), NodeScore(1800.0), NodeScore(1800.0 - 200000.0)]
    spread = metax_scores(pod=pod, candidates=candidates, policy=GpuPolicy(node="spread"))
    assert spread == [None, NodeScore(-20, neutral=True), NodeScore(0.0), NodeScore(200000.0)]


def online_engine(clock: Clock) -> object:
    """n1's card hosts two online pods, n2's one (1 GiB each, 0 cores: online pods book no cores)."""
    engine = make_engine(clock=clock)
    engine.upsert_node(sgpu_node("n1", [sdev("GPU-n1")]))
    engine.upsert_node(sgpu_node("n2", [sdev("GPU-n2")]))
    for name, node in (("on-1", "n1"), ("on-2", "n1"), ("on-3", "n2")):
        engine.upsert_pod(running_pod(name, node, f"GPU-{node},Metax-SGPU,1024,0:;", annotations={APP: "online"}))
    return engine


@pytest.mark.parametrize("node_policy", ["binpack", "spread"])
def test_online_pod_goes_where_fewer_online_pods_run(clock: Clock, node_policy: str) -> None:
    engine = online_engine(clock)
    pod = engine.admit(make_pod(sgpu_container(mem=1), annotations={APP: "online", NODE_POLICY: node_policy}))
    decision = engine.schedule(pod)
    assert decision.node == "n2"
    sign = 1 if node_policy == "binpack" else -1
    assert decision.scores == {"n1": pytest.approx(1.875 - sign * 400000),
                               "n2": pytest.approx(0.9375 - sign * 200000)}


def topology_engine(clock: Clock, **metax: object) -> object:
    """za: four idle cards in MetaLink zone 1; zb: two idle cards in zones 1 and 2."""
    engine = make_engine(metax, clock=clock)
    engine.upsert_node(sgpu_node("za", [sdev(f"A-{i}", zone=1) for i in range(4)]))
    engine.upsert_node(sgpu_node("zb", [sdev("B-0", zone=1), sdev("B-1", zone=2)]))
    return engine


@pytest.mark.parametrize("node_policy", ["binpack", "spread"])
def test_exclusive_pod_keeps_metalink_pairs_intact(clock: Clock, node_policy: str) -> None:
    engine = topology_engine(clock)
    pod = make_pod(sgpu_container(), annotations={TOPO: "true", NODE_POLICY: node_policy})
    decision = engine.schedule(pod)
    assert decision.node == "zb"
    sign = 1 if node_policy == "binpack" else -1
    assert decision.scores == {"za": -30 * 10000.0 * sign, "zb": 0.0}


def test_topology_awareness_from_the_config(clock: Clock) -> None:
    on = topology_engine(clock, sgpuTopologyAware=True)
    assert on.schedule(make_pod(sgpu_container())).scores == {"za": -300000.0, "zb": 0.0}
    off = topology_engine(clock)
    assert off.schedule(make_pod(sgpu_container())).scores == {"za": 0.0, "zb": 0.0}
    assert on.schedule(make_pod(sgpu_container(), annotations={TOPO: "false"})).scores == {"za": 0.0, "zb": 0.0}
    # Shared pods are never topology-scored.
    assert on.schedule(make_pod(sgpu_container(cores=50))).scores == {"za": 0.0, "zb": 0.0}


def test_gpu_and_sgpu_nodes_in_one_cluster(clock: Clock) -> None:
    engine = topology_engine(clock)
    engine.upsert_node(gpu_node("g1", 2, annotations={TOPOLOGY_LOSSES: json.dumps({"1": 100})}))
    decision = engine.schedule(make_pod(sgpu_container(), annotations={TOPO: "true"}))
    assert decision.failed == {"g1": "NodeInsufficientDevice"}
    assert decision.node == "zb"
