"""The ``kunlun:`` section of HAMi's device-config.yaml (vendors.md Part I, ``KunlunConfig``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hami_core.engine.config import pydantic_error
from hami_core.plugins.errors import ConfigError

SECTION = "kunlun"

#: Chart defaults.
DEFAULT_RESOURCE_COUNT = "kunlunxin.com/xpu"
DEFAULT_RESOURCE_VCOUNT = "kunlunxin.com/vxpu"
DEFAULT_RESOURCE_VMEMORY = "kunlunxin.com/vxpu-memory"


class KunlunConfig(BaseModel):
    """HAMi's ``KunlunConfig``: the whole-card count resource and the vXPU count and memory resources.

    One section enables both backends (HAMi's ``InitKunlunDevice`` and ``InitKunlunVDevice`` read the
    same ``KunlunConfig``). Keys are HAMi's camelCase names.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_RESOURCE_COUNT, alias="resourceCountName", min_length=1)
    resource_vcount_name: str = Field(DEFAULT_RESOURCE_VCOUNT, alias="resourceVCountName", min_length=1)
    resource_vmemory_name: str = Field(DEFAULT_RESOURCE_VMEMORY, alias="resourceVMemoryName", min_length=1)


def parse_config(section: Any) -> KunlunConfig:
    """Validate the ``kunlun:`` section; a bad field raises :class:`ConfigError` naming ``kunlun.<field>``.

    ``None`` (a YAML ``kunlun:`` with an empty body) and ``{}`` mean the chart defaults.
    """
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError(f"{SECTION}: must be a mapping, got {type(section).__name__}")
    try:
        return KunlunConfig.model_validate(section)
    except ValidationError as exc:
        raise pydantic_error(SECTION, exc) from None
