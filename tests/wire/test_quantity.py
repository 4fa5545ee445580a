"""Kubernetes quantities."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.plugins.errors import WireFormatError
from hami_core.wire import format_quantity, parse_quantity, quantity_to_int


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("8", 8), ("+8", 8), ("-3", -3), ("3Gi", 3 * 2**30), ("1Ki", 1024), ("2Mi", 2 * 2**20),
    ("1Ti", 2**40), ("1Pi", 2**50), ("1Ei", 2**60), ("2k", 2000), ("1M", 10**6), ("1G", 10**9),
    ("1T", 10**12), ("1P", 10**15), ("1E", 10**18), ("500m", Fraction(1, 2)), ("1500m", Fraction(3, 2)),
    ("1u", Fraction(1, 10**6)), ("3n", Fraction(3, 10**9)), ("1.5", Fraction(3, 2)), ("1.5Gi", 3 * 2**29),
    (".5", Fraction(1, 2)), ("5.", 5), ("1e3", 1000), ("1E3", 1000), ("1e-3", Fraction(1, 1000)),
    ("2.5e+2", 250), ("0.1k", 100), ("007", 7),
])
def test_parse(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", " 1", "1 ", "abc", "1.2.3", ".", "1Kb", "1ki", "1K", "1e", "e3", "1e3k",
                                  "--1", "1Gi ", "1_000", "0x10", "Gi", "+", "1e1001"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(WireFormatError) as info:
        parse_quantity(text)
    assert str(info.value).startswith(f"invalid quantity {json.dumps(text)}")


def test_numbers() -> None:
    assert parse_quantity(4) == 4
    assert parse_quantity(0.1) == Fraction(1, 10)
    for bad in (True, float("nan"), float("inf"), None, [1]):
        with pytest.raises(WireFormatError):
            parse_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "expected"), [
    ("3Gi", 3221225472), ("1.5", None), ("500m", None), ("1000m", 1), ("2k", 2000), ("1e3", 1000), (8, 8),
    (2.0, 2), (2.5, None),
])
def test_quantity_to_int(value: str | int | float, expected: int | None) -> None:
    assert quantity_to_int(value) == expected


def test_format_quantity() -> None:
    assert format_quantity(8) == "8"
    assert format_quantity(-3) == "-3"
    with pytest.raises(WireFormatError):
        format_quantity(1.5)  # type: ignore[arg-type]


@given(st.integers())
def test_int_round_trip(n: int) -> None:
    assert quantity_to_int(format_quantity(n)) == n


_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10,
           "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": Fraction(1, 10**3),
           "u": Fraction(1, 10**6), "n": Fraction(1, 10**9)}


@given(st.integers(0, 10**12), st.integers(0, 6), st.sampled_from(sorted(_SUFFIX)), st.booleans())
def test_decimal_with_suffix(digits: int, scale: int, suffix: str, negative: bool) -> None:
    text = str(digits).rjust(scale + 1, "0")
    text = f"{'-' if negative else ''}{text[:len(text) - scale]}.{text[len(text) - scale:]}{suffix}"
    expected = Fraction(digits, 10**scale) * _SUFFIX[suffix] * (-1 if negative else 1)
    assert parse_quantity(text) == expected


@given(st.integers(-10**6, 10**6), st.integers(-30, 30))
def test_exponent(n: int, exp: int) -> None:
    assert parse_quantity(f"{n}e{exp}") == n * Fraction(10) ** exp
