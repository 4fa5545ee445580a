"""Small parsing helpers shared by the wire codecs (Go ``strconv`` look-alikes and error building)."""

from __future__ import annotations

import json
import re
from typing import Any

from hami_core.plugins.errors import WireFormatError

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_NODE_DEVICES",
    "UINT32_MAX",
    "UINT64_MAX",
    "check_device_count",
    "go_quote",
    "parse_go_bool",
    "parse_go_int",
    "split_list",
    "wire_error",
]

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT32_MAX = 2**32 - 1
UINT64_MAX = 2**64 - 1
#: More accelerators than any node holds. Vendors that derive their device list from a node capacity
#: (``status.capacity[...]``) refuse a larger count instead of building billions of devices from a bad value.
MAX_NODE_DEVICES = 1024

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_GO_INT = re.compile(r"[+-]?[0-9]+")
_MAX_SHOWN = 200


def check_device_count(count: int, where: str) -> int:
    """``count`` if it is at most :data:`MAX_NODE_DEVICES`, else a :class:`WireFormatError` naming ``where``."""
    if count > MAX_NODE_DEVICES:
        raise WireFormatError(f"{where}: {count} devices is more than the {MAX_NODE_DEVICES} a node can hold")
    return count


def wire_error(key: str, message: str) -> WireFormatError:
    """Build a :class:`WireFormatError` with message ``"<key>: <message>"`` (just the message if no key)."""
    return WireFormatError(f"{key}: {message}" if key else message)


def go_quote(value: Any) -> str:
    """Quote a value for an error message like Go's ``%q`` (JSON-style quoting, long values shortened)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    if len(text) > _MAX_SHOWN:
        text = text[:_MAX_SHOWN] + "..."
    return json.dumps(text, ensure_ascii=False)


def parse_go_bool(value: str) -> bool:
    """Parse a boolean like Go's ``strconv.ParseBool``.

    Format: ``1 t T TRUE true True`` are true, ``0 f F FALSE false False`` are false; anything else
    (including surrounding spaces) raises :class:`WireFormatError`.
    """
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise WireFormatError(f"strconv.ParseBool: parsing {go_quote(value)}: invalid syntax")


def parse_go_int(value: str, lo: int = INT64_MIN, hi: int = INT64_MAX, *,
                 func: str = "strconv.ParseInt") -> int:
    """Parse a base-10 integer like Go's ``strconv.ParseInt`` / ``Atoi`` and check ``lo <= n <= hi``.

    Format: optional ``+``/``-`` then ASCII digits, nothing else (no spaces, no ``_``). The error text
    mirrors Go: ``strconv.ParseInt: parsing "x": invalid syntax`` or ``...: value out of range``.
    """
    if not _GO_INT.fullmatch(value):
        raise WireFormatError(f"{func}: parsing {go_quote(value)}: invalid syntax")
    number = int(value)
    if not lo <= number <= hi:
        raise WireFormatError(f"{func}: parsing {go_quote(value)}: value out of range")
    return number


def split_list(value: str | None) -> tuple[str, ...]:
    """Split a comma list annotation value.

    Format: ``"a, b,,c "`` → ``("a", "b", "c")``: items are stripped and empty items dropped; ``None``
    or a blank value gives ``()``.
    """
    if not value:
        return ()
    return tuple(item for item in (part.strip() for part in value.split(",")) if item)
