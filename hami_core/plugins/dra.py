"""The DRA vocabulary of the plugin contract: what a backend's ``hami_dra_devices`` hook returns, and the names.

It lives here, in the contract, so that vendor packages (which import only :mod:`hami_core.plugins` and
:mod:`hami_core.wire`) can build :class:`DraDevice` objects; :mod:`hami_core.dra.model` re-exports every name, and
is where the DRA parts of the core (publisher, kubelet plugin, webhook, simulator) import them from.

One DRA *driver* per backend (its ResourceSlices' ``spec.driver``), one *DeviceClass* per backend selecting that
driver's devices, one *pool* per node (named after the node). A device is published under :func:`device_name`
with the attributes and capacities below; capacities are consumable (KEP-5075) on devices that allow multiple
allocations (shareable cards), so one card serves several claims up to its memory and cores.

Names: NVIDIA's DeviceClass is ``hami-core-gpu.project-hami.io`` (HAMi-DRA's name); other backends use
``hami-core-<word>.project-hami.io`` with ``<word>`` the backend's common word lower-cased and made a DNS label.
The driver name equals the DeviceClass name, so a ResourceSlice names its class and a claim's allocation result
(``driver``) maps back to the backend.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ATTR_INDEX", "ATTR_MODE", "ATTR_NUMA", "ATTR_REGISTERED_INDEX", "ATTR_TYPE", "ATTR_UUID", "ATTR_VENDOR",
           "CAP_CORES", "CAP_MEMORY", "CAP_SHARES", "DOMAIN", "MIB", "AttributeValue", "DraCapacity", "DraDevice",
           "device_class_name", "device_name", "driver_name", "parse_device_name"]

DOMAIN = "project-hami.io"
#: Device attributes (``spec.devices[].attributes``), qualified by the driver name when published.
ATTR_UUID = "uuid"
ATTR_INDEX = "index"
ATTR_TYPE = "type"
ATTR_VENDOR = "vendor"
ATTR_NUMA = "numa"
ATTR_MODE = "mode"
#: The registration's index of a device published under another index (several devices registered with one index).
ATTR_REGISTERED_INDEX = "registeredIndex"
#: Consumable capacities: device memory in bytes (published as a quantity such as ``81920Mi``) and compute in
#: percent of the card (``100``), the units of HAMi's ``gpumem`` (MiB) and ``gpucores`` (%).
CAP_MEMORY = "memory"
CAP_CORES = "cores"
#: HAMi's split count as a consumable capacity: a shared device has ``count`` shares and every allocation takes
#: exactly one (request policy default 1, range 1..1), so DRA places no more claims on a card than HAMi would.
CAP_SHARES = "shares"
#: Bytes in a MiB: HAMi registers memory in MiB, DRA counts it in bytes.
MIB = 1024 * 1024

#: The value of a backend-specific attribute (``DraDevice.attributes``): a DRA ``int``, ``bool`` or ``string``.
AttributeValue = int | bool | str

_NVIDIA_CLASS = f"hami-core-gpu.{DOMAIN}"
_LABEL = re.compile(r"[^a-z0-9-]+")


def _word(backend: str) -> str:
    word = _LABEL.sub("-", backend.lower()).strip("-")
    return word or "device"


def device_class_name(backend: str) -> str:
    """The DeviceClass of a backend (its common word: ``NVIDIA``, ``Ascend910B3``, ``MLU``)."""
    return _NVIDIA_CLASS if backend == "NVIDIA" else f"hami-core-{_word(backend)}.{DOMAIN}"


def driver_name(backend: str) -> str:
    """The DRA driver name of a backend's ResourceSlices (the same as its DeviceClass name)."""
    return device_class_name(backend)


def device_name(backend: str, index: int) -> str:
    """A device's name in its ResourceSlice (a DNS label): ``gpu-0`` for NVIDIA, ``<word>-<index>`` otherwise."""
    return f"{'gpu' if backend == 'NVIDIA' else _word(backend)}-{index}"


def parse_device_name(name: str) -> int:
    """The index of a device named by :func:`device_name`; ``ValueError`` naming the name otherwise."""
    head, _, tail = name.rpartition("-")
    if not head or not tail.isdigit():
        raise ValueError(f"device name {name!r}: expected <word>-<index>")
    return int(tail)


@dataclass(frozen=True, slots=True)
class DraCapacity:
    """One consumable capacity of a device: its total ``value`` (in the capacity's unit: bytes for memory, percent
    for cores) and its request policy: what a claim that names no amount gets (``default``), and the smallest
    amount and step a request is rounded up to (``minimum``, ``step``); ``maximum`` (``None``: the value) is the
    most one claim may consume."""

    value: int
    default: int
    minimum: int = 1
    step: int = 1
    maximum: int | None = None


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One device as a backend describes it for DRA (the ``hami_dra_devices`` hook's answer).

    ``shared``: several claims may be allocated on it at once, each consuming part of ``capacity``
    (``allowMultipleAllocations``); a whole-card-only device sets it False. ``healthy`` False devices are not
    published. ``attributes``: backend-specific attributes published besides the standard ones (unqualified
    C-identifier names, qualified by the driver name when published; a name of the standard ones is refused)."""

    backend: str
    index: int
    uuid: str
    type: str
    numa: int = 0
    mode: str = ""
    shared: bool = True
    healthy: bool = True
    capacity: Mapping[str, DraCapacity] = field(default_factory=dict)
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return device_name(self.backend, self.index)

    @property
    def driver(self) -> str:
        return driver_name(self.backend)
