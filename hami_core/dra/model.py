"""The DRA vocabulary (driver, DeviceClass and device names, attributes, consumable capacities), re-exported for
the DRA parts of the core. The definitions and their documentation live in the plugin contract
(:mod:`hami_core.plugins.dra`), because vendor packages build :class:`DraDevice` objects in their
``hami_dra_devices`` hook and may import only :mod:`hami_core.plugins`.
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
