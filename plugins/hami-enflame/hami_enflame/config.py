"""The ``enflame:`` section of HAMi's device-config.yaml (vendors.md Part I, ``pkg/device/enflame/config.go``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SECTION = "enflame"
#: The backends' ``vendor`` (HAMi initialises both from the one section).
VENDOR = "enflame"

DEFAULT_GCU = "enflame.com/gcu"
DEFAULT_DRS_GCU = "enflame.com/drs-gcu"
DEFAULT_GCU_MEMORY = "enflame.com/gcu-memory"
DEFAULT_GCU_CORE = "enflame.com/gcu-core"


class EnflameConfig(BaseModel):
    """HAMi's ``EnflameConfig``; keys are HAMi's camelCase names.

    ``resourceNameGCU`` is the whole-card (``GCU``) resource. The DRS backend (``Enflame``) counts slices
    with ``resourceNameDRSGCU``, falling back to the legacy ``resourceNameVGCU`` and then to
    ``enflame.com/drs-gcu`` when empty, as ``InitEnflameDevice`` does; ``resourceNameVGCUPercentage`` is
    accepted for compatibility and not read by the scheduler. Validate a section with
    ``parse_section(SECTION, EnflameConfig, value)`` (``None`` or ``{}``: HAMi's chart defaults).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_name_gcu: str = Field(DEFAULT_GCU, alias="resourceNameGCU", min_length=1)
    resource_name_drs_gcu: str = Field("", alias="resourceNameDRSGCU")
    resource_name_gcu_memory: str = Field("", alias="resourceNameGCUMemory")
    resource_name_gcu_core: str = Field("", alias="resourceNameGCUCore")
    resource_name_vgcu: str = Field("", alias="resourceNameVGCU")
    resource_name_vgcu_percentage: str = Field("", alias="resourceNameVGCUPercentage")

    @property
    def drs_resource(self) -> str:
        """The DRS slice-count resource: ``resourceNameDRSGCU`` or ``resourceNameVGCU`` or the default."""
        return self.resource_name_drs_gcu or self.resource_name_vgcu or DEFAULT_DRS_GCU

    @property
    def memory_resource(self) -> str:
        """The DRS "request by spec" memory resource (empty in the config means the default)."""
        return self.resource_name_gcu_memory or DEFAULT_GCU_MEMORY

    @property
    def core_resource(self) -> str:
        """The DRS "request by spec" core-percentage resource (empty in the config means the default)."""
        return self.resource_name_gcu_core or DEFAULT_GCU_CORE
