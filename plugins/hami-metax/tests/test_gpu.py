"""MetaX GPU, the whole-card backend (vendors G.1): capacity registration, health, requests, fit, score."""

from __future__ import annotations

import pytest
from metax_testlib import (
    GPU,
    NODE_POLICY,
    VGPU_NODE,
    Clock,
    backends,
    candidate,
    chosen,
    container,
    gpu_container,
    gpu_node,
    make_engine,
    make_pod,
    running_pod,
    usage,
)

from hami_core.plugins.types import ContainerDevice, DeviceInfo, DeviceRequest, GpuPolicy, HealthReport
from hami_metax import gpu as mx

GPU_REQ = DeviceRequest("Metax-GPU", 1, 0, 100, 100)


def gpu_usage(id: str, *, index: int = 0, used: int = 0) -> object:
    return usage(id, index=index, count=1, totalmem=65536, used=used, usedmem=65536 * used, usedcores=100 * used,
                 type=mx.GPU_WORD)


# ------------------------------------------------------------------------------------ registration and health
def test_cards_are_synthesised_from_capacity(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    status = engine.upsert_node(gpu_node("g1", 3))
    assert status.devices == {"Metax-GPU": 3}
    assert status.errors == {}
    assert [d.info for d in engine.nodes["g1"].devices["Metax-GPU"]] == [
        DeviceInfo(id=f"g1-metax-{i}", index=i, count=1, devmem=65536, devcore=100, type="Metax-GPU", numa=0,
                   health=True, vendor="Metax-GPU") for i in range(3)]


def test_allocatable_alone_registers_nothing(clock: Clock) -> None:
    node = gpu_node("g1", None)
    node["status"] = {"allocatable": {GPU: "4"}}
    status = make_engine(clock=clock).upsert_node(node)
    # No capacity key: no MetaX GPU here, which is not a health problem.
    assert status.devices == {}
    assert status.unhealthy == {}


def test_zero_capacity_is_unhealthy_and_drops_the_cards(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    assert engine.upsert_node(gpu_node("g1", 2)).devices == {"Metax-GPU": 2}
    status = engine.upsert_node(gpu_node("g1", 0))
    assert status.devices == {}
    assert status.unhealthy == {"Metax-GPU": "status.capacity[metax-tech.com/gpu] is '0'"}
    assert "g1" not in {n for n, s in engine.nodes.items() if s.registered}


def test_health_is_capacity_above_zero() -> None:
    gpu, _ = backends()
    assert gpu.hami_node_health(gpu_node("g1", 1)) == HealthReport(True, True)
    assert gpu.hami_node_health(gpu_node("g1", None)) == HealthReport(
        False, True, reason="status.capacity[metax-tech.com/gpu] is absent")
    assert gpu.hami_node_health(gpu_node("g1", "-1")).healthy is False
    assert gpu.hami_node_health(gpu_node("g1", "2.5")) == HealthReport(
        False, True, reason="status.capacity[metax-tech.com/gpu] is '2.5'")


def test_malformed_capacity_is_an_error_and_unhealthy(clock: Clock) -> None:
    # HAMi: GetNodeDevices fails, and CheckHealth reads the capacity as 0 (AsInt64's ok ignored): unhealthy, so the
    # node's cards are cleaned up rather than kept as for a handshake-checked registration.
    engine = make_engine(clock=clock)
    engine.upsert_node(gpu_node("g1", 2))
    status = engine.upsert_node(gpu_node("g1", "1.5"))
    assert status.devices == {}
    assert status.errors["Metax-GPU"] == ("node g1: status.capacity[metax-tech.com/gpu]: '1.5' is not a whole "
                                          "number of devices")
    assert status.unhealthy == {"Metax-GPU": "status.capacity[metax-tech.com/gpu] is '1.5'"}
    engine.upsert_node(gpu_node("g1", 2))
    status = engine.upsert_node(gpu_node("g1", "lots"))
    assert status.devices == {}
    assert "status.capacity[metax-tech.com/gpu]" in status.errors["Metax-GPU"]


def test_custom_count_name_reads_that_capacity(clock: Clock) -> None:
    engine = make_engine({"resourceCountName": "example.com/mx"}, clock=clock)
    node = gpu_node("g1", None)
    node["status"] = {"capacity": {"example.com/mx": "2", GPU: "8"}}
    assert engine.upsert_node(node).devices == {"Metax-GPU": 2}


# ------------------------------------------------------------------------------------ admission and requests
def test_admission_only_detects_the_count_in_limits() -> None:
    engine = make_engine()
    pod = make_pod(gpu_container(count=2))
    out = engine.admit(pod)
    assert out["spec"]["schedulerName"] == "hami-scheduler"
    assert out["spec"]["containers"] == pod["spec"]["containers"]
    assert "annotations" not in out["metadata"]
    # A count in requests only is not "using" MetaX GPU for admission (HAMi reads limits there).
    only_requests = make_pod(container(requests={GPU: "1"}))
    assert "schedulerName" not in engine.admit(only_requests)["spec"]


@pytest.mark.parametrize(("ctr", "expected"), [
    (gpu_container(count=1), DeviceRequest("Metax-GPU", 1, 0, 100, 100)),
    (gpu_container(count=4), DeviceRequest("Metax-GPU", 4, 0, 100, 100)),
    (container(requests={GPU: "2"}), DeviceRequest("Metax-GPU", 2, 0, 100, 100)),
    (container(limits={GPU: "3"}, requests={GPU: "1"}), DeviceRequest("Metax-GPU", 3, 0, 100, 100)),
    (container(limits={GPU: 2}), DeviceRequest("Metax-GPU", 2, 0, 100, 100)),
    (gpu_container(count=0), None),
    (gpu_container(count="-1"), None),
    (gpu_container(count="1.5"), None),
    (gpu_container(count="2200000000"), None),
    (gpu_container(count="two"), None),
    (container(), None),
])
def test_requests_are_whole_cards(ctr: dict, expected: DeviceRequest | None) -> None:
    reqs = make_engine().requests(make_pod(ctr))
    assert reqs.containers[0].get("Metax-GPU") == expected


# ------------------------------------------------------------------------------------ fit
def test_fit_prefers_the_last_free_card() -> None:
    devs = [gpu_usage("a"), gpu_usage("b", index=1), gpu_usage("c", index=2, used=1)]
    result = mx.gpu_fit(devs, GPU_REQ)
    assert result.devices == (ContainerDevice("b", "Metax-GPU", 65536, 100, 1),)


def test_fit_reasons_follow_the_standard_template() -> None:
    devs = [gpu_usage("a"), gpu_usage("b", index=1, used=1)]
    result = mx.gpu_fit(devs, DeviceRequest("Metax-GPU", 2, 0, 100, 100))
    assert result.reasons == ("1/2 AllocatedCardsInsufficientRequest", "1/2 CardTimeSlicingExhausted")
    assert mx.gpu_fit(devs, DeviceRequest("Other", 1, 0, 100, 100)).reason == "2/2 CardTypeMismatch"


def test_custom_rule_keeps_later_containers_on_the_cards_already_given() -> None:
    earlier = [(ContainerDevice("a", "Metax-GPU", 65536, 100),)]
    devs = [gpu_usage("a"), gpu_usage("b", index=1)]
    # b would be preferred (last), but the pod already holds a.
    assert chosen(mx.gpu_fit(devs, GPU_REQ, earlier)) == ["a"]
    busy = [gpu_usage("a", used=1), gpu_usage("b", index=1)]
    assert mx.gpu_fit(busy, GPU_REQ, earlier).reasons == ("1/2 CardNotFoundCustomFilterRule",
                                                          "1/2 CardTimeSlicingExhausted")


def test_filter_reads_earlier_containers_from_the_candidate() -> None:
    cand = candidate([gpu_usage("a"), gpu_usage("b", index=1)],
                     allocated={"Metax-GPU": [(ContainerDevice("a", "Metax-GPU", 65536, 100),), ()]})
    (result,) = backends()[0].hami_filter_nodes(GPU_REQ, [cand], GpuPolicy())
    assert chosen(result) == ["a"]


@pytest.mark.parametrize("chain", ["mutex", "binpack,mutex", "mutex,numa"])
def test_mutex_refuses_a_busy_card(chain: str) -> None:
    # HAMi v2.10: every backend honours mutex, read as a token of the policy chain (PR #2621).
    req = DeviceRequest("Metax-GPU", 1, 1024, 0, 10)  # fits a shared card
    # a card a device plugin splits (count 4), one slot and half its memory and cores taken
    cand = candidate([usage("a", count=4, totalmem=65536, used=1, usedmem=32768, usedcores=50, type=mx.GPU_WORD)])
    gpu = backends()[0]
    assert gpu.hami_filter_nodes(req, [cand], GpuPolicy())[0].ok
    (result,) = gpu.hami_filter_nodes(req, [cand], GpuPolicy(gpu=chain, gpu_tokens=tuple(chain.split(","))))
    assert result.reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_second_container_of_a_pod_cannot_get_another_card(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(gpu_node("g1", 4))
    decision = engine.schedule(make_pod(gpu_container("a"), gpu_container("b")))
    assert decision.node is None
    assert decision.failed == {"g1": "1/4 CardTimeSlicingExhausted, 3/4 CardNotFoundCustomFilterRule"}


def test_multi_card_container(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(gpu_node("g1", 4))
    decision = engine.schedule(make_pod(gpu_container(count=3)))
    value = "g1-metax-3,Metax-GPU,65536,100:g1-metax-2,Metax-GPU,65536,100:g1-metax-1,Metax-GPU,65536,100:;"
    assert decision.annotations == {VGPU_NODE: "g1", "hami.io/vgpu-time": "1750000000",
                                    "hami.io/metax-gpu-devices-to-allocate": value,
                                    "hami.io/metax-gpu-devices-allocated": value}
    assert engine.schedule(make_pod(gpu_container(count=5))).failed == {"g1": "NodeInsufficientDevice"}


# ------------------------------------------------------------------------------------ score
LOSSES = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'


def two_cards() -> tuple[tuple[ContainerDevice, ...], ...]:
    return ((ContainerDevice("a", "Metax-GPU", 65536, 100), ContainerDevice("b", "Metax-GPU", 65536, 100)),)


def test_score_vectors_from_the_spec() -> None:
    one = ((ContainerDevice("a", "Metax-GPU", 65536, 100),),)
    assert mx.gpu_score({mx.TOPOLOGY_LOSSES: '{"1":100,"2":200}'}, two_cards(), "binpack") == 1800.0
    assert mx.gpu_score({mx.TOPOLOGY_SCORES: '{"1":100,"2":200}'}, one, "spread") == 1900.0


def test_score_counts_cards_over_every_container() -> None:
    split = ((ContainerDevice("a", "Metax-GPU", 65536, 100),), (), (ContainerDevice("b", "Metax-GPU", 65536, 100),))
    assert mx.gpu_score({mx.TOPOLOGY_LOSSES: LOSSES}, split, "binpack") == 2000.0 - 110


@pytest.mark.parametrize(("annotations", "policy", "expected"), [
    ({}, "binpack", 0.0),
    ({mx.TOPOLOGY_SCORES: '{"2":5}'}, "binpack", 0.0),     # binpack reads the losses only
    ({mx.TOPOLOGY_LOSSES: '{"2":5}'}, "spread", 0.0),      # spread reads the scores only
    ({mx.TOPOLOGY_LOSSES: '{"2":5}'}, "fgd", 0.0),         # any other policy
    ({mx.TOPOLOGY_LOSSES: '{"1":5}'}, "binpack", 2000.0),  # no entry for 2 cards
    ({mx.TOPOLOGY_LOSSES: "not json"}, "binpack", 2000.0),
    ({mx.TOPOLOGY_LOSSES: '[110]'}, "binpack", 2000.0),
    ({mx.TOPOLOGY_LOSSES: '{"2":1.5}'}, "binpack", 2000.0),
    ({mx.TOPOLOGY_LOSSES: '{"2":110,"x":1}'}, "binpack", 2000.0),  # one bad key spoils the table, as in Go
    ({mx.TOPOLOGY_LOSSES: '{"2":"110"}'}, "binpack", 2000.0),
    ({mx.TOPOLOGY_LOSSES: '{"+2":110}'}, "binpack", 1890.0),
])
def test_score_edge_cases(annotations: dict, policy: str, expected: float) -> None:
    assert mx.gpu_score(annotations, two_cards(), policy) == expected


def score_engine(clock: Clock, annos_a: dict, annos_b: dict) -> object:
    engine = make_engine(clock=clock)
    engine.upsert_node(gpu_node("ga", 8, annotations=annos_a))
    engine.upsert_node(gpu_node("gb", 8, annotations=annos_b))
    return engine


def test_binpack_prefers_the_lower_loss(clock: Clock) -> None:
    engine = score_engine(clock, {mx.TOPOLOGY_LOSSES: '{"2":270}'}, {mx.TOPOLOGY_LOSSES: '{"2":110}'})
    decision = engine.schedule(make_pod(gpu_container(count=2)))
    assert decision.node == "gb"
    assert decision.scores == {"ga": 1730.0, "gb": 1890.0}


def test_spread_prefers_the_higher_topology_score(clock: Clock) -> None:
    engine = score_engine(clock, {mx.TOPOLOGY_SCORES: '{"1":300}'}, {mx.TOPOLOGY_SCORES: '{"1":100}'})
    decision = engine.schedule(make_pod(gpu_container(), annotations={NODE_POLICY: "spread"}))
    assert decision.scores == {"ga": 1700.0, "gb": 1900.0}
    assert decision.node == "ga"


# ------------------------------------------------------------------------------------ lock and reservations
def test_no_node_lock(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    pod = make_pod(gpu_container())
    assert engine.hook.hami_node_lock(backend=engine.backends["Metax-GPU"], pod=pod,
                                      requests=engine.requests(pod)) is None


def test_reserve_then_schedule_sees_the_card(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(gpu_node("g1", 1))
    a, b = make_pod(gpu_container(), name="a"), make_pod(gpu_container(), name="b")
    decision = engine.schedule(a)
    assert decision.annotations["hami.io/metax-gpu-devices-allocated"] == "g1-metax-0,Metax-GPU,65536,100:;"
    engine.reserve(a, decision)
    assert engine.schedule(b).failed == {"g1": "1/1 CardTimeSlicingExhausted"}
    engine.unreserve(a)
    assert engine.schedule(b).node == "g1"


def test_running_pod_books_its_card(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(gpu_node("g1", 2))
    engine.upsert_pod(running_pod("old", "g1", "g1-metax-1,Metax-GPU,65536,100:;", key=mx.GPU_ALLOCATED))
    card = engine.nodes["g1"].by_uuid["g1-metax-1"]
    assert (card.used, card.usedmem, card.usedcores) == (1, 65536, 100)
    decision = engine.schedule(make_pod(gpu_container()))
    assert decision.annotations[mx.GPU_ALLOCATED] == "g1-metax-0,Metax-GPU,65536,100:;"
