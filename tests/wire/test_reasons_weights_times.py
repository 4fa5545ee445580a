"""Reason strings (§6.9), scoring weights (§7.1) and Unix-seconds values (Appendix C vectors)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.plugins.errors import WireFormatError
from hami_core.wire import (
    DEFAULT_WEIGHTS,
    DEVICE_SCORING_WEIGHTS,
    NODE_UNREGISTERED,
    NODE_USAGE_UNAVAILABLE,
    VGPU_TIME,
    Reason,
    decode_unix_seconds,
    encode_scoring_weights,
    encode_unix_seconds,
    gen_reason,
    gen_reason_items,
    parse_reasons,
    parse_scoring_weights,
)

# -- reasons -------------------------------------------------------------------------------------------


def test_reason_names() -> None:
    assert Reason.CardUuidMismatch == "CardUuidMismatch"
    assert Reason.CARD_INSUFFICIENT_MEMORY == Reason.CardInsufficientMemory == "CardInsufficientMemory"
    assert len(Reason.ALL) == len(set(Reason.ALL)) == 21
    for name in Reason.ALL:
        assert getattr(Reason, name) == name
    assert {"ModeNotFit", "CardCordoned", "CardMigTopologyInfeasible", "CardAppClassMismatch"} <= set(Reason.ALL)
    assert (NODE_UNREGISTERED, NODE_USAGE_UNAVAILABLE) == ("node unregistered", "node usage unavailable")


def test_appendix_c_reason_vector() -> None:
    counts = {Reason.CardUuidMismatch: 1, Reason.CardInsufficientMemory: 1}
    text = gen_reason(counts, 2)
    assert text == "1/2 CardInsufficientMemory, 1/2 CardUuidMismatch"
    assert parse_reasons(text) == {"CardInsufficientMemory": 1, "CardUuidMismatch": 1}
    assert parse_reasons("NodeInsufficientDevice") == {}


def test_reason_items_sorted_zero_omitted() -> None:
    counts = {Reason.NumaNotFit: 0, Reason.CardTypeMismatch: 3, Reason.CardCordoned: 1}
    assert gen_reason_items(counts, 4) == ("1/4 CardCordoned", "3/4 CardTypeMismatch")
    assert gen_reason({}, 4) == ""


def test_parse_reasons_skips_unparsable() -> None:
    assert parse_reasons("") == {}
    assert parse_reasons(NODE_UNREGISTERED) == {}
    # as Go's Sscanf: split on ", " only, so "Bar,3/3" is one word; blanks are optional; the last count wins
    assert parse_reasons("x/2 Foo, 2/3 Bar,3/3  Baz extra, 1/2, 3/4Qux,  5/ 6   Baz x") == {
        "Bar,3/3": 2, "Qux": 3, "Baz": 5}
    assert parse_reasons(f"{2**63}/9 Huge, 1/{2**63} Huge2, -1/2 Neg") == {"Neg": -1}


def test_hami_parse_reason_vectors() -> None:
    """HAMi v2.10.0 pkg/device/common/common_test.go ``TestParseReason``, and the count its MIG test reads."""
    assert parse_reasons("3/8 CardInsufficientMemory, 2/8 CardInsufficientCore, 3/8 CardNotHealth") == {
        "CardInsufficientMemory": 3, "CardInsufficientCore": 2, "CardNotHealth": 3}
    assert parse_reasons("1/1 CardMigTopologyInfeasible")["CardMigTopologyInfeasible"] == 1


@given(st.dictionaries(st.sampled_from(Reason.ALL), st.integers(0, 64)), st.integers(1, 64))
def test_reason_round_trip(counts: dict[str, int], total: int) -> None:
    assert parse_reasons(gen_reason(counts, total)) == {r: c for r, c in counts.items() if c}


# -- weights -------------------------------------------------------------------------------------------


def test_appendix_c_weights_ok() -> None:
    assert parse_scoring_weights("slot=1,core=1,memory=3") == (1, 1, 3)
    assert parse_scoring_weights(" memory = 3 , slot=0,core= 2 ") == (0, 2, 3)
    assert DEFAULT_WEIGHTS == (1, 1, 1)
    assert encode_scoring_weights((1, 1, 3)) == "slot=1,core=1,memory=3"


@pytest.mark.parametrize(("value", "why"), [
    ("slot=1,core=1", "expected slot, core, and memory weights"),
    ("slot=1,core=1,memory=1,", "expected slot, core, and memory weights"),
    ("", "expected slot, core, and memory weights"),
    ("slot=1,core=1,gpu=1", 'unknown weight "gpu"'),
    ("slot=1,slot=1,memory=1", 'duplicate "slot" weight'),
    ("slot=-1,core=1,memory=1", '"slot" weight must not be negative'),
    ("slot=0,core=0,memory=0", "at least one weight must be positive"),
    ("slot=1,core,memory=1", "expected key=value entries"),
    ("slot=1,core=x,memory=1", '"core" weight must be an integer'),
    ("slot=1,core=1.5,memory=1", '"core" weight must be an integer'),
    ("slot=1,core=99999999999999999999,memory=1", '"core" weight must be an integer'),
])
def test_appendix_c_weights_errors(value: str, why: str) -> None:
    with pytest.raises(WireFormatError) as info:
        parse_scoring_weights(value)
    assert str(info.value) == f'invalid {DEVICE_SCORING_WEIGHTS} annotation "{value}": {why}'


@given(st.permutations(["slot", "core", "memory"]),
       st.tuples(*[st.integers(0, 2**40)] * 3).filter(any))
def test_weights_round_trip(order: list[str], weights: tuple[int, int, int]) -> None:
    by_name = dict(zip(("slot", "core", "memory"), weights, strict=True))
    assert parse_scoring_weights(" , ".join(f"{n}={by_name[n]}" for n in order)) == weights
    assert parse_scoring_weights(encode_scoring_weights(weights)) == weights


# -- unix seconds --------------------------------------------------------------------------------------


def test_unix_seconds() -> None:
    assert encode_unix_seconds(1748765730.9) == "1748765730"
    assert encode_unix_seconds(-0.5) == "-1"
    assert decode_unix_seconds("1748765730", key=VGPU_TIME) == 1748765730
    with pytest.raises(WireFormatError, match=f"^{VGPU_TIME}: invalid unix time"):
        decode_unix_seconds("1748765730.5", key=VGPU_TIME)
    with pytest.raises(WireFormatError):
        encode_unix_seconds(float("nan"))


@given(st.integers(0, 2**40))
def test_unix_round_trip(t: int) -> None:
    assert decode_unix_seconds(encode_unix_seconds(t)) == t
