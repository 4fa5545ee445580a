"""How a container's Neuron quantities become a request (HAMi ``validateResourceRequest``, ``splitCoreRequest``,
``coresPerDevice``); admission and request generation share these rules, so the two cannot disagree."""

from __future__ import annotations

from typing import Any

from hami_core.plugins import as_int64
from hami_core.wire.common import INT32_MAX

#: HAMi ``maxAWSNeuronDeviceCount``: devices one container may ask for.
MAX_DEVICE_COUNT = INT32_MAX
#: HAMi ``maxCoresPerNeuronDevice``: the cores of a device a core request can use (the two bits of a core mask).
MAX_CORES_PER_DEVICE = 2
#: HAMi ``maxAWSNeuronCoreCount``: NeuronCores one container may ask for.
MAX_CORE_COUNT = MAX_DEVICE_COUNT * MAX_CORES_PER_DEVICE


class RequestError(ValueError):
    """A Neuron quantity HAMi refuses; the message is HAMi's."""


class CoreLayout:
    """HAMi's ``coresPerAWSNeuron``: NeuronCores per device, learned from the first node registered with devices
    (its core capacity / device capacity) and kept for every later node and request. 0 until then.

    It lives as long as the backend (one engine); HAMi keeps it in its device object the same way.
    """

    __slots__ = ("cores_per_device",)

    def __init__(self, cores_per_device: int = 0) -> None:
        self.cores_per_device = cores_per_device

    def addressable(self) -> int:
        """HAMi ``coresPerDevice``: the cores per device a core request is split by, at most 2; 2 while unknown."""
        observed = self.cores_per_device
        return MAX_CORES_PER_DEVICE if observed <= 0 else min(observed, MAX_CORES_PER_DEVICE)


def validate_quantity(raw: Any, name: str, maximum: int) -> int:
    """HAMi ``validateResourceRequest``: an integer in 1..``maximum``, else :class:`RequestError`."""
    value = as_int64(raw)
    if value is None:
        raise RequestError(f"{name} must be an integer")
    if value <= 0:
        raise RequestError(f"{name} must be greater than 0")
    if value > maximum:
        raise RequestError(f"{name} must not exceed {maximum}")
    return value


def split_core_request(cores: int, layout: CoreLayout, name: str) -> tuple[int, int]:
    """HAMi ``splitCoreRequest``: ``(devices, cores per device)`` for ``cores`` NeuronCores.

    Up to one device's addressable cores fit on one device; more must fill whole devices, since one core count
    applies to every device of the request (3 cores on 2-core devices has no shape).
    """
    per_device = layout.addressable()
    if cores <= per_device:
        return 1, cores
    if cores % per_device:
        raise RequestError(f"{name} must be 1 or a multiple of {per_device}, got {cores}")
    nums = cores // per_device
    if nums > MAX_DEVICE_COUNT:
        raise RequestError(f"{name} needs {nums} devices, which exceeds the maximum of {MAX_DEVICE_COUNT}")
    return nums, per_device
