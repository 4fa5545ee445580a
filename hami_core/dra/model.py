"""The DRA vocabulary shared by the publisher, the kubelet plugin, the translating webhook and the simulator.

One DRA *driver* per backend (its ResourceSlices' ``spec.driver``), one *DeviceClass* per backend selecting that
driver's devices, one *pool* per node (named after the node). A device is published under :func:`device_name`
with the attributes and capacities below; capacities are consumable (KEP-5075) on devices that allow multiple
allocations (shareable cards), so one card serves several claims up to its memory and cores.

Names: NVIDIA's DeviceClass is ``hami-core-gpu.project-hami.io`` (HAMi-DRA's name); other backends use
``hami-core-<word>.project-hami.io`` with ``<word>`` the backend's common word lower-cased and made a DNS label.
The driver name equals the DeviceClass name, so a ResourceSlice names its class and a claim's allocation result
(``driver``) maps back to the backend.

The definitions live in the plugin contract (:mod:`hami_core.plugins.dra`), because vendor packages build
:class:`DraDevice` objects in their ``hami_dra_devices`` hook and may import only :mod:`hami_core.plugins`; this
module re-exports them, unchanged, for the DRA parts of the core.
"""

from __future__ import annotations

from hami_core.plugins.dra import (
    ATTR_INDEX,
    ATTR_MODE,
    ATTR_NUMA,
    ATTR_REGISTERED_INDEX,
    ATTR_TYPE,
    ATTR_UUID,
    ATTR_VENDOR,
    CAP_CORES,
    CAP_MEMORY,
    CAP_SHARES,
    DOMAIN,
    MIB,
    AttributeValue,
    DraCapacity,
    DraDevice,
    device_class_name,
    device_name,
    driver_name,
    parse_device_name,
)

__all__ = ["ATTR_INDEX", "ATTR_MODE", "ATTR_NUMA", "ATTR_REGISTERED_INDEX", "ATTR_TYPE", "ATTR_UUID", "ATTR_VENDOR",
           "CAP_CORES", "CAP_MEMORY", "CAP_SHARES", "DOMAIN", "MIB", "AttributeValue", "DraCapacity", "DraDevice",
           "device_class_name", "device_name", "driver_name", "parse_device_name"]
