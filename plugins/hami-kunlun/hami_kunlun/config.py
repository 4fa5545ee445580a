"""The ``kunlun:`` section of HAMi's device-config.yaml (vendors.md Part I, ``KunlunConfig``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SECTION = "kunlun"

#: Chart defaults.
DEFAULT_RESOURCE_COUNT = "kunlunxin.com/xpu"
DEFAULT_RESOURCE_VCOUNT = "kunlunxin.com/vxpu"
DEFAULT_RESOURCE_VMEMORY = "kunlunxin.com/vxpu-memory"


class KunlunConfig(BaseModel):
    """HAMi's ``KunlunConfig``: the whole-card count resource and the vXPU count and memory resources.

    One section enables both backends (HAMi's ``InitKunlunDevice`` and ``InitKunlunVDevice`` read the
    same ``KunlunConfig``). Keys are HAMi's camelCase names; validate a section with
    ``parse_section(SECTION, KunlunConfig, value)`` (``None`` or ``{}``: the chart defaults).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_RESOURCE_COUNT, alias="resourceCountName", min_length=1)
    resource_vcount_name: str = Field(DEFAULT_RESOURCE_VCOUNT, alias="resourceVCountName", min_length=1)
    resource_vmemory_name: str = Field(DEFAULT_RESOURCE_VMEMORY, alias="resourceVMemoryName", min_length=1)
