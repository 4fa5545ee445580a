"""Node registration: JSON and legacy forms, pair scores (spec §3.2, §3.7, Appendix C)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo, MigProfile, Placement
from hami_core.wire import (
    NODE_NVIDIA_REGISTER,
    NODE_NVIDIA_SCORE,
    decode_node_devices,
    decode_node_devices_json,
    decode_node_devices_legacy,
    decode_pair_scores,
    encode_node_devices_json,
    encode_node_devices_legacy,
    encode_pair_scores,
)
from hami_core.wire.common import INT32_MAX, INT64_MAX, INT64_MIN, UINT32_MAX, UINT64_MAX

KEY = NODE_NVIDIA_REGISTER
LEGACY_KEY = "hami.io/node-dcu-register"

SPEC_JSON = (
    '[{"id":"GPU-0a1b2c3d-1111-2222-3333-444455556666","count":10,"devmem":24576,"devcore":100,'
    '"type":"NVIDIA A10","mode":"hami-core","health":true},{"id":"GPU-7e8f9a0b-aaaa-bbbb-cccc-ddddeeeeffff",'
    '"index":1,"count":10,"devmem":24576,"devcore":100,"type":"NVIDIA A10","numa":1,"mode":"hami-core",'
    '"health":true}]'
)
SPEC_DEVICES = [
    DeviceInfo(id="GPU-0a1b2c3d-1111-2222-3333-444455556666", count=10, devmem=24576, devcore=100,
               type="NVIDIA A10", mode="hami-core", health=True),
    DeviceInfo(id="GPU-7e8f9a0b-aaaa-bbbb-cccc-ddddeeeeffff", index=1, count=10, devmem=24576, devcore=100,
               type="NVIDIA A10", numa=1, mode="hami-core", health=True),
]


# -- JSON ----------------------------------------------------------------------------------------------


def test_spec_json_example_decodes() -> None:
    assert decode_node_devices_json(SPEC_JSON, key=KEY) == SPEC_DEVICES


def test_spec_json_example_encodes_exactly() -> None:
    assert encode_node_devices_json(SPEC_DEVICES) == SPEC_JSON


def test_vendors_a3_json_example_round_trips() -> None:
    text = ('[{"id":"GPU-0","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB",'
            '"mode":"hami-core","health":true}]')
    assert encode_node_devices_json(decode_node_devices_json(text)) == text


def test_appendix_c_json_key_order_irrelevant() -> None:
    text = '[{"index":1,"id":"id-1","count":1,"devmem":1024,"devcore":10,"type":"type","numa":0,"health":true}]'
    assert decode_node_devices_json(text) == [
        DeviceInfo(id="id-1", index=1, count=1, devmem=1024, devcore=10, type="type", numa=0, health=True)]


def test_json_missing_keys_default() -> None:
    (dev,) = decode_node_devices_json('[{"id":"GPU-x"}]')
    assert dev == DeviceInfo(id="GPU-x")
    assert (dev.index, dev.numa, dev.mode, dev.health, dev.count) == (0, 0, "", False, 0)


def test_json_null_values_default_like_go() -> None:
    (dev,) = decode_node_devices_json('[{"id":"GPU-x","count":null,"type":null,"health":null,"migProfiles":null}]')
    assert dev == DeviceInfo(id="GPU-x")


def test_json_keys_case_insensitive() -> None:
    text = '[{"ID":"npu-0","Count":4,"Devmem":65536,"DEVCORE":100,"Type":"Ascend910B3","Health":true,"NUMA":1}]'
    assert decode_node_devices_json(text) == [
        DeviceInfo(id="npu-0", count=4, devmem=65536, devcore=100, type="Ascend910B3", health=True, numa=1)]


def test_json_duplicate_keys_last_wins() -> None:
    (dev,) = decode_node_devices_json('[{"id":"a","ID":"b","count":1,"Count":2}]')
    assert (dev.id, dev.count) == ("b", 2)


def test_json_mig_profiles_and_custominfo() -> None:
    profile = '{"name":"1g.5gb","memoryMB":4864,"core":15,"sliceCount":1,"placements":[{"start":6,"size":1}]}'
    text = (f'[{{"id":"GPU-m","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100","mode":"mig",'
            f'"migProfiles":[{profile}],"health":true,"custominfo":{{"vnpu":"x","n":[1,2]}},"devicevendor":"v"}}]')
    (dev,) = decode_node_devices_json(text)
    assert dev.mig_profiles == (MigProfile("1g.5gb", 4864, 15, 1, (Placement(6, 1),)),)
    assert dev.custom_info == {"vnpu": "x", "n": [1, 2]}
    encoded = encode_node_devices_json([dev])
    assert profile in encoded
    assert "custominfo" not in encoded and "devicevendor" not in encoded
    assert encoded.index('"mode"') < encoded.index('"migProfiles"') < encoded.index('"health"')


def test_json_mig_profile_null_placements() -> None:
    (dev,) = decode_node_devices_json('[{"id":"g","migProfiles":[{"name":"7g.80gb","placements":null}]}]')
    assert dev.mig_profiles == (MigProfile("7g.80gb", 0, 0, 0, ()),)


def test_json_null_and_empty_list() -> None:
    assert decode_node_devices_json("null") == []
    assert decode_node_devices_json(" [ ] ") == []
    assert encode_node_devices_json([]) == "[]"


def test_json_encoder_escapes_like_go() -> None:
    text = encode_node_devices_json([DeviceInfo(id="a<b>&c", type="Ä\u2028")])
    assert text == '[{"id":"a\\u003cb\\u003e\\u0026c","type":"Ä\\u2028"}]'
    assert decode_node_devices_json(text)[0].id == "a<b>&c"


@pytest.mark.parametrize(("text", "message"), [
    ("", "invalid JSON"),
    ("[", "invalid JSON"),
    ("[{]", "invalid JSON"),
    ('[{"id":"a","count":NaN}]', "invalid JSON"),
    ("{}", "expected a JSON array"),
    ('"x"', "expected a JSON array"),
    ("[1]", "device 0: must be an object"),
    ('[{"id":"a"},null]', "device 1: must be an object"),
    ('[{"id":"a"},{"id":"b"},{"id":"c","count":"x"}]', 'device 2: field "count" must be an integer, got "x"'),
    ('[{"id":"a","count":1.5}]', 'field "count" must be an integer, got 1.5'),
    ('[{"id":"a","devmem":1.0}]', 'field "devmem" must be an integer, got 1.0'),
    ('[{"id":"a","devcore":true}]', 'field "devcore" must be an integer, got true'),
    ('[{"id":"a","count":-1}]', 'field "count" must not be negative, got -1'),
    ('[{"id":"a","devmem":-5}]', 'field "devmem" must not be negative'),
    ('[{"id":"a","devcore":-5}]', 'field "devcore" must not be negative'),
    ('[{"id":"a","index":-1}]', 'field "index" must not be negative'),
    (f'[{{"id":"a","count":{INT32_MAX + 1}}}]', 'field "count" out of range for int32'),
    (f'[{{"id":"a","numa":{INT64_MAX + 1}}}]', 'field "numa" out of range for int'),
    ('[{"id":"a","numa":"0"}]', 'field "numa" must be an integer'),
    ('[{"id":"a","health":"true"}]', 'field "health" must be a boolean'),
    ('[{"id":"a","health":1}]', 'field "health" must be a boolean'),
    ('[{"id":7}]', 'field "id" must be a string'),
    ('[{"count":1}]', 'device 0: field "id" must be a non-empty string'),
    ('[{"id":"a","type":["x"]}]', 'field "type" must be a string'),
    ('[{"id":"a","mode":1}]', 'field "mode" must be a string'),
    ('[{"id":"a","devicevendor":1}]', 'field "devicevendor" must be a string'),
    ('[{"id":"a","custominfo":[1]}]', 'field "custominfo" must be an object'),
    ('[{"id":"a","migProfiles":{}}]', 'field "migProfiles" must be an array'),
    ('[{"id":"a","migProfiles":[1]}]', "migProfiles 0: must be an object"),
    ('[{"id":"a","migProfiles":[{"name":1}]}]', 'migProfiles 0: field "name" must be a string'),
    ('[{"id":"a","migProfiles":[{"sliceCount":-1}]}]', 'field "sliceCount" must not be negative'),
    ('[{"id":"a","migProfiles":[{"placements":[{"start":"x"}]}]}]', 'placement 0: field "start" must be'),
    ('[{"id":"a","migProfiles":[{"placements":[7]}]}]', "placement 0: must be an object"),
    (f'[{{"id":"a","migProfiles":[{{"placements":[{{"size":{UINT32_MAX + 1}}}]}}]}}]', "out of range for uint32"),
])
def test_json_rejects(text: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        decode_node_devices_json(text, key=KEY)
    assert str(info.value).startswith(f"{KEY}: ")
    assert message in str(info.value)


def test_json_error_without_key_has_no_prefix() -> None:
    with pytest.raises(WireFormatError, match=r'^device 0: field "count"'):
        decode_node_devices_json('[{"id":"a","count":"x"}]')


# -- legacy --------------------------------------------------------------------------------------------


def test_appendix_c_legacy_7_fields() -> None:
    text = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true:"
    assert decode_node_devices_legacy(text, key=LEGACY_KEY) == [
        DeviceInfo(id="GPU-ebe7c3f7-303d-558d-435e-99a160631fe4", count=10, devmem=7680, devcore=100,
                   type="NVIDIA-Tesla P4", numa=0, health=True, index=0, mode="hami-core")]


def test_appendix_c_legacy_9_fields() -> None:
    text = "GPU-ebe7c3f7-303d-558d-435e-99a160631fe4,10,7680,100,NVIDIA-Tesla P4,0,true,1,hami-core:"
    (dev,) = decode_node_devices_legacy(text)
    assert (dev.index, dev.mode, dev.health, dev.type) == (1, "hami-core", True, "NVIDIA-Tesla P4")


def test_spec_legacy_examples() -> None:
    text = ("GPU-0a1b…6666,10,24576,100,NVIDIA A10,0,true,0,hami-core:"
            "GPU-7e8f…ffff,10,24576,100,NVIDIA A10,1,true,1,hami-core:")
    devices = decode_node_devices_legacy(text)
    assert [d.id for d in devices] == ["GPU-0a1b…6666", "GPU-7e8f…ffff"]
    assert [(d.index, d.numa) for d in devices] == [(0, 0), (1, 1)]
    assert encode_node_devices_legacy(devices) == text
    (p4,) = decode_node_devices_legacy("GPU-0a1b…6666,10,24576,100,NVIDIA-Tesla P4,0,true:")
    assert (p4.type, p4.index, p4.mode) == ("NVIDIA-Tesla P4", 0, "hami-core")


def test_vendors_a3_dcu_example_round_trips() -> None:
    text = "DCU-0,4,16384,100,DCU-K100_AI,0,true,0,hami-core:DCU-1,4,16384,100,DCU-K100_AI,1,true,1,hami-core:"
    assert encode_node_devices_legacy(decode_node_devices_legacy(text)) == text


def test_spec_json_devices_encode_legacy() -> None:
    assert encode_node_devices_legacy(SPEC_DEVICES) == (
        "GPU-0a1b2c3d-1111-2222-3333-444455556666,10,24576,100,NVIDIA A10,0,true,0,hami-core:"
        "GPU-7e8f9a0b-aaaa-bbbb-cccc-ddddeeeeffff,10,24576,100,NVIDIA A10,1,true,1,hami-core:")


@pytest.mark.parametrize("text", [":", "::"])
def test_legacy_only_separators_is_empty(text: str) -> None:
    assert decode_node_devices_legacy(text) == []


def test_legacy_go_bools_and_signs() -> None:
    (dev,) = decode_node_devices_legacy("a,+3,-0,10,T,-1,F,+2,mig::")
    assert (dev.count, dev.devmem, dev.health, dev.numa, dev.index, dev.mode) == (3, 0, False, -1, 2, "mig")
    (dev,) = decode_node_devices_legacy("a,1,1,1,t,0,1,0,:")
    assert (dev.health, dev.mode) == (True, "")


@pytest.mark.parametrize(("text", "message"), [
    ("", "node annotation missing device separator"),
    (",", "node annotation missing device separator"),
    ("a", "node annotation missing device separator"),
    (",:", "unexpected field count 2 in node annotation"),
    ("a,1,2,3,t,0,true,0:", "unexpected field count 8 in node annotation"),
    ("a,1,2,3,t,0,true,0,m,x:", "unexpected field count 10 in node annotation"),
    ("garbage:", 'malformed node annotation segment: "garbage"'),
    ("ok,1,1,1,t,0,true:garbage:", 'malformed node annotation segment: "garbage"'),
    ("a,notanint,1,1,t,0,true:", 'invalid count field: strconv.ParseInt: parsing "notanint": invalid syntax'),
    (f"a,{INT32_MAX + 1},1,1,t,0,true:", "invalid count field: strconv.ParseInt: parsing"),
    ("a,1,x,1,t,0,true:", "invalid memory field"),
    ("a,1,1,1.5,t,0,true:", "invalid core field"),
    ("a,1,1,1,t,zero,true:", 'invalid numa field: strconv.Atoi: parsing "zero": invalid syntax'),
    ("a,1,1,1,t,0,yes:", 'invalid health field: strconv.ParseBool: parsing "yes": invalid syntax'),
    ("a,1,1,1,t,0,true,x,hami-core:", "invalid index field"),
    ("a,1,1,1,t,0,true,-1,hami-core:", "index field must not be negative: -1"),
    ("a,-1,1,1,t,0,true:", "count field must not be negative: -1"),
    ("a,1,-1,1,t,0,true:", "memory field must not be negative: -1"),
    ("a,1,1,-1,t,0,true:", "core field must not be negative: -1"),
    (",1,1,1,t,0,true:", "empty device id"),
])
def test_legacy_rejects(text: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        decode_node_devices_legacy(text, key=LEGACY_KEY)
    assert str(info.value) .startswith(f"{LEGACY_KEY}: ")
    assert message in str(info.value)


def test_legacy_out_of_range_message() -> None:
    with pytest.raises(WireFormatError, match="value out of range"):
        decode_node_devices_legacy(f"a,{INT32_MAX + 1},1,1,t,0,true:")


@pytest.mark.parametrize("field", ["id", "type", "mode"])
@pytest.mark.parametrize("bad", [",", ":"])
def test_legacy_encoder_refuses_separators(field: str, bad: str) -> None:
    dev = DeviceInfo(**{"id": "a", field: f"x{bad}y"})  # type: ignore[arg-type]
    with pytest.raises(WireFormatError, match=field):
        encode_node_devices_legacy([dev])


def test_legacy_encoder_empty_is_empty_string() -> None:
    assert encode_node_devices_legacy([]) == ""


# -- auto-detecting decoder ----------------------------------------------------------------------------


def test_decode_node_devices_detects_form() -> None:
    assert decode_node_devices(SPEC_JSON) == SPEC_DEVICES
    assert decode_node_devices("  \n" + SPEC_JSON) == SPEC_DEVICES
    assert decode_node_devices(encode_node_devices_legacy(SPEC_DEVICES)) == SPEC_DEVICES
    with pytest.raises(WireFormatError, match=f"^{KEY}: invalid JSON"):
        decode_node_devices("[oops", key=KEY)
    with pytest.raises(WireFormatError, match=f"^{KEY}: node annotation missing device separator"):
        decode_node_devices("{}", key=KEY)


# -- pair scores ---------------------------------------------------------------------------------------


def test_spec_pair_scores_example() -> None:
    text = '[{"uuid":"GPU-a","score":{"GPU-b":100}},{"uuid":"GPU-b","score":{"GPU-a":100}}]'
    scores = decode_pair_scores(text, key=NODE_NVIDIA_SCORE)
    assert scores == {"GPU-a": {"GPU-b": 100}, "GPU-b": {"GPU-a": 100}}
    assert encode_pair_scores(scores) == text


def test_pair_scores_go_semantics() -> None:
    assert decode_pair_scores("null") == {}
    assert decode_pair_scores("[]") == {}
    assert decode_pair_scores('[{"UUID":"g","Score":{"h":1}},{"uuid":"g"}]') == {"g": {}}
    assert encode_pair_scores({"g": {"z": 1, "a": 2}, "": {}}) == '[{"uuid":"g","score":{"a":2,"z":1}},{}]'


@pytest.mark.parametrize(("text", "message"), [
    ("", "invalid JSON"),
    ("{", "invalid JSON"),
    ("{}", "expected a JSON array"),
    ("[1]", "entry 0: must be an object"),
    ('[{"uuid":1}]', 'entry 0: field "uuid" must be a string'),
    ('[{"uuid":"a","score":[]}]', 'field "score" must be an object'),
    ('[{"uuid":"a","score":{"b":"1"}}]', 'score for "b" must be an integer, got "1"'),
    ('[{"uuid":"a","score":{"b":1.5}}]', 'score for "b" must be an integer, got 1.5'),
])
def test_pair_scores_reject(text: str, message: str) -> None:
    with pytest.raises(WireFormatError) as info:
        decode_pair_scores(text, key=NODE_NVIDIA_SCORE)
    assert str(info.value).startswith(f"{NODE_NVIDIA_SCORE}: ")
    assert message in str(info.value)


# -- property tests ------------------------------------------------------------------------------------

_int32 = st.integers(0, INT32_MAX)
_placements = st.builds(Placement, st.integers(0, UINT32_MAX), st.integers(0, UINT32_MAX))
_profiles = st.builds(MigProfile, st.text(), st.integers(-(2**31), INT32_MAX), st.integers(-(2**31), INT32_MAX),
                      st.integers(0, UINT32_MAX), st.lists(_placements, max_size=3).map(tuple))
_json_devices = st.builds(
    DeviceInfo, id=st.text(min_size=1), index=st.integers(0, UINT64_MAX), count=_int32, devmem=_int32,
    devcore=_int32, type=st.text(), numa=st.integers(INT64_MIN, INT64_MAX), mode=st.text(), health=st.booleans(),
    mig_profiles=st.lists(_profiles, max_size=2).map(tuple))
_plain = st.text(st.characters(blacklist_characters=",:", blacklist_categories=("Cs",)))
_legacy_devices = st.builds(
    DeviceInfo, id=_plain.filter(bool), index=st.integers(0, INT64_MAX), count=_int32, devmem=_int32,
    devcore=_int32, type=_plain, numa=st.integers(INT64_MIN, INT64_MAX), mode=_plain, health=st.booleans())


@given(st.lists(_json_devices, max_size=4))
def test_json_round_trip(devices: list[DeviceInfo]) -> None:
    text = encode_node_devices_json(devices)
    assert decode_node_devices_json(text) == devices
    assert decode_node_devices(text) == devices
    assert json.loads(text) is not None


@given(st.lists(_legacy_devices, min_size=1, max_size=4))
def test_legacy_round_trip(devices: list[DeviceInfo]) -> None:
    assert decode_node_devices_legacy(encode_node_devices_legacy(devices)) == devices


@given(st.dictionaries(st.text(min_size=1), st.dictionaries(st.text(), st.integers(INT64_MIN, INT64_MAX))))
def test_pair_scores_round_trip(scores: dict[str, dict[str, int]]) -> None:
    assert decode_pair_scores(encode_pair_scores(scores)) == scores
