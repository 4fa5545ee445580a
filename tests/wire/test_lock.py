"""Node lock values (spec §3.6, §8.2, Appendix C)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.plugins.errors import WireFormatError
from hami_core.wire import (
    NODE_LOCK,
    NodeLockValue,
    decode_lock_time,
    decode_node_lock,
    encode_lock_time,
    encode_node_lock,
)

T = datetime(2025, 6, 1, 8, 15, 30, tzinfo=UTC)


def test_appendix_c_legacy_lock() -> None:
    value = decode_node_lock("2025-06-01T08:15:30Z", key=NODE_LOCK)
    assert value == NodeLockValue(T, None, None)
    assert value.legacy


def test_appendix_c_owned_lock() -> None:
    value = decode_node_lock("2025-06-01T08:15:30Z,team-a,train-0", key=NODE_LOCK)
    assert value == NodeLockValue(T, "team-a", "train-0")
    assert not value.legacy
    assert value.owned_by("team-a", "train-0")
    assert not value.owned_by("team-a", "train-1")


def test_appendix_c_malformed_lock() -> None:
    with pytest.raises(WireFormatError) as info:
        decode_node_lock("x,y", key=NODE_LOCK)
    assert str(info.value) == f"{NODE_LOCK}: malformed lock annotation: expected 3 parts, got 2 from x,y"
    with pytest.raises(WireFormatError, match="expected 3 parts, got 4"):
        decode_node_lock("2025-06-01T08:15:30Z,a,b,c")


def test_spec_offset_lock() -> None:
    tz = timezone(timedelta(hours=8))
    text = "2025-06-01T16:15:30+08:00,team-a,train-0"
    value = decode_node_lock(text)
    assert value.time == T and value.time.utcoffset() == timedelta(hours=8)
    assert encode_node_lock(datetime(2025, 6, 1, 16, 15, 30, tzinfo=tz), "team-a", "train-0") == text


def test_encode_lock_utc_and_seconds_precision() -> None:
    assert encode_node_lock(T.replace(microsecond=987654), "team-a", "train-0") == "2025-06-01T08:15:30Z,team-a,train-0"
    assert encode_lock_time(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone(-timedelta(hours=5, minutes=30)))) == (
        "2025-01-02T03:04:05-05:30")
    assert encode_lock_time(datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(0)))) == "2025-01-02T03:04:05Z"


def test_naive_time_is_local() -> None:
    naive = datetime(2025, 6, 1, 8, 15, 30)
    assert decode_lock_time(encode_lock_time(naive)) == naive.astimezone()


def test_fractional_seconds_accepted_like_go() -> None:
    assert decode_lock_time("2025-06-01T08:15:30.123456789Z") == T.replace(microsecond=123456)


def test_owner_with_comma_refused() -> None:
    with pytest.raises(WireFormatError, match="namespace"):
        encode_node_lock(T, "a,b", "p")
    with pytest.raises(WireFormatError, match="name"):
        encode_node_lock(T, "ns", "p,q")


@pytest.mark.parametrize("text", [
    "", "x", "2025-06-01", "2025-06-01 08:15:30Z", "2025-06-01T08:15:30", "2025-06-01T08:15:30+0800",
    "2025-13-01T08:15:30Z", "2025-06-01T24:00:00Z", "2025-06-01T08:15:30+24:00", " 2025-06-01T08:15:30Z",
    "2025-06-01t08:15:30z",
])
def test_bad_times(text: str) -> None:
    with pytest.raises(WireFormatError) as info:
        decode_node_lock(text, key=NODE_LOCK)
    assert str(info.value).startswith(f"{NODE_LOCK}: invalid RFC3339 time")
    with pytest.raises(WireFormatError, match=f"^{NODE_LOCK}: invalid RFC3339 time"):
        decode_node_lock(f"{text},ns,name", key=NODE_LOCK)


_zones = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
_times = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=_zones)
_names = st.text(st.characters(blacklist_characters=",", blacklist_categories=("Cs",)))


@given(_times, _names, _names)
def test_lock_round_trip(time: datetime, namespace: str, name: str) -> None:
    value = decode_node_lock(encode_node_lock(time, namespace, name))
    assert value == NodeLockValue(time.replace(microsecond=0), namespace, name)
    assert value.time.utcoffset() == time.utcoffset()


@given(_times)
def test_lock_time_round_trip(time: datetime) -> None:
    value = decode_node_lock(encode_lock_time(time))
    assert value.legacy and value.time == time.replace(microsecond=0)
