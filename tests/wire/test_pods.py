"""Pod assignment strings (spec §3.4, Appendix C)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, PodSingleDevice
from hami_core.wire import (
    VGPU_DEVICES_ALLOCATED,
    decode_container_devices,
    decode_pod_single_device,
    encode_container_devices,
    encode_pod_single_device,
    padded,
    strip_padding,
)
from hami_core.wire.common import INT32_MAX, INT32_MIN

KEY = VGPU_DEVICES_ALLOCATED


def dev(uuid: str, mem: int, cores: int, type_: str = "NVIDIA") -> ContainerDevice:
    return ContainerDevice(uuid=uuid, type=type_, usedmem=mem, usedcores=cores)


def test_appendix_c_pod_string() -> None:
    text = ("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76,NVIDIA,500,3:;"
            "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,NVIDIA,500,3:;")
    assert decode_pod_single_device(text, key=KEY) == (
        (dev("GPU-8dcd427f-483b-b48f-d7e5-75fb19a52b76", 500, 3),),
        (dev("GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", 500, 3),),
        (),
    )


def test_decoded_devices_have_unset_idx() -> None:
    ((d,),) = strip_padding(decode_pod_single_device("GPU-a,NVIDIA,1,2:;"))
    assert (d.idx, d.slots, d.custom_info) == (-1, 0, None)


def test_appendix_c_too_few_fields() -> None:
    with pytest.raises(WireFormatError) as info:
        decode_pod_single_device("uuid,type,100:;", key=KEY)
    assert str(info.value).startswith(f"{KEY}: pod annotation format error")
    assert '"uuid,type,100"' in str(info.value)


def test_appendix_c_encodings() -> None:
    a = ContainerDevice(uuid="A", type="Type1", usedmem=1000, usedcores=30, idx=3)
    b = ContainerDevice(uuid="B", type="Type1", usedmem=1000, usedcores=30)
    assert encode_pod_single_device(((a,),)) == "A,Type1,1000,30:;"
    assert encode_pod_single_device(((a,), (a,))) == "A,Type1,1000,30:;A,Type1,1000,30:;"
    assert encode_pod_single_device(((a, b),)) == "A,Type1,1000,30:B,Type1,1000,30:;"


def test_spec_3_4_example() -> None:
    text = "GPU-0a1b…6666,NVIDIA,3000,30:;GPU-0a1b…6666,NVIDIA,5000,0:GPU-7e8f…ffff,NVIDIA,5000,0:;"
    psd = ((dev("GPU-0a1b…6666", 3000, 30),),
           (dev("GPU-0a1b…6666", 5000, 0), dev("GPU-7e8f…ffff", 5000, 0)))
    assert encode_pod_single_device(psd) == text
    assert decode_pod_single_device(text) == (*psd, ())


def test_spec_3_4_consumption_grows_by_one_separator() -> None:
    decoded = decode_pod_single_device(";GPU-7e8f…,NVIDIA,5000,0:;")
    assert decoded == ((), (dev("GPU-7e8f…", 5000, 0),), ())
    consumed = tuple(() for _ in decoded)
    assert encode_pod_single_device(consumed) == ";;;"


def test_spec_3_4_padding_quirk_forms() -> None:
    head = decode_pod_single_device("GPU-x,NVIDIA,1000,0:;")
    old = decode_pod_single_device(";GPU-x,NVIDIA,1000,0:;")
    assert head == ((dev("GPU-x", 1000, 0),), ())
    assert old == ((), (dev("GPU-x", 1000, 0),), ())
    assert padded(old, 2) == ((), (dev("GPU-x", 1000, 0),))
    assert encode_pod_single_device(padded(old, 2)) == ";GPU-x,NVIDIA,1000,0:;"


def test_padding_helpers() -> None:
    assert strip_padding(((), (dev("a", 1, 1),), (), ())) == ((), (dev("a", 1, 1),))
    assert strip_padding(((), ())) == ()
    assert padded((), 3) == ((), (), ())
    with pytest.raises(WireFormatError, match="container 1"):
        padded(((), (dev("a", 1, 1),)), 1)


def test_empty_and_separator_only_values() -> None:
    assert decode_pod_single_device("") == ((),)
    assert decode_pod_single_device(";") == ((), ())
    assert decode_container_devices("") == ()
    assert decode_container_devices(":::") == ()
    assert encode_container_devices([]) == ""
    assert encode_pod_single_device(()) == ""


def test_empty_pieces_are_skipped_and_extra_fields_ignored() -> None:
    assert decode_container_devices(":GPU-a,NVIDIA,10,20,extra,more::") == (dev("GPU-a", 10, 20),)


def test_piece_without_comma_is_skipped_as_in_hami() -> None:
    """HAMi's ``DecodeContainerDevices`` only reads pieces holding a comma: ``junk`` names no device, so skipping
    it loses no booking."""
    assert decode_container_devices("junk:GPU-a,NVIDIA,10,20:  :") == (dev("GPU-a", 10, 20),)
    assert decode_pod_single_device("junk;GPU-a,NVIDIA,10,20:;") == ((), (dev("GPU-a", 10, 20),), ())


@pytest.mark.parametrize(("text", "message"), [
    ("a,b:", "pod annotation format error"),
    ("a,b,c:", "pod annotation format error"),
    ("a,NVIDIA,x,1:", 'invalid memory field: strconv.ParseInt: parsing "x": invalid syntax'),
    ("a,NVIDIA,1,1.5:", 'invalid core field: strconv.ParseInt: parsing "1.5": invalid syntax'),
    ("a,NVIDIA, 1,1:", "invalid memory field"),
    (f"a,NVIDIA,{INT32_MAX + 1},1:", "invalid memory field: strconv.ParseInt: parsing"),
    (f"a,NVIDIA,1,{INT32_MIN - 1}:", "value out of range"),
])
def test_container_rejects(text: str, message: str) -> None:
    for decode in (decode_container_devices, decode_pod_single_device):
        with pytest.raises(WireFormatError) as info:
            decode(text, key=KEY)
        assert str(info.value).startswith(f"{KEY}: ")
        assert message in str(info.value)


def test_int32_bounds_accepted() -> None:
    assert decode_container_devices(f"a,NVIDIA,{INT32_MAX},0:") == (dev("a", INT32_MAX, 0),)


@pytest.mark.parametrize(("value", "want"), [
    ("a,NVIDIA,-1,0:", dev("a", -1, 0)), ("a,NVIDIA,0,-5:", dev("a", 0, -5)),
    (",NVIDIA,1,1:", dev("", 1, 1)), ("a,,1,1:", dev("a", 1, 1, "")),
    (f"a,NVIDIA,{INT32_MIN},{INT32_MIN}:", dev("a", INT32_MIN, INT32_MIN)),
])
def test_negative_and_empty_fields_round_trip_as_in_hami(value: str, want: ContainerDevice) -> None:
    """HAMi v2.10.0 parses mem and cores with ``strconv.ParseInt(s, 10, 32)`` and keeps empty IDs, and writes
    them back unchanged: a pod HAMi's scheduler placed with ``nvidia.com/gpucores: -1`` is read as HAMi booked it
    (refusing it would quarantine the node for one tenant's pod)."""
    (got,) = decode_container_devices(value, key="hami.io/vgpu-devices-allocated")
    assert got == want
    assert encode_container_devices([got]) == value


@pytest.mark.parametrize("bad", [dev("a,b", 1, 1), dev("a:b", 1, 1), dev("a", 1, 1, "NV;IDIA"),
                                 dev("a", INT32_MAX + 1, 1), dev("a", 1, INT32_MIN - 1), dev("a", True, 1)])
def test_encoder_refuses_unencodable(bad: ContainerDevice) -> None:
    """A separator inside a UUID or type would make the string decode to another booking (HAMi writes it
    anyway): refused. So is a number Go's int32 cannot hold."""
    with pytest.raises(WireFormatError):
        encode_container_devices([bad])


_text = st.text(st.characters(blacklist_characters=",:;", blacklist_categories=("Cs",)))
_devices = st.builds(ContainerDevice, uuid=_text, type=_text, usedmem=st.integers(INT32_MIN, INT32_MAX),
                     usedcores=st.integers(INT32_MIN, INT32_MAX))
_psd = st.lists(st.lists(_devices, max_size=3).map(tuple), max_size=4).map(tuple)


@given(_psd)
def test_pod_round_trip(psd: PodSingleDevice) -> None:
    text = encode_pod_single_device(psd)
    decoded = decode_pod_single_device(text)
    assert decoded == (*psd, ())
    assert encode_pod_single_device(decoded) == text + ";"
    assert padded(decoded, len(psd)) == psd
