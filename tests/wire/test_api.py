"""Package surface and the "only WireFormatError" guarantee for every decoder."""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hami_core.wire as wire
from hami_core.plugins.errors import WireFormatError

DECODERS: list[Callable[..., Any]] = [
    wire.decode_node_devices, wire.decode_node_devices_json, wire.decode_node_devices_legacy,
    wire.decode_pair_scores, wire.decode_container_devices, wire.decode_pod_single_device,
    wire.decode_mig_allocations, wire.decode_node_lock, wire.decode_lock_time, wire.decode_unix_seconds,
]
OTHER_PARSERS: list[Callable[[str], Any]] = [
    wire.parse_scoring_weights, wire.parse_quantity, wire.quantity_to_int, wire.parse_go_bool, wire.parse_go_int,
]

_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["id", "ID", "count", "devmem", "index", "health", "migProfiles", "placements", "start",
                         "size", "uuid", "score", "containerIndex", "deviceIndex", "gpuUUID", "profile",
                         "placement", "migUUID", "gpuInstanceID", "custominfo", "name"]) | st.text(),
        inner, max_size=6),
    max_leaves=20,
)


def test_all_names_resolve_and_are_sorted_uniquely() -> None:
    assert len(wire.__all__) == len(set(wire.__all__))
    for name in wire.__all__:
        assert hasattr(wire, name), name


def test_public_functions_have_docstrings() -> None:
    for name in wire.__all__:
        obj = getattr(wire, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert obj.__doc__ and obj.__doc__.strip(), name


@pytest.mark.parametrize("decode", DECODERS, ids=lambda f: f.__name__)
@settings(max_examples=150)
@given(text=st.text() | _json_values.map(json.dumps))
def test_decoders_raise_only_wire_format_error(decode: Callable[..., Any], text: str) -> None:
    try:
        decode(text, key="the/key")
    except WireFormatError as exc:
        assert str(exc).startswith("the/key: ")


@pytest.mark.parametrize("parse", OTHER_PARSERS, ids=lambda f: f.__name__)
@given(text=st.text())
def test_parsers_raise_only_wire_format_error(parse: Callable[[str], Any], text: str) -> None:
    with contextlib.suppress(WireFormatError):
        parse(text)
