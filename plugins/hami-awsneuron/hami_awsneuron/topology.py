"""Which Neuron devices and cores a request may take: HAMi's contiguous device groups and two-bit core masks
(``pkg/device/awsneuron/device.go``: ``graphSelect``, ``continuousDeviceAvailable``, ``countMaskAvailable``,
``addCoreUsage``).

Devices are numbered by their registration index. A core mask has bit 0 for a device's first NeuronCore and bit 1
for its second; HAMi addresses at most these two cores of a device.
"""

from __future__ import annotations

from collections.abc import Sequence

from hami_core.plugins import DeviceUsage

#: ``DeviceInfo.custom_info`` key of the node's EC2 instance type (from ``node.kubernetes.io/instance-type``).
NODE_TYPE_KEY = "AWSNodeType"
#: Group sizes a non-Inferentia (Trainium) node can give; a group starts at a multiple of its size.
TRAINIUM_GROUPS = frozenset({1, 4, 8, 16})


def count_mask_available(mask: int) -> int:
    """HAMi ``countMaskAvailable``: the number of set bits of a core mask; 0 for a mask that is not positive."""
    return mask.bit_count() if mask > 0 else 0


def add_core_usage(booked: int, require: int) -> int:
    """HAMi ``addCoreUsage``: the core mask a container gets on a device whose booked mask is ``booked``.

    On an idle device, 2 cores are mask 3 and 1 core mask 1 (the first core). Otherwise, and for any other
    ``require`` (a whole device's count of cores, or 0 before a node told how many cores a device has), the mask
    is ``3 - booked``: the other core of a half-used device, 3 on an idle one, and 0 (no core at all) once both
    addressable cores are booked (possible on a device with more than two cores; HAMi's behaviour).
    """
    if booked == 0:
        if require == 2:
            return 3
        if require == 1:
            return 1
    return 3 - booked


def continuous_devices(devices: Sequence[DeviceUsage], start: int, count: int) -> list[int]:
    """HAMi ``continuousDeviceAvailable``: positions ``start .. start+count-1`` when all of them exist and are
    healthy and idle (nothing booked), else ``[]``. No wrap-around past the last device."""
    if len(devices) < start + count:
        return []
    window = range(start, start + count)
    if any(devices[i].used > 0 or not devices[i].health for i in window):
        return []
    return list(window)


def node_type(devices: Sequence[DeviceUsage]) -> str | None:
    """The instance type the first device carries (every device of a node carries the same); ``None`` when the
    first device has no ``AWSNodeType`` (then no group can be chosen, as in HAMi)."""
    if not devices:
        return None
    info = devices[0].info.custom_info
    if not info or info.get(NODE_TYPE_KEY) is None:
        return None
    value = info[NODE_TYPE_KEY]
    return value if isinstance(value, str) else ""


def graph_select(devices: Sequence[DeviceUsage], count: int) -> list[int]:
    """HAMi ``graphSelect``: the positions of the first group of ``count`` contiguous idle, healthy devices.

    On Inferentia nodes (the instance type contains ``inf`` or ``Inf``: ``inf1``, ``inf2.48xlarge``) a group may
    start at any device. On every other node (Trainium: ``trn1``, ``trn2``...) only groups of 1, 4, 8 or 16
    devices exist, each starting at a multiple of its size (0-3, 4-7, ...; 0-7, 8-15); other sizes never fit.
    ``devices`` must be in index order (position = index).
    """
    kind = node_type(devices)
    if kind is None:
        return []
    if "inf" in kind or "Inf" in kind:
        step = 1
    elif count in TRAINIUM_GROUPS:
        step = count
    else:
        return []
    for start in range(0, len(devices), step):
        group = continuous_devices(devices, start, count)
        if group:
            return group
    return []
