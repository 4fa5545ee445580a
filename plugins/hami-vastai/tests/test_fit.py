"""Vastai ``Fit`` beyond HAMi's table: slots only (no memory or core check), whole cards vs die mode, the
best-combination cut, ``mutex`` on cards, and the engine's decisions and annotations.

Devices are given in HAMi's sorted order; the fit walks from the last one.
"""

from __future__ import annotations

from vastai_testlib import (
    ALLOCATED,
    GPU_POLICY,
    NOUSE_UUID,
    TO_ALLOCATE,
    USE_UUID,
    Clock,
    card_node,
    chosen,
    die,
    die_node,
    fit,
    make_engine,
    make_pod,
    request,
    running_pod,
    usage,
    va_container,
)

from hami_core.plugins.types import ContainerDevice

MUTEX = {GPU_POLICY: "mutex"}


# ------------------------------------------------------------------------------------ whole cards
def test_books_no_memory_and_the_requests_cores() -> None:
    # A full card (used memory and cores at the total) still fits while it has a free slot.
    result = fit([usage("a", count=4, used=3, totalmem=1024, usedmem=1024, totalcore=100, usedcores=100)], request(1))
    assert result.devices == (ContainerDevice("a", "Vastai", 0, 0, idx=0),)


def test_request_memory_and_cores_are_not_checked() -> None:
    result = fit([usage("a", totalmem=10, totalcore=10)], request(1, memreq=512, coresreq=50, pct=100))
    assert result.devices == (ContainerDevice("a", "Vastai", 0, 50, idx=0),)


def test_cards_are_taken_last_first() -> None:
    devices = [usage("a", index=0), usage("b", index=1), usage("c", index=2)]
    assert chosen(fit(devices, request(2))) == ["c", "b"]


def test_reasons_are_counted_and_sorted() -> None:
    devices = [usage("a", health=False), usage("b", used=1), usage("c", index=2)]
    assert fit(devices, request(2)).reason == (
        "1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, 1/3 CardTimeSlicingExhausted")


def test_health_before_type_before_uuid() -> None:
    devices = [usage("a", health=False), usage("b")]
    result = fit(devices, request(1, "NVIDIA"), pod_annotations={USE_UUID: "x"})
    assert result.reason == "1/2 CardNotHealth, 1/2 CardTypeMismatch"


def test_uuid_lists_are_trimmed_exact_and_blank_is_no_constraint() -> None:
    devices = [usage("dev-1"), usage("dev-10", index=1)]
    assert chosen(fit(devices, request(1), pod_annotations={USE_UUID: " dev-1 , x"})) == ["dev-1"]
    assert chosen(fit(devices, request(1), pod_annotations={NOUSE_UUID: "dev-10"})) == ["dev-1"]
    assert chosen(fit(devices, request(1), pod_annotations={USE_UUID: " ", NOUSE_UUID: ""})) == ["dev-10"]


def test_mutex_on_whole_cards_needs_idle_cards() -> None:
    devices = [usage("busy", count=4, used=1), usage("idle", index=1, count=4)]
    assert chosen(fit(devices, request(1), pod_annotations=MUTEX)) == ["idle"]
    assert fit(devices, request(2), pod_annotations=MUTEX).reason == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 ExclusiveDeviceAllocateConflict")


# ------------------------------------------------------------------------------------ die mode
def dies(*cards: int) -> list:
    """Dies in fit order: ``cards[c]`` dies on card ``c``."""
    out = []
    for c, n in enumerate(cards):
        out += [die(f"{c}-{d}", str(c), index=len(out)) for d in range(n)]
    return out


def test_die_mode_one_die_is_the_preferred_one() -> None:
    assert chosen(fit(dies(2, 2), request(1))) == ["1-1"]


def test_die_mode_exact_count_keeps_the_walk_order() -> None:
    assert chosen(fit(dies(1, 1, 1), request(3))) == ["2-0", "1-0", "0-0"]


def test_die_mode_prefers_the_card_with_most_eligible_dies() -> None:
    # Walk order: card 1's one die, then card 0's three; two dies come from card 0.
    assert chosen(fit(dies(3, 1), request(2))) == ["0-2", "0-1"]
    # Equal cards: the card whose die came first in the walk (the preferred one) wins the tie.
    assert chosen(fit(dies(2, 2), request(2))) == ["1-1", "1-0"]
    # Bigger cards first even when a smaller one is preferred: card 2's single die loses to card 0's second.
    assert chosen(fit(dies(2, 2, 1), request(3))) == ["1-1", "1-0", "0-1"]


def test_die_mode_busy_dies_do_not_count() -> None:
    devices = [die("0-0", "0", used=1), die("0-1", "0", index=1), die("1-0", "1", index=2),
               die("1-1", "1", index=3, used=1), die("1-2", "1", index=4)]
    assert chosen(fit(devices, request(2))) == ["1-2", "1-0"]
    assert fit(devices, request(4)).reason == (
        "2/5 CardTimeSlicingExhausted, 3/5 AllocatedCardsInsufficientRequest")  # sorted as strings, as HAMi


def test_die_mode_is_read_from_the_first_device_only() -> None:
    # HAMi isDieMode looks at devices[0]: a whole card first makes the node whole-card mode (first n taken) ...
    mixed = [usage("card"), die("0-0", "0", index=1), die("1-0", "1", index=2), die("1-1", "1", index=3)]
    assert chosen(fit(mixed, request(2))) == ["1-1", "1-0"]
    assert chosen(fit(mixed, request(4))) == ["1-1", "1-0", "0-0", "card"]
    # ... a die first makes it die mode: all four are collected and the cut drops the card (it has no AIC).
    assert chosen(fit([mixed[1], mixed[0], mixed[2], mixed[3]], request(3))) == ["1-1", "1-0", "0-0"]


def test_die_mode_drops_dies_without_a_string_aic_when_cutting() -> None:
    devices = [usage("x", custom_info={"DeviceStrategy": "die"}), die("a", "0", index=1),
               usage("y", index=2, custom_info={"DeviceStrategy": "die", "AIC": 3})]
    # Three collected, two asked: only "a" has a string AIC, so HAMi returns one die for a two-die request.
    assert chosen(fit(devices, request(2))) == ["a"]
    # Exactly as many as asked: no cut, so no AIC is needed.
    assert chosen(fit(devices, request(3))) == ["y", "a", "x"]


def test_die_mode_with_no_aic_to_cut_by_fails_the_node() -> None:
    # HAMi would "fit" with zero devices here; a FitResult cannot, so the node fails.
    devices = [usage("x", custom_info={"DeviceStrategy": "die"}), usage("y", index=1,
                                                                         custom_info={"DeviceStrategy": "die"}),
               usage("z", index=2, custom_info={"DeviceStrategy": "die"})]
    assert fit(devices, request(2)).reason == "3/3 AllocatedCardsInsufficientRequest"


def test_mutex_die_mode_counts_unhealthy_busy_dies_as_occupying_their_card() -> None:
    devices = [die("0-0", "0", used=1, count=2, health=False), die("0-1", "0", index=1), die("1-0", "1", index=2)]
    result = fit(devices, request(2), pod_annotations=MUTEX)
    assert result.reason == ("1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, "
                             "1/3 ExclusiveDeviceAllocateConflict")


def test_without_mutex_a_busy_card_shares() -> None:
    devices = [die("0-0", "0", used=1, count=2), die("0-1", "0", index=1)]
    assert chosen(fit(devices, request(2))) == ["0-1", "0-0"]


# ------------------------------------------------------------------------------------ through the engine
def test_whole_card_decision_and_annotations(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(card_node("n1", 2, count=2))
    pod = engine.admit(make_pod(va_container(num=2)))
    decision = engine.schedule(pod)
    assert decision.node == "n1"
    value = "n1-va-1,Vastai,0,0:n1-va-0,Vastai,0,0:;"
    assert (decision.annotations[TO_ALLOCATE], decision.annotations[ALLOCATED]) == (value, value)


def test_container_positions_are_kept(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(card_node("n1", 1, count=4))
    pod = make_pod(make_pod()["spec"]["containers"][0], va_container("main"), init=[va_container("init")])
    assert engine.schedule(pod).annotations[ALLOCATED] == "n1-va-0,Vastai,0,0:;;n1-va-0,Vastai,0,0:;"


def test_die_node_places_a_two_die_pod_on_one_card(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(die_node("d", [1, 2]))
    decision = engine.schedule(make_pod(va_container(num=2)))
    assert decision.annotations[ALLOCATED] == "d-1-1,Vastai,0,0:d-1-0,Vastai,0,0:;"


def test_mutex_through_the_engine_skips_a_card_with_a_busy_die(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(die_node("d", [2, 2]))
    engine.upsert_pod(running_pod("busy", "d", "d-1-0,Vastai,0,0:;"))
    pod = make_pod(va_container(num=2), annotations=MUTEX)
    assert engine.schedule(pod).annotations[ALLOCATED] == "d-0-1,Vastai,0,0:d-0-0,Vastai,0,0:;"
    # The busy die itself has no free slot (checked before mutex); its sibling conflicts.
    assert engine.schedule(make_pod(va_container(num=3), annotations=MUTEX)).failed == {
        "d": "1/4 CardTimeSlicingExhausted, 1/4 ExclusiveDeviceAllocateConflict, "
             "2/4 AllocatedCardsInsufficientRequest"}


def test_more_devices_than_the_node_has(clock: Clock) -> None:
    engine = make_engine(clock=clock)
    engine.upsert_node(card_node("n1", 1, count=4))
    assert engine.schedule(make_pod(va_container(num=2))).failed == {"n1": "NodeInsufficientDevice"}
