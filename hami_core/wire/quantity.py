"""Kubernetes ``resource.Quantity`` strings (node capacity/allocatable, container resources)."""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from hami_core.plugins.errors import WireFormatError
from hami_core.wire.common import go_quote

__all__ = ["format_quantity", "parse_quantity", "quantity_to_int"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|[eE](?P<exp>[+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))"
)
#: Exponent bound keeping ``10**exp`` cheap; far beyond anything Kubernetes can represent.
_MAX_EXPONENT = 1000


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity into its exact value.

    Format: ``[+-]<digits>[.<digits>]`` followed by nothing, a decimal SI suffix (``n u m k M G T P E``),
    a binary suffix (``Ki Mi Gi Ti Pi Ei``) or an exponent (``e3``, ``E-2``), e.g. ``"3Gi"``, ``"500m"``,
    ``"1e3"``. No spaces. Ints and finite floats are taken as their decimal value.
    Raises :class:`WireFormatError` naming the value.
    """
    if isinstance(value, bool):
        raise WireFormatError(f"invalid quantity {value!r}: expected a string or number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise WireFormatError(f"invalid quantity {value!r}: not finite")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise WireFormatError(f"invalid quantity {value!r}: expected a string or number")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    # Cached: every pod repeats the same few quantities ("1", "4000", "500m", "8Gi") and Fractions are
    # immutable, so the scheduler's hot path (requests parsed on filter and bind) skips the regex and the
    # big-number arithmetic. Errors are not cached (lru_cache does not store exceptions).
    match = _QUANTITY.fullmatch(value)
    if match is None or not (match["int"] or match["frac"]):
        raise WireFormatError(f"invalid quantity {go_quote(value)}")
    digits = (match["int"] or "") + (match["frac"] or "")
    number = Fraction(int(digits), 10 ** len(match["frac"] or ""))
    if match["sign"] == "-":
        number = -number
    if match["bin"]:
        return number * _BINARY[match["bin"]]
    exponent = int(match["exp"]) if match["exp"] is not None else _DECIMAL[match["dec"] or ""]
    if abs(exponent) > _MAX_EXPONENT:
        raise WireFormatError(f"invalid quantity {go_quote(value)}: exponent out of range")
    return number * Fraction(10) ** exponent


def quantity_to_int(value: str | int | float) -> int | None:
    """The exact integer value of a quantity, or ``None`` when it is not a whole number.

    Format: as :func:`parse_quantity`; ``"3Gi"`` → ``3221225472``, ``"2k"`` → ``2000``, ``"1.5"`` and
    ``"500m"`` → ``None``. Malformed input raises :class:`WireFormatError`.
    """
    number = parse_quantity(value)
    return number.numerator if number.denominator == 1 else None


def format_quantity(value: int) -> str:
    """Format an integer as a quantity string. Format: plain base-10 digits (``8``, ``-3``), no suffix."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireFormatError(f"format_quantity expects an int, got {value!r}")
    return str(value)
