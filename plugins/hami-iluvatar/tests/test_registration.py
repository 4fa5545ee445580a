"""Node registration (legacy colon/comma form, vendors A.3 + F.2) and the per-chip handshake (A.5, F.3)."""

from __future__ import annotations

import pytest
from iluvatar_testlib import (
    HANDSHAKE,
    REGISTER,
    T0,
    VGPU,
    Clock,
    card,
    csv,
    ilu_container,
    make_backend,
    make_engine,
    make_node,
    make_pod,
    requesting,
    running_pod,
)

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo

TWO_HOURS = 2 * 3600.0
#: The F.2/F.4 registration vector.
SPEC_CSV = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:"
TWO_CARDS = csv(card("GPU-0"), card("GPU-1", index=1))
#: Only MR-V100 enabled: with the chart chips, every chip writes its own Requesting mark on every node.
MR_V100_ONLY = [{"chipName": "MR-V100"}]


# ------------------------------------------------------------------------------------ decoding
def test_spec_vector() -> None:
    (dev,) = make_backend().hami_node_devices(make_node("n", SPEC_CSV))
    assert dev == DeviceInfo(id="GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae", index=0, count=10, devmem=8192,
                             devcore=100, type="MR-V100", numa=0, mode="hami-core", health=True)


def test_nine_field_devices_and_several_cards() -> None:
    raw = "ilu-0,4,32768,100,BI-V150,0,true,0,hami-core:ilu-1,4,32768,100,BI-V150,1,false,1,test:"
    devs = make_backend("BI-V150").hami_node_devices(make_node("n", {"hami.io/node-BI-V150-register": raw}))
    assert [(d.id, d.index, d.count, d.devmem, d.numa, d.health, d.mode) for d in devs] == [
        ("ilu-0", 0, 4, 32768, 0, True, "hami-core"), ("ilu-1", 1, 4, 32768, 1, False, "test")]


def test_go_bools_and_empty_segments() -> None:
    raw = "a,1,1024,100,MR-V100,0,T::b,1,1024,100,MR-V100,0,0:"
    assert [(d.id, d.health) for d in make_backend().hami_node_devices(make_node("n", raw))] == [
        ("a", True), ("b", False)]


def test_no_annotation_means_no_devices() -> None:
    assert make_backend().hami_node_devices(make_node("n")) == []
    # Another chip's registration is not ours.
    assert make_backend("BI-V150").hami_node_devices(make_node("n", SPEC_CSV)) == []


@pytest.mark.parametrize(("raw", "message"), [
    ("", "node annotation missing device separator"),
    ("GPU-0,10,8192,100,MR-V100,0,true", "node annotation missing device separator"),
    ("garbage:", 'malformed node annotation segment: "garbage"'),
    ("GPU-0,10,8192,100,MR-V100:", "unexpected field count 5 in node annotation"),
    ("GPU-0,ten,8192,100,MR-V100,0,true:", "invalid count field"),
    ("GPU-0,10,8192,100,MR-V100,0,yes:", "invalid health field"),
    ("GPU-0,10,8192,100,MR-V100,0,true,-1,hami-core:", "index field must not be negative"),
    (":", "no gpu found on node"),
])
def test_malformed_registration_names_the_annotation(raw: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        make_backend().hami_node_devices(make_node("n", raw))
    assert str(info.value).startswith(f"{REGISTER}: ")
    assert message in str(info.value)


@pytest.mark.parametrize("raw", ["", ":", "garbage:", "GPU-0,10,8192,100,MR-V100:"])
def test_engine_keeps_the_previous_devices_on_a_bad_registration(clock: Clock, raw: str) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", TWO_CARDS, annotations={HANDSHAKE: requesting(T0)}))
    engine.upsert_pod(running_pod("holder", "n", "GPU-0,MR-V100,1024,0:;"))
    status = engine.upsert_node(make_node("n", raw, annotations={HANDSHAKE: requesting(T0)}))
    assert status.devices == {"MR-V100": 2}
    assert list(status.errors) == ["MR-V100"]
    assert REGISTER in status.errors["MR-V100"]
    assert [d.id for d in engine.nodes["n"].devices["MR-V100"]] == ["GPU-0", "GPU-1"]
    assert engine.nodes["n"].by_uuid["GPU-0"].usedmem == 1024
    assert engine.schedule(make_pod(ilu_container(mem=4))).node == "n"


def test_registration_removed_drops_the_devices(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(make_node("n", TWO_CARDS, annotations={HANDSHAKE: requesting(T0)}))
    status = engine.upsert_node(make_node("n", None, annotations={HANDSHAKE: requesting(T0)}))
    assert status.devices == {}
    assert engine.schedule(make_pod(ilu_container())).failed == {"n": "node unregistered"}


def test_devices_whose_type_lacks_the_common_word_are_not_used(clock: Clock) -> None:
    # Vendors A.3: a backend only gets devices whose type contains its common word, case-insensitively.
    engine = make_engine(clock=clock)
    raw = csv(card("GPU-0", type="BI-V150"), card("GPU-1", type="mr-v100-pcie"))
    status = engine.upsert_node(make_node("n", raw))
    assert status.devices == {"MR-V100": 1}
    assert "does not contain 'MR-V100'" in status.errors["MR-V100"]
    decision = engine.schedule(make_pod(ilu_container(mem=4)))
    assert decision.annotations["hami.io/MR-V100-devices-allocated"] == "GPU-1,MR-V100,1024,0:;"


def test_each_chip_reads_its_own_annotation(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    regs = {REGISTER: csv(card("mr-0")),
            "hami.io/node-BI-V150-register": csv(card("bi-0", type="BI-V150"), card("bi-1", type="BI-V150"))}
    status = engine.upsert_node(make_node("n", regs))
    assert status.devices == {"BI-V150": 2, "MR-V100": 1}
    assert status.errors == {}


# ------------------------------------------------------------------------------------ handshake (A.5)
def test_absent_handshake_registers_and_patches_requesting(clock: Clock) -> None:
    status = make_engine(MR_V100_ONLY, clock=clock).upsert_node(make_node("n", TWO_CARDS))
    assert status.devices == {"MR-V100": 2}
    assert status.unhealthy == {}
    assert status.patch == {HANDSHAKE: requesting(T0)}


def test_reported_handshake_is_answered_with_requesting(clock: Clock) -> None:
    node = make_node("n", TWO_CARDS, annotations={HANDSHAKE: "Reported 2025-01-07 00:00:00"})
    assert make_engine(MR_V100_ONLY, clock=clock).upsert_node(node).patch == {HANDSHAKE: requesting(T0)}


def test_every_chip_has_its_own_handshake(clock: Clock) -> None:
    # Each chip the node registers has its own handshake; chips the node does not register are left alone
    # (HAMi would mark every node for every enabled chip; hami-core marks only registered ones).
    regs = {REGISTER: csv(card("mr-0")), "hami.io/node-BI-V150-register": csv(card("bi-0", type="BI-V150"))}
    status = make_engine(clock=clock).upsert_node(make_node("n", regs, annotations={HANDSHAKE: requesting(T0)}))
    assert status.devices == {"BI-V150": 1, "MR-V100": 1}
    assert status.patch == {"hami.io/node-handshake-BI-V150": requesting(T0)}


def test_fresh_requesting_keeps_the_devices(clock: Clock) -> None:
    engine = make_engine(MR_V100_ONLY, clock=clock)
    clock.now = T0 + 59
    status = engine.upsert_node(make_node("n", TWO_CARDS, annotations={HANDSHAKE: requesting(T0)}))
    assert (status.devices, status.unhealthy, status.patch) == ({"MR-V100": 2}, {}, {})


def test_stale_requesting_without_allocatable_drops_the_devices(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    marked = make_node("n", TWO_CARDS, annotations={HANDSHAKE: requesting(T0)})
    assert engine.upsert_node(marked).devices == {"MR-V100": 2}
    clock.now = T0 + 61
    status = engine.upsert_node(marked)
    assert status.devices == {}
    assert list(status.unhealthy) == ["MR-V100"]
    assert engine.schedule(make_pod(ilu_container())).failed == {"n": "node unregistered"}


def test_stale_requesting_with_the_vgpu_allocatable_is_healthy(clock: Clock) -> None:
    node = make_node("n", TWO_CARDS, annotations={HANDSHAKE: requesting(T0 - TWO_HOURS)}, allocatable={VGPU: 20})
    status = make_engine(MR_V100_ONLY, clock=clock).upsert_node(node)
    assert (status.devices, status.unhealthy, status.patch) == ({"MR-V100": 2}, {}, {})
    # Another chip's allocatable does not count.
    node = make_node("n", TWO_CARDS, annotations={HANDSHAKE: requesting(T0 - TWO_HOURS)},
                     allocatable={"iluvatar.ai/BI-V150-vgpu": 20})
    assert list(make_engine(MR_V100_ONLY, clock=clock).upsert_node(node).unhealthy) == ["MR-V100"]


def test_node_cleanup_keeps_the_handshake(clock: Clock) -> None:
    engine = make_engine(MR_V100_ONLY, clock=clock)
    marked = make_node("n", TWO_CARDS, annotations={HANDSHAKE: requesting(T0)})
    engine.upsert_node(marked)
    clock.now = T0 + TWO_HOURS
    status = engine.upsert_node(marked)
    assert list(status.unhealthy) == ["MR-V100"]
    assert status.patch == {}
