"""MIG allocations annotation (spec §3.5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, Placement
from hami_core.wire import (
    MIG_PLACEMENT_CUSTOM_INFO,
    MIG_PROFILE_CUSTOM_INFO,
    VGPU_MIG_ALLOCATIONS,
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
    mig_allocations_from_devices,
)
from hami_core.wire.common import UINT32_MAX

KEY = VGPU_MIG_ALLOCATIONS
SPEC = ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-…","profile":"1g.10gb","placement":{"start":6,"size":1},'
        '"migUUID":"MIG-…","gpuInstanceID":13,"computeInstanceID":0}]')


def test_spec_example_round_trips() -> None:
    (alloc,) = decode_mig_allocations(SPEC, key=KEY)
    assert alloc == MigAllocation(0, 0, "GPU-…", "1g.10gb", Placement(6, 1), "MIG-…", 13, 0)
    assert alloc.realized
    assert encode_mig_allocations([alloc]) == SPEC


def test_unrealized_allocation_omits_runtime_ids() -> None:
    alloc = MigAllocation(1, 2, "GPU-a", "3g.40gb", Placement(0, 4))
    text = encode_mig_allocations([alloc])
    assert text == ('[{"containerIndex":1,"deviceIndex":2,"gpuUUID":"GPU-a","profile":"3g.40gb",'
                    '"placement":{"start":0,"size":4}}]')
    assert decode_mig_allocations(text) == (alloc,)
    assert not alloc.realized


def test_empty_values() -> None:
    assert decode_mig_allocations("") == ()
    assert decode_mig_allocations("null") == ()
    assert decode_mig_allocations("[]") == ()
    assert encode_mig_allocations([]) == ""


def test_keys_case_insensitive_and_empty_mig_uuid_is_unset() -> None:
    text = ('[{"CONTAINERINDEX":0,"deviceindex":1,"GpuUuid":"g","Profile":"p",'
            '"Placement":{"Start":1,"SIZE":2},"migUUID":""}]')
    assert decode_mig_allocations(text) == (MigAllocation(0, 1, "g", "p", Placement(1, 2)),)


_BASE = '"gpuUUID":"g","profile":"p","placement":{"start":0,"size":1}'


@pytest.mark.parametrize(("text", "message"), [
    ("[", "invalid JSON"),
    ("{}", "expected a JSON array"),
    ("[1]", "MIG allocation 0: must be an object"),
    (f'[{{"containerIndex":-1,"deviceIndex":0,{_BASE}}}]', "MIG allocation 0 is incomplete"),
    (f'[{{"containerIndex":0,"deviceIndex":-2,{_BASE}}}]', "MIG allocation 0 is incomplete"),
    ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"","profile":"p","placement":{"size":1}}]', "empty gpuUUID"),
    ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","placement":{"size":1}}]', "empty profile"),
    ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"p","placement":{"start":3}}]', "size is 0"),
    ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"p"}]', "size is 0"),
    (f'[{{"containerIndex":0,"deviceIndex":0,{_BASE},"migUUID":"MIG-x"}}]', "partial runtime identity"),
    (f'[{{"containerIndex":0,"deviceIndex":0,{_BASE},"gpuInstanceID":1,"computeInstanceID":0}}]',
     "partial runtime identity"),
    (f'[{{"containerIndex":0,"deviceIndex":0,{_BASE}}},{{"containerIndex":0,"deviceIndex":0,{_BASE}}}]',
     "duplicate MIG allocation for container 0 device 0"),
    (f'[{{"containerIndex":"0","deviceIndex":0,{_BASE}}}]', 'field "containerIndex" must be an integer'),
    (f'[{{"containerIndex":0,"deviceIndex":0,{_BASE},"gpuInstanceID":-1,"migUUID":"m","computeInstanceID":0}}]',
     'field "gpuInstanceID" must not be negative'),
    ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"p","placement":[1]}]',
     'field "placement" must be an object'),
    (f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"g","profile":"p","placement":{{"size":{UINT32_MAX + 1}}}}}]',
     "out of range for uint32"),
    ('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":7,"profile":"p","placement":{"size":1}}]',
     'field "gpuUUID" must be a string'),
])
def test_rejects(text: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        decode_mig_allocations(text, key=KEY)
    assert str(info.value).startswith(f"{KEY}: ")
    assert message in str(info.value)


def test_encoder_validates() -> None:
    with pytest.raises(WireFormatError, match="partial runtime identity"):
        encode_mig_allocations([MigAllocation(0, 0, "g", "p", Placement(0, 1), mig_uuid="m")])
    with pytest.raises(WireFormatError, match="duplicate"):
        encode_mig_allocations([MigAllocation(0, 0, "g", "p", Placement(0, 1))] * 2)


def test_allocations_from_devices() -> None:
    mig = ContainerDevice("GPU-a", "NVIDIA", 10240, 14, custom_info={
        MIG_PROFILE_CUSTOM_INFO: "1g.10gb", MIG_PLACEMENT_CUSTOM_INFO: Placement(6, 1)})
    plain = ContainerDevice("GPU-b", "NVIDIA", 1000, 0)
    zero = ContainerDevice("GPU-c", "NVIDIA", 1, 0, custom_info={
        MIG_PROFILE_CUSTOM_INFO: "1g.10gb", MIG_PLACEMENT_CUSTOM_INFO: Placement(0, 0)})
    assert mig_allocations_from_devices(((), (plain, mig), (zero,))) == (
        MigAllocation(1, 1, "GPU-a", "1g.10gb", Placement(6, 1)),)


_u32 = st.integers(0, UINT32_MAX)
_ids = st.one_of(st.none(), st.tuples(st.text(min_size=1), _u32, _u32))


@st.composite
def _allocations(draw: st.DrawFn) -> list[MigAllocation]:
    pairs = draw(st.lists(st.tuples(st.integers(0, 64), st.integers(0, 16)), unique=True, max_size=5))
    out = []
    for ci, di in pairs:
        runtime = draw(_ids)
        mig_uuid, gi, cid = runtime if runtime else (None, None, None)
        out.append(MigAllocation(ci, di, draw(st.text(min_size=1)), draw(st.text(min_size=1)),
                                 Placement(draw(_u32), draw(st.integers(1, UINT32_MAX))), mig_uuid, gi, cid))
    return out


@given(_allocations())
def test_round_trip(items: list[MigAllocation]) -> None:
    assert decode_mig_allocations(encode_mig_allocations(items)) == tuple(items)
