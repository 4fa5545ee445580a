"""The ``amd:`` section of HAMi's device-config.yaml (HAMi ``AMDConfig``, ``pkg/device/amd/device.go``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: HAMi's chart defaults (``charts/hami/templates/scheduler/device-configmap.yaml``, v2.10.0).
DEFAULT_COUNT_NAME = "amd.com/gpu"
DEFAULT_MEMORY_NAME = "amd.com/gpumem"
DEFAULT_CORE_NAME = "amd.com/gpucores"


class AmdConfig(BaseModel):
    """HAMi's ``AMDConfig`` with the chart defaults. Keys are HAMi's camelCase names; unknown keys are rejected.

    ``amd.com/gpumem`` is read in MiB (HAMi has no ``memoryFactor`` for AMD) and ``amd.com/gpucores`` is a
    percentage of the card's compute units. An empty memory or core name means the resource is not read; the count
    name may not be empty (HAMi would then never see an AMD request).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_COUNT_NAME, alias="resourceCountName", min_length=1)
    resource_memory_name: str = Field(DEFAULT_MEMORY_NAME, alias="resourceMemoryName")
    resource_core_name: str = Field(DEFAULT_CORE_NAME, alias="resourceCoreName")
