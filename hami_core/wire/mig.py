"""MIG allocations annotation ``hami.io/vgpu-mig-allocations`` (spec §3.5)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from hami_core.plugins.types import Placement, PodSingleDevice
from hami_core.wire import gojson as _json
from hami_core.wire.common import INT64_MAX, INT64_MIN, UINT32_MAX, wire_error

__all__ = [
    "MIG_PLACEMENT_CUSTOM_INFO",
    "MIG_PROFILE_CUSTOM_INFO",
    "MigAllocation",
    "decode_mig_allocations",
    "encode_mig_allocations",
    "mig_allocations_from_devices",
]

#: ``ContainerDevice.custom_info`` keys carrying a chosen MIG profile name and its :class:`Placement`.
MIG_PROFILE_CUSTOM_INFO = "migProfile"
MIG_PLACEMENT_CUSTOM_INFO = "migPlacement"


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One MIG device chosen for one container (HAMi ``nvidia.MigAllocation``).

    ``container_index`` is the position in the PodSingleDevice, ``device_index`` the position in that
    container's devices. The runtime identity (``mig_uuid``, ``gpu_instance_id``,
    ``compute_instance_id``) is filled in by the device plugin: all three or none.
    """

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: Placement
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def realized(self) -> bool:
        """True once the device plugin has written the runtime identity."""
        return self.mig_uuid is not None


def _problem(a: MigAllocation) -> str | None:
    """Why an allocation is invalid (HAMi ``DecodeMigAllocations`` checks), or ``None``."""
    if a.container_index < 0 or a.device_index < 0:
        return "is incomplete: negative containerIndex or deviceIndex"
    if not a.gpu_uuid:
        return "is incomplete: empty gpuUUID"
    if not a.profile:
        return "is incomplete: empty profile"
    if a.placement.size == 0:
        return "is incomplete: placement size is 0"
    runtime = sum(x is not None for x in (a.mig_uuid, a.gpu_instance_id, a.compute_instance_id))
    if runtime not in (0, 3):
        return "has partial runtime identity"
    return None


def _check_all(items: Iterable[MigAllocation], key: str) -> tuple[MigAllocation, ...]:
    out = tuple(items)
    seen: set[tuple[int, int]] = set()
    for i, a in enumerate(out):
        problem = _problem(a)
        if problem:
            raise wire_error(key, f"MIG allocation {i} {problem}")
        pair = (a.container_index, a.device_index)
        if pair in seen:
            raise wire_error(key, f"duplicate MIG allocation for container {pair[0]} device {pair[1]}")
        seen.add(pair)
    return out


def _decode_one(raw: Any, where: str) -> MigAllocation:
    if not isinstance(raw, dict):
        raise wire_error(where, f"must be an object, got {_json.show(raw)}")
    obj = _json.fold(raw)
    placement_raw = _json.get_object(obj, "placement", where) or {}
    p = _json.fold(placement_raw)
    placement = Placement(start=_json.get_int(p, "start", f"{where}: placement", 0, UINT32_MAX, "uint32"),
                          size=_json.get_int(p, "size", f"{where}: placement", 0, UINT32_MAX, "uint32"))
    ids = [None if obj.get(n.lower()) is None else _json.get_int(obj, n, where, 0, UINT32_MAX, "uint32")
           for n in ("gpuInstanceID", "computeInstanceID")]
    return MigAllocation(
        container_index=_json.get_int(obj, "containerIndex", where, INT64_MIN, INT64_MAX, "int"),
        device_index=_json.get_int(obj, "deviceIndex", where, INT64_MIN, INT64_MAX, "int"),
        gpu_uuid=_json.get_str(obj, "gpuUUID", where),
        profile=_json.get_str(obj, "profile", where),
        placement=placement,
        mig_uuid=_json.get_str(obj, "migUUID", where) or None,
        gpu_instance_id=ids[0],
        compute_instance_id=ids[1],
    )


def decode_mig_allocations(value: str, *, key: str = "") -> tuple[MigAllocation, ...]:
    """Decode ``hami.io/vgpu-mig-allocations`` like HAMi ``DecodeMigAllocations``.

    Format: JSON array of ``{"containerIndex","deviceIndex","gpuUUID","profile","placement":{"start",
    "size"}[,"migUUID","gpuInstanceID","computeInstanceID"]}``; ``""`` and ``null`` → ``()``. Rejects
    negative indexes, empty gpuUUID/profile, placement size 0, a partial runtime identity and a
    duplicate (containerIndex, deviceIndex).
    """
    if value == "":
        return ()
    data = _json.loads(value, key)
    if data is None:
        return ()
    if not isinstance(data, list):
        raise wire_error(key, f"expected a JSON array of MIG allocations, got {_json.show(data)}")
    where = f"{key}: " if key else ""
    return _check_all((_decode_one(raw, f"{where}MIG allocation {i}") for i, raw in enumerate(data)), key)


def _encode_one(a: MigAllocation) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "containerIndex": a.container_index,
        "deviceIndex": a.device_index,
        "gpuUUID": a.gpu_uuid,
        "profile": a.profile,
        "placement": {"start": a.placement.start, "size": a.placement.size},
    }
    if a.mig_uuid:
        obj["migUUID"] = a.mig_uuid
    if a.gpu_instance_id is not None:
        obj["gpuInstanceID"] = a.gpu_instance_id
    if a.compute_instance_id is not None:
        obj["computeInstanceID"] = a.compute_instance_id
    return obj


def encode_mig_allocations(items: Iterable[MigAllocation]) -> str:
    """Encode MIG allocations like HAMi (Go field order, runtime ids omitted when unset).

    Format: see :func:`decode_mig_allocations`. No allocations → ``""`` (HAMi then writes no annotation).
    Invalid allocations raise :class:`WireFormatError`.
    """
    checked = _check_all(items, "")
    return _json.dumps([_encode_one(a) for a in checked]) if checked else ""


def mig_allocations_from_devices(psd: PodSingleDevice) -> tuple[MigAllocation, ...]:
    """Collect the MIG allocations of a pod assignment (HAMi ``EncodeMigAllocations`` selection).

    A device counts when its ``custom_info`` holds a non-empty ``migProfile`` string and a
    ``migPlacement`` :class:`Placement` of non-zero size.
    """
    out = []
    for ci, ctr in enumerate(psd):
        for di, dev in enumerate(ctr):
            info = dev.custom_info or {}
            profile = info.get(MIG_PROFILE_CUSTOM_INFO)
            placement = info.get(MIG_PLACEMENT_CUSTOM_INFO)
            if isinstance(profile, str) and profile and isinstance(placement, Placement) and placement.size:
                out.append(MigAllocation(ci, di, dev.uuid, profile, placement))
    return tuple(out)
