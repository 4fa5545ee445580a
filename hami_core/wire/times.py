"""Unix-seconds annotation values (``hami.io/vgpu-time``, ``hami.io/bind-time``)."""

from __future__ import annotations

import math

from hami_core.plugins.errors import WireFormatError
from hami_core.wire.common import INT64_MAX, INT64_MIN, parse_go_int, wire_error

__all__ = ["decode_unix_seconds", "encode_unix_seconds"]


def encode_unix_seconds(t: float) -> str:
    """Encode a POSIX timestamp like Go ``strconv.FormatInt(time.Unix(), 10)``: whole seconds, floored."""
    if not math.isfinite(t):
        raise WireFormatError(f"timestamp must be finite, got {t!r}")
    return str(math.floor(t))


def decode_unix_seconds(value: str, *, key: str = "") -> int:
    """Decode a Unix-seconds annotation. Format: a base-10 integer such as ``1748765730``."""
    try:
        return parse_go_int(value, INT64_MIN, INT64_MAX)
    except WireFormatError as exc:
        raise wire_error(key, f"invalid unix time: {exc}") from None
