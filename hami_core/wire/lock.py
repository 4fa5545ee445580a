"""Node lock annotation values (``hami.io/mutex.lock``; spec §3.6, §8.2; Cambricon's time-only lock)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from hami_core.plugins.errors import WireFormatError
from hami_core.wire.common import go_quote, wire_error

__all__ = [
    "NodeLockValue",
    "decode_lock_time",
    "decode_node_lock",
    "encode_lock_time",
    "encode_node_lock",
]

LOCK_SEP = ","
_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
                      r"(?:(Z)|([+-])(\d{2}):(\d{2}))")


@dataclass(frozen=True, slots=True)
class NodeLockValue:
    """A decoded node lock: its (aware) time and owner pod; ``namespace``/``name`` are ``None`` for legacy."""

    time: datetime
    namespace: str | None = None
    name: str | None = None

    @property
    def legacy(self) -> bool:
        """True for an owner-less (time-only) lock."""
        return self.namespace is None

    def owned_by(self, namespace: str, name: str) -> bool:
        """True when the lock names this pod (HAMi's ``,<ns>,<name>`` suffix check)."""
        return self.namespace == namespace and self.name == name


def encode_lock_time(time: datetime) -> str:
    """Encode a time like Go ``time.Format(time.RFC3339)``.

    Format: ``2025-06-01T08:15:30Z`` (UTC) or ``2025-06-01T16:15:30+08:00``; whole seconds; a naive time
    is taken as local time.
    """
    t = time.astimezone() if time.tzinfo is None else time
    offset = t.utcoffset() or timedelta(0)
    stamp = f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    if not offset:
        return stamp + "Z"
    seconds = int(offset.total_seconds())
    minutes = abs(seconds) // 60
    return f"{stamp}{'-' if seconds < 0 else '+'}{minutes // 60:02d}:{minutes % 60:02d}"


def encode_node_lock(time: datetime, namespace: str, name: str) -> str:
    """Encode a node lock value like HAMi ``GenerateNodeLockKeyByPod``.

    Format: ``<RFC3339 time>,<namespace>,<pod name>``, e.g. ``2025-06-01T08:15:30Z,team-a,train-0``.
    Raises :class:`WireFormatError` if the namespace or name contains ``,``.
    """
    for what, text in (("namespace", namespace), ("name", name)):
        if LOCK_SEP in text:
            raise WireFormatError(f"lock owner {what} {text!r} must not contain ','")
    return f"{encode_lock_time(time)}{LOCK_SEP}{namespace}{LOCK_SEP}{name}"


def decode_lock_time(value: str, *, key: str = "") -> datetime:
    """Decode an RFC3339 time like Go ``time.Parse(time.RFC3339, …)`` into an aware datetime.

    Format: ``YYYY-MM-DDTHH:MM:SS[.frac](Z|±hh:mm)``; the fraction is kept to microseconds.
    """
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise wire_error(key, f"invalid RFC3339 time {go_quote(value)}")
    year, month, day, hour, minute, second, frac, zulu, sign, oh, om = match.groups()
    try:
        if zulu:
            tz = UTC
        else:
            delta = timedelta(hours=int(oh), minutes=int(om))
            if delta >= timedelta(hours=24):
                raise ValueError("offset out of range")
            tz = timezone(-delta if sign == "-" else delta)
        return datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                        int((frac or "0")[:6].ljust(6, "0")), tzinfo=tz)
    except ValueError as exc:
        raise wire_error(key, f"invalid RFC3339 time {go_quote(value)}: {exc}") from None


def decode_node_lock(value: str, *, key: str = "") -> NodeLockValue:
    """Decode a node lock value like HAMi ``ParseNodeLock``.

    Format: no ``,`` → legacy time-only lock; otherwise exactly three ``,`` parts ``time,namespace,name``
    (else ``malformed lock annotation: expected 3 parts, got N from <value>``).
    """
    if LOCK_SEP not in value:
        return NodeLockValue(decode_lock_time(value, key=key))
    parts = value.split(LOCK_SEP)
    if len(parts) != 3:
        raise wire_error(key, f"malformed lock annotation: expected 3 parts, got {len(parts)} from {value}")
    return NodeLockValue(decode_lock_time(parts[0], key=key), parts[1], parts[2])
