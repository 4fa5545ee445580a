"""Pod device assignment annotations ``…-devices-to-allocate`` / ``…-devices-allocated`` (spec §3.4, A.4)."""

from __future__ import annotations

from collections.abc import Iterable

from hami_core.plugins.errors import WireFormatError
from hami_core.plugins.types import ContainerDevice, PodSingleDevice
from hami_core.wire.common import INT32_MAX, INT32_MIN, go_quote, parse_go_int, wire_error

__all__ = [
    "decode_container_devices",
    "decode_pod_single_device",
    "encode_container_devices",
    "encode_pod_single_device",
    "padded",
    "strip_padding",
]

DEVICE_SEP = ":"
CONTAINER_SEP = ";"
_FORBIDDEN = (",", DEVICE_SEP, CONTAINER_SEP)


def _text(value: str, what: str) -> str:
    # Empty is encoded as HAMi does (it decodes back to empty); a separator would change what the string decodes
    # to (another container's or device's booking), so it is refused where HAMi would write it.
    if any(c in value for c in _FORBIDDEN):
        raise WireFormatError(f"{what} {value!r} cannot be encoded (contains ',', ':' or ';')")
    return value


def _int32(value: int, what: str) -> int:
    if type(value) is not int or not INT32_MIN <= value <= INT32_MAX:
        raise WireFormatError(f"{what} must be an int32, got {value!r}")
    return value


def encode_container_devices(devs: Iterable[ContainerDevice]) -> str:
    """Encode one container's devices like HAMi ``EncodeContainerDevices``.

    Format: ``UUID,Type,Usedmem,Usedcores:`` per device, concatenated (``Idx``, ``slots`` and
    ``custom_info`` are not carried); no devices → ``""``. A UUID or type containing ``,`` ``:`` or ``;``
    or a number outside int32 raises :class:`WireFormatError`; empty strings and negative numbers are written as
    HAMi writes them (``nvidia.com/gpucores: -1`` under ``negativeCores: keep``).
    """
    return "".join(
        f"{_text(d.uuid, 'device UUID')},{_text(d.type, 'device type')},"
        f"{_int32(d.usedmem, 'usedmem')},{_int32(d.usedcores, 'usedcores')}{DEVICE_SEP}"
        for d in devs
    )


def _field_int(text: str, field: str, key: str) -> int:
    # Go's strconv.ParseInt(text, 10, 32): a negative is read as written (HAMi v2.10.0 books it so; hami-py's own
    # requests never ask for one unless a vendor is told to keep it, e.g. NVIDIA's negativeCores: keep).
    try:
        return parse_go_int(text, INT32_MIN, INT32_MAX)
    except WireFormatError as exc:
        raise wire_error(key, f"invalid {field} field: {exc}") from None


def decode_container_devices(value: str, *, key: str = "") -> tuple[ContainerDevice, ...]:
    """Decode one container's devices like HAMi ``DecodeContainerDevices`` (spec §3.4).

    Format: pieces split on ``:``; a piece without a comma is skipped (it names no device, so nothing it could
    book is lost); one with fewer than 4 comma fields is an error ("pod annotation format error ..."); fields past
    the 4th are ignored; mem and cores parse as int32, negatives included, and an empty UUID or type is kept, all
    as HAMi v2.10.0 reads them (a booking on the empty UUID matches no device). Decoded devices have ``idx=-1``.
    """
    devices: list[ContainerDevice] = []
    for piece in value.split(DEVICE_SEP):
        if "," not in piece:
            continue
        fields = piece.split(",")
        if len(fields) < 4:
            raise wire_error(key, "pod annotation format error, missing fields, do not use nodeName in task "
                                  f"spec: {go_quote(piece)}")
        devices.append(ContainerDevice(uuid=fields[0], type=fields[1],
                                       usedmem=_field_int(fields[2], "memory", key),
                                       usedcores=_field_int(fields[3], "core", key)))
    return tuple(devices)


def encode_pod_single_device(psd: PodSingleDevice) -> str:
    """Encode one vendor's pod assignment like HAMi ``EncodePodSingleDevice``.

    Format: each container's :func:`encode_container_devices` string followed by ``;`` (init containers
    first), e.g. ``GPU-a,NVIDIA,3000,30:;GPU-a,NVIDIA,5000,0:GPU-b,NVIDIA,5000,0:;``.
    """
    return "".join(encode_container_devices(ctr) + CONTAINER_SEP for ctr in psd)


def decode_pod_single_device(value: str, *, key: str = "") -> PodSingleDevice:
    """Decode one vendor's pod assignment like HAMi ``DecodePodDevices`` (spec §3.4).

    Format: split on ``;`` keeping every piece, the trailing empty one included, so ``"A:;B:;"`` has 3
    entries (the last empty) and ``""`` has one empty entry. Position = container position.
    """
    return tuple(decode_container_devices(piece, key=key) for piece in value.split(CONTAINER_SEP))


def strip_padding(psd: PodSingleDevice) -> PodSingleDevice:
    """Drop trailing empty container entries (e.g. the one every decode adds for the final ``;``)."""
    end = len(psd)
    while end and not psd[end - 1]:
        end -= 1
    return tuple(psd[:end])


def padded(psd: PodSingleDevice, containers: int) -> PodSingleDevice:
    """Return ``psd`` with exactly ``containers`` entries: trailing empties removed, then empties appended.

    Raises :class:`WireFormatError` when a non-empty entry sits at a position ``>= containers``.
    """
    core = strip_padding(psd)
    if len(core) > containers:
        raise WireFormatError(f"assignment has devices for container {len(core) - 1} but the pod has "
                              f"{containers} containers")
    return core + ((),) * (containers - len(core))
