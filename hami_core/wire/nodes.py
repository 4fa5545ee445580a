"""Node device registration annotations (spec §3.2, §3.7; vendors A.3): JSON and legacy colon/comma forms."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import DeviceInfo, MigProfile, Placement
from hami_core.wire import gojson as _json
from hami_core.wire.common import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    UINT32_MAX,
    UINT64_MAX,
    go_quote,
    parse_go_bool,
    parse_go_int,
    wire_error,
)

__all__ = [
    "decode_node_devices",
    "decode_node_devices_json",
    "decode_node_devices_legacy",
    "decode_pair_scores",
    "encode_node_devices_json",
    "encode_node_devices_legacy",
    "encode_pair_scores",
]

#: Mode given to 7-field legacy devices.
LEGACY_DEFAULT_MODE = "hami-core"


def _where(key: str, what: str) -> str:
    return f"{key}: {what}" if key else what


# --------------------------------------------------------------------------------------------------
# JSON form
# --------------------------------------------------------------------------------------------------


def _decode_placement(raw: Any, where: str) -> Placement:
    if not isinstance(raw, dict):
        raise wire_error(where, f"must be an object, got {_json.show(raw)}")
    obj = _json.fold(raw)
    return Placement(start=_json.get_int(obj, "start", where, 0, UINT32_MAX, "uint32"),
                     size=_json.get_int(obj, "size", where, 0, UINT32_MAX, "uint32"))


def _decode_mig_profile(raw: Any, where: str) -> MigProfile:
    if not isinstance(raw, dict):
        raise wire_error(where, f"must be an object, got {_json.show(raw)}")
    obj = _json.fold(raw)
    placements = tuple(_decode_placement(p, f"{where}: placement {j}")
                       for j, p in enumerate(_json.get_list(obj, "placements", where)))
    return MigProfile(name=_json.get_str(obj, "name", where),
                      memory_mb=_json.get_int(obj, "memoryMB", where, INT32_MIN, INT32_MAX, "int32"),
                      core=_json.get_int(obj, "core", where, INT32_MIN, INT32_MAX, "int32"),
                      slice_count=_json.get_int(obj, "sliceCount", where, 0, UINT32_MAX, "uint32"),
                      placements=placements)


def _decode_device(raw: Any, where: str) -> DeviceInfo:
    if not isinstance(raw, dict):
        raise wire_error(where, f"must be an object, got {_json.show(raw)}")
    obj = _json.fold(raw)
    dev_id = _json.get_str(obj, "id", where)
    if not dev_id:
        raise wire_error(where, 'field "id" must be a non-empty string')
    _json.get_str(obj, "devicevendor", where)  # type-checked like Go, not kept
    profiles = tuple(_decode_mig_profile(p, f"{where}: migProfiles {j}")
                     for j, p in enumerate(_json.get_list(obj, "migProfiles", where)))
    return DeviceInfo(
        id=dev_id,
        index=_json.get_int(obj, "index", where, 0, UINT64_MAX, "uint"),
        count=_json.get_int(obj, "count", where, 0, INT32_MAX, "int32"),
        devmem=_json.get_int(obj, "devmem", where, 0, INT32_MAX, "int32"),
        devcore=_json.get_int(obj, "devcore", where, 0, INT32_MAX, "int32"),
        type=_json.get_str(obj, "type", where),
        numa=_json.get_int(obj, "numa", where, INT64_MIN, INT64_MAX, "int"),
        mode=_json.get_str(obj, "mode", where),
        health=_json.get_bool(obj, "health", where),
        mig_profiles=profiles,
        custom_info=_json.get_object(obj, "custominfo", where),
    )


def decode_node_devices_json(value: str, *, key: str = "") -> list[DeviceInfo]:
    """Decode a JSON node registration (``hami.io/node-nvidia-register`` and other JSON vendors).

    Format: a JSON array of DeviceInfo objects, keys ``id, index, count, devmem, devcore, type, numa,
    mode, migProfiles, health, custominfo`` matched case-insensitively (Go), missing or null keys
    default to 0/False/"". ``null`` decodes to ``[]`` like Go. Errors name the device position
    (0-based): ``<key>: device 2: field "count" must be an integer, got "x"``.
    """
    data = _json.loads(value, key)
    if data is None:
        return []
    if not isinstance(data, list):
        raise wire_error(key, f"expected a JSON array of devices, got {_json.show(data)}")
    return [_decode_device(item, _where(key, f"device {i}")) for i, item in enumerate(data)]


def _check_int(value: int, lo: int, hi: int, what: str) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise WireFormatError(f"{what} must be an integer in [{lo}, {hi}], got {value!r}")
    return value


def _encode_profile(p: MigProfile) -> dict[str, Any]:
    return {
        "name": p.name,
        "memoryMB": _check_int(p.memory_mb, INT32_MIN, INT32_MAX, "MigProfile.memory_mb"),
        "core": _check_int(p.core, INT32_MIN, INT32_MAX, "MigProfile.core"),
        "sliceCount": _check_int(p.slice_count, 0, UINT32_MAX, "MigProfile.slice_count"),
        "placements": [{"start": _check_int(pl.start, 0, UINT32_MAX, "Placement.start"),
                        "size": _check_int(pl.size, 0, UINT32_MAX, "Placement.size")} for pl in p.placements],
    }


def _encode_device(d: DeviceInfo) -> dict[str, Any]:
    obj: dict[str, Any] = {"id": d.id}
    for name, value, lo, hi in (("index", d.index, 0, UINT64_MAX), ("count", d.count, 0, INT32_MAX),
                                ("devmem", d.devmem, 0, INT32_MAX), ("devcore", d.devcore, 0, INT32_MAX)):
        if _check_int(value, lo, hi, f"DeviceInfo {d.id!r} {name}"):
            obj[name] = value
    if d.type:
        obj["type"] = d.type
    if _check_int(d.numa, INT64_MIN, INT64_MAX, f"DeviceInfo {d.id!r} numa"):
        obj["numa"] = d.numa
    if d.mode:
        obj["mode"] = d.mode
    if d.mig_profiles:
        obj["migProfiles"] = [_encode_profile(p) for p in d.mig_profiles]
    if d.health:
        obj["health"] = True
    return obj


def encode_node_devices_json(devices: Iterable[DeviceInfo]) -> str:
    """Encode devices like HAMi ``MarshalNodeDevices``.

    Format: compact JSON array; per device keys in Go field order ``id, index, count, devmem, devcore,
    type, numa, mode, migProfiles, health`` with ``omitempty`` (zero, ``""``, ``false`` and empty lists
    are left out); ``custominfo`` is never written. MIG profiles always carry ``name, memoryMB, core,
    sliceCount, placements``.
    """
    return _json.dumps([_encode_device(d) for d in devices])


# --------------------------------------------------------------------------------------------------
# Legacy colon/comma form
# --------------------------------------------------------------------------------------------------


def _legacy_int(text: str, field: str, lo: int, hi: int, key: str, func: str = "strconv.ParseInt") -> int:
    try:
        return parse_go_int(text, lo, hi, func=func)
    except WireFormatError as exc:
        raise wire_error(key, f"invalid {field} field: {exc}") from None


def _decode_legacy_segment(segment: str, key: str) -> DeviceInfo:
    items = segment.split(",")
    if len(items) not in (7, 9):
        raise wire_error(key, f"unexpected field count {len(items)} in node annotation")
    count = _legacy_int(items[1], "count", INT32_MIN, INT32_MAX, key)
    devmem = _legacy_int(items[2], "memory", INT32_MIN, INT32_MAX, key)
    devcore = _legacy_int(items[3], "core", INT32_MIN, INT32_MAX, key)
    try:
        health = parse_go_bool(items[6])
    except WireFormatError as exc:
        raise wire_error(key, f"invalid health field: {exc}") from None
    numa = _legacy_int(items[5], "numa", INT64_MIN, INT64_MAX, key, "strconv.Atoi")
    mode, index = LEGACY_DEFAULT_MODE, 0
    if len(items) == 9:
        index = _legacy_int(items[7], "index", INT64_MIN, INT64_MAX, key, "strconv.Atoi")
        if index < 0:
            raise wire_error(key, f"index field must not be negative: {index}")
        mode = items[8]
    for name, number in (("count", count), ("memory", devmem), ("core", devcore)):
        if number < 0:
            raise wire_error(key, f"{name} field must not be negative: {number}")
    if not items[0]:
        raise wire_error(key, f"empty device id in node annotation segment: {go_quote(segment)}")
    return DeviceInfo(id=items[0], index=index, count=count, devmem=devmem, devcore=devcore, type=items[4],
                      numa=numa, mode=mode, health=health)


def decode_node_devices_legacy(value: str, *, key: str = "") -> list[DeviceInfo]:
    """Decode a legacy node registration (HAMi ``DecodeNodeDevices``; Hygon, Iluvatar, NVIDIA <= v2.7).

    Format: devices separated by ``:`` (trailing ``:`` normal), each ``id,count,devmem,devcore,type,numa,
    health`` or that plus ``,index,mode``. The value must contain ``:``; empty segments are skipped
    (``":"`` → ``[]``); 7-field devices get index 0 and mode ``hami-core``. Errors use HAMi's texts
    ("node annotation missing device separator", "unexpected field count 2 in node annotation", ...).
    """
    if ":" not in value:
        raise wire_error(key, "node annotation missing device separator")
    devices: list[DeviceInfo] = []
    for segment in value.split(":"):
        if not segment:
            continue
        if "," not in segment:
            raise wire_error(key, f"malformed node annotation segment: {go_quote(segment)}")
        devices.append(_decode_legacy_segment(segment, key))
    return devices


def _legacy_text(text: str, what: str) -> str:
    if "," in text or ":" in text:
        raise WireFormatError(f"{what} {text!r} cannot be written in the legacy format (contains ',' or ':')")
    return text


def encode_node_devices_legacy(devices: Iterable[DeviceInfo]) -> str:
    """Encode devices like HAMi ``EncodeNodeDevices``.

    Format: ``id,count,devmem,devcore,type,numa,health,index,mode:`` per device (always 9 fields, each
    device terminated by ``:``; health as ``true``/``false``). No devices gives ``""`` (as in Go, which
    the decoder rejects). Texts containing ``,`` or ``:`` raise :class:`WireFormatError`.
    """
    parts = []
    for d in devices:
        what = f"DeviceInfo {d.id!r}"
        fields = (_legacy_text(d.id, f"{what} id"),
                  str(_check_int(d.count, INT32_MIN, INT32_MAX, f"{what} count")),
                  str(_check_int(d.devmem, INT32_MIN, INT32_MAX, f"{what} devmem")),
                  str(_check_int(d.devcore, INT32_MIN, INT32_MAX, f"{what} devcore")),
                  _legacy_text(d.type, f"{what} type"),
                  str(_check_int(d.numa, INT64_MIN, INT64_MAX, f"{what} numa")),
                  "true" if d.health else "false",
                  str(_check_int(d.index, 0, INT64_MAX, f"{what} index")),
                  _legacy_text(d.mode, f"{what} mode"))
        parts.append(",".join(fields) + ":")
    return "".join(parts)


def decode_node_devices(value: str, *, key: str = "") -> list[DeviceInfo]:
    """Decode either registration form: JSON when the stripped value starts with ``[``, else legacy."""
    if value.lstrip().startswith("["):
        return decode_node_devices_json(value, key=key)
    return decode_node_devices_legacy(value, key=key)


# --------------------------------------------------------------------------------------------------
# Topology pair scores
# --------------------------------------------------------------------------------------------------


def decode_pair_scores(value: str, *, key: str = "") -> dict[str, dict[str, int]]:
    """Decode ``hami.io/node-nvidia-score`` (HAMi ``DecodePairScores``) into ``uuid -> {other: score}``.

    Format: ``[{"uuid":"GPU-a","score":{"GPU-b":100}}, ...]``; keys case-insensitive, missing ``uuid``
    is ``""`` and missing ``score`` ``{}`` (as Go); ``null`` → ``{}``; a repeated uuid: the last wins.
    """
    data = _json.loads(value, key)
    if data is None:
        return {}
    if not isinstance(data, list):
        raise wire_error(key, f"expected a JSON array of pair scores, got {_json.show(data)}")
    out: dict[str, dict[str, int]] = {}
    for i, raw in enumerate(data):
        where = _where(key, f"entry {i}")
        if not isinstance(raw, dict):
            raise wire_error(where, f"must be an object, got {_json.show(raw)}")
        obj = _json.fold(raw)
        scores = _json.get_object(obj, "score", where) or {}
        for other, score in scores.items():
            if type(score) is not int or not INT64_MIN <= score <= INT64_MAX:
                raise wire_error(where, f"score for {go_quote(other)} must be an integer, "
                                        f"got {_json.show(score)}")
        out[_json.get_str(obj, "uuid", where)] = dict(scores)
    return out


def encode_pair_scores(scores: Mapping[str, Mapping[str, int]]) -> str:
    """Encode pair scores like Go ``json.Marshal(DevicePairScores)``.

    Format: ``[{"uuid":"GPU-a","score":{"GPU-b":100}}]`` in mapping order, inner keys sorted (Go sorts map
    keys), ``uuid``/``score`` omitted when empty.
    """
    out = []
    for uuid, inner in scores.items():
        entry: dict[str, Any] = {}
        if uuid:
            entry["uuid"] = uuid
        if inner:
            entry["score"] = {other: _check_int(inner[other], INT64_MIN, INT64_MAX, f"score {uuid}->{other}")
                              for other in sorted(inner)}
        out.append(entry)
    return _json.dumps(out)
