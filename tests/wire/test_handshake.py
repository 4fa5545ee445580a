"""Handshake values (spec §3.3, Appendix B.1)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.wire import Handshake, encode_reported, encode_requesting, parse_handshake


def test_spec_requesting_example() -> None:
    assert encode_requesting(datetime(2025, 6, 1, 8, 15, 30, 999999)) == "Requesting_2025-06-01 08:15:30"
    assert parse_handshake("Requesting_2025-06-01 08:15:30") == Handshake("requesting", datetime(2025, 6, 1, 8, 15, 30))


def test_aware_time_is_written_in_local_zone() -> None:
    now = datetime(2025, 6, 1, 8, 15, 30, tzinfo=UTC)
    local = now.astimezone().replace(tzinfo=None)
    assert parse_handshake(encode_requesting(now)).time == local


@pytest.mark.parametrize("value", ["Requesting", "Requesting-2025-06-01 08:15:30", "xRequesting"])
def test_requesting_without_underscore(value: str) -> None:
    assert parse_handshake(value) == Handshake("requesting", None)


@pytest.mark.parametrize("value", [
    "Requesting_", "Requesting_garbage", "Requesting_2025-13-01 08:15:30", "Requesting_2025-06-01T08:15:30",
    "Requesting_2025-06-01 08:15:30 ", "Requesting_25-06-01 08:15:30", "Requesting_2025-02-30 00:00:00",
])
def test_requesting_unparsable_time(value: str) -> None:
    assert parse_handshake(value) == Handshake("requesting", None)


def test_requesting_go_leniency() -> None:
    assert parse_handshake("Requesting_2025-06-01 8:15:30").time == datetime(2025, 6, 1, 8, 15, 30)
    assert parse_handshake("Requesting_2025-06-01 08:15:30.250").time == datetime(2025, 6, 1, 8, 15, 30, 250000)
    assert parse_handshake("foo_Requesting_2025").state == "requesting"


def test_spec_reported_example() -> None:
    h = parse_handshake("Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.77")
    assert h == Handshake("reported", datetime(2024, 1, 23, 4, 30, 4, 434037, tzinfo=UTC))


def test_reported_variants() -> None:
    assert parse_handshake("Reported_2026.01.02 15:04:05") == Handshake("reported", None)
    assert parse_handshake("Reported 2024-01-23 04:30:04 -0130 XYZ").time == datetime(
        2024, 1, 23, 4, 30, 4, tzinfo=timezone(-timedelta(hours=1, minutes=30)))


def test_encode_reported_like_go_time_string() -> None:
    assert encode_reported(datetime(2024, 1, 23, 4, 30, 4, 434037, tzinfo=UTC)) == (
        "Reported 2024-01-23 04:30:04.434037 +0000 UTC")
    assert encode_reported(datetime(2024, 1, 23, 4, 30, 4, 500000, tzinfo=timezone(timedelta(hours=8)))).startswith(
        "Reported 2024-01-23 04:30:04.5 +0800 ")
    assert encode_reported(datetime(2024, 1, 23, 4, 30, 4, tzinfo=UTC)) == "Reported 2024-01-23 04:30:04 +0000 UTC"


def test_other_states() -> None:
    assert parse_handshake(None) == Handshake("absent")
    assert parse_handshake("") == Handshake("absent")
    assert parse_handshake("Deleted_2025-06-01 08:15:30") == Handshake("deleted", datetime(2025, 6, 1, 8, 15, 30))
    assert parse_handshake("Deleted") == Handshake("deleted", None)
    assert parse_handshake("whatever") == Handshake("other")


@given(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)))
def test_requesting_round_trip(now: datetime) -> None:
    assert parse_handshake(encode_requesting(now)) == Handshake("requesting", now.replace(microsecond=0))


@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)))
def test_reported_round_trip(now: datetime) -> None:
    assert parse_handshake(encode_reported(now)) == Handshake("reported", now)


@given(st.text())
def test_parse_handshake_never_raises(value: str) -> None:
    assert parse_handshake(value).state in ("absent", "requesting", "reported", "deleted", "other")
