"""Go ``encoding/json`` look-alike helpers: strict loading, case-insensitive keys, typed fields, Go output.

Public for vendor plugins that read or write their own JSON annotations the way HAMi's Go code does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hami_core.plugins.errors import WireFormatError
from hami_core.wire.common import go_quote, wire_error

_GO_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_GO_ESCAPE_TABLE = str.maketrans(_GO_ESCAPES)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")


def loads(value: str, key: str) -> Any:
    """Parse JSON strictly (no NaN/Infinity); any failure is a WireFormatError naming the key and value."""
    if not isinstance(value, str):
        raise wire_error(key, f"expected a JSON string, got {type(value).__name__}")
    try:
        return json.loads(value, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise wire_error(key, f"invalid JSON ({exc.msg} at offset {exc.pos}): {go_quote(value)}") from None
    except (ValueError, RecursionError) as exc:
        raise wire_error(key, f"invalid JSON ({exc}): {go_quote(value)}") from None


def dumps(data: Any) -> str:
    """Serialise like Go's ``json.Marshal``: compact, UTF-8 kept, ``<``, ``>``, ``&``, U+2028/9 escaped."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).translate(_GO_ESCAPE_TABLE)


def fold(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Lower-case an object's keys (Go matches JSON keys case-insensitively; the last duplicate wins)."""
    return {k.lower(): v for k, v in obj.items()}


def show(value: Any) -> str:
    """Render a JSON value for an error message (strings quoted)."""
    return go_quote(value) if isinstance(value, str) else json.dumps(value, default=repr)[:200]


def get_int(obj: Mapping[str, Any], name: str, where: str, lo: int, hi: int, type_name: str) -> int:
    """Read integer field ``name`` (keys folded); absent or null is 0; floats, bools, strings rejected."""
    raw = obj.get(name.lower())
    if raw is None:
        return 0
    if type(raw) is not int:
        raise _field_error(where, name, f"must be an integer, got {show(raw)}")
    if raw < 0 <= lo:
        raise _field_error(where, name, f"must not be negative, got {raw}")
    if not lo <= raw <= hi:
        raise _field_error(where, name, f"out of range for {type_name}, got {raw}")
    return raw


def get_str(obj: Mapping[str, Any], name: str, where: str) -> str:
    """Read string field ``name``; absent or null is ``""``."""
    raw = obj.get(name.lower())
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise _field_error(where, name, f"must be a string, got {show(raw)}")
    return raw


def get_bool(obj: Mapping[str, Any], name: str, where: str) -> bool:
    """Read boolean field ``name``; absent or null is ``False``."""
    raw = obj.get(name.lower())
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise _field_error(where, name, f"must be a boolean, got {show(raw)}")
    return raw


def get_list(obj: Mapping[str, Any], name: str, where: str) -> list[Any]:
    """Read array field ``name``; absent or null is ``[]``."""
    raw = obj.get(name.lower())
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _field_error(where, name, f"must be an array, got {show(raw)}")
    return raw


def get_object(obj: Mapping[str, Any], name: str, where: str) -> dict[str, Any] | None:
    """Read object field ``name``; absent or null is ``None``."""
    raw = obj.get(name.lower())
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise _field_error(where, name, f"must be an object, got {show(raw)}")
    return raw


def _field_error(where: str, name: str, message: str) -> WireFormatError:
    return wire_error(where, f"field {json.dumps(name)} {message}")
