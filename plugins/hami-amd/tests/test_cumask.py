"""HSA CU ID lists and first-fit CU selection (:mod:`hami_amd.cumask`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_amd.cumask import first_fit, format_cu_list, parse_cu_list
from hami_core.plugins import WireFormatError


@pytest.mark.parametrize(("text", "ids"), [
    ("0-3,8,10-12", {0, 1, 2, 3, 8, 10, 11, 12}),  # the grammar example of docs/develop/amd-vgpu.md §4.2
    ("0-75", set(range(76))),
    (" 5 , ,7", {5, 7}),
    ("", set()),
])
def test_parse(text: str, ids: set[int]) -> None:
    assert parse_cu_list(text) == ids


@pytest.mark.parametrize("text", ["a", "3-1", "-4", "1-", "1-2-3", "0x10"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="CU"):
        parse_cu_list(text)


def test_format_is_compact_and_ascending() -> None:
    assert format_cu_list([12, 0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-12"
    assert format_cu_list([]) == ""
    assert format_cu_list([7]) == "7"


@given(st.frozensets(st.integers(0, 400)))
def test_format_round_trips(ids: frozenset[int]) -> None:
    assert parse_cu_list(format_cu_list(ids)) == ids


def test_first_fit_takes_the_lowest_free_ids() -> None:
    assert format_cu_list(first_fit(frozenset(range(76)) | set(range(100, 121)), 76, where="w")) == "76-99,121-172"


@given(st.frozensets(st.integers(0, 303), max_size=300), st.integers(1, 304))
def test_first_fit_stays_below_the_booked_total(used: frozenset[int], count: int) -> None:
    # The scheduler keeps len(used) + count <= devcore, so every chosen ID is below devcore.
    cus = first_fit(used, count, where="w")
    assert len(cus) == count and not cus & used
    assert max(cus) < len(used) + count


@pytest.mark.parametrize("count", [0, -1])
def test_first_fit_needs_a_cu(count: int) -> None:
    with pytest.raises(WireFormatError, match="w: a device needs at least 1 compute unit"):
        first_fit(frozenset(), count, where="w")
