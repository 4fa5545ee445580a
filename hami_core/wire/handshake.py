"""Node handshake annotation values (spec §3.3, Appendix B.1; vendors A.5)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal

__all__ = [
    "DELETED_PREFIX",
    "REPORTED_PREFIX",
    "REQUESTING_PREFIX",
    "Handshake",
    "HandshakeState",
    "encode_reported",
    "encode_requesting",
    "parse_handshake",
]

HandshakeState = Literal["absent", "requesting", "reported", "deleted", "other"]

REQUESTING_PREFIX = "Requesting_"
REPORTED_PREFIX = "Reported "
DELETED_PREFIX = "Deleted_"

# Go time.DateTime ("2006-01-02 15:04:05"); Go's parser also accepts a fractional second and a 1-digit hour.
_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?")
_OFFSET = re.compile(r" ([+-])(\d{2})(\d{2})\b")


@dataclass(frozen=True, slots=True)
class Handshake:
    """A decoded handshake value.

    ``state`` is ``absent`` (no value or ``""``), ``requesting`` (contains ``Requesting``), ``reported``
    (starts with ``Reported``), ``deleted`` (starts with ``Deleted``) or ``other``. ``time`` is the naive
    local time of ``Requesting_``/``Deleted_`` values, the time of ``Reported`` values (aware when the
    value carries an offset), or ``None`` when absent or unparsable.
    """

    state: HandshakeState
    time: datetime | None = None


def _format_datetime(t: datetime) -> str:
    return f"{t.year:04d}-{t.month:02d}-{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"


def _local(now: datetime) -> datetime:
    return now if now.tzinfo is None else now.astimezone()


def encode_requesting(now: datetime) -> str:
    """Encode the scheduler's handshake mark.

    Format: ``Requesting_<YYYY-MM-DD HH:MM:SS>`` in local wall-clock time (Go ``time.DateTime``); a naive
    ``now`` is taken as local time, an aware one is converted to the system's local zone first.
    """
    return REQUESTING_PREFIX + _format_datetime(_local(now))


def encode_reported(now: datetime) -> str:
    """Encode a legacy device plugin's report, as Go ``"Reported " + time.Now().String()``.

    Format: ``Reported 2024-01-23 04:30:04.434037 +0000 UTC`` (fraction without trailing zeros, omitted
    when zero; no monotonic ``m=`` suffix). A naive ``now`` is taken as local time; an aware one keeps
    its zone.
    """
    t = now.astimezone() if now.tzinfo is None else now
    frac = f".{t.microsecond:06d}".rstrip("0") if t.microsecond else ""
    offset = t.utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    zone = f"{sign}{abs(minutes) // 60:02d}{abs(minutes) % 60:02d} {t.tzname() or ''}"
    return f"{REPORTED_PREFIX}{_format_datetime(t)}{frac} {zone}"


def _parse_datetime(text: str, *, prefix_only: bool = False) -> datetime | None:
    match = _DATETIME.match(text) if prefix_only else _DATETIME.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, frac = match.groups()
    micro = int((frac or "0")[:6].ljust(6, "0"))
    try:
        parsed = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micro)
    except ValueError:
        return None
    if prefix_only:
        offset = _OFFSET.match(text, match.end())
        if offset is not None:
            sign, hh, mm = offset.groups()
            delta = timedelta(hours=int(hh), minutes=int(mm))
            parsed = parsed.replace(tzinfo=timezone(-delta if sign == "-" else delta))
    return parsed


def parse_handshake(value: str | None) -> Handshake:
    """Classify a handshake annotation value like HAMi ``CheckHealth``.

    Format: ``Requesting_<YYYY-MM-DD HH:MM:SS>`` → requesting with its naive local time (any value that
    contains ``Requesting`` is requesting; no ``_`` or an unparsable time gives ``time=None``, which the
    caller treats as healthy/no update); ``Reported <Go time>`` → reported; ``Deleted_<time>`` → deleted;
    ``None``/``""`` → absent; anything else → other. Never raises.
    """
    if not value:
        return Handshake("absent")
    if "Requesting" in value:
        _, sep, rest = value.partition("_")
        return Handshake("requesting", _parse_datetime(rest) if sep else None)
    if value.startswith("Reported"):
        return Handshake("reported", _parse_datetime(value[len("Reported"):].lstrip(" _"), prefix_only=True))
    if value.startswith("Deleted"):
        _, sep, rest = value.partition("_")
        return Handshake("deleted", _parse_datetime(rest) if sep else None)
    return Handshake("other")
