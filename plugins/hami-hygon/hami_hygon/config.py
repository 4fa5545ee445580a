"""The ``hygon:`` section of HAMi's device-config.yaml (vendors.md E.1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from hami_core.wire.common import INT32_MAX

#: HAMi's chart defaults (``charts/hami/templates/scheduler/device-configmap.yaml``, vendors.md E.1).
DEFAULT_COUNT_NAME = "hygon.com/dcunum"
DEFAULT_MEMORY_NAME = "hygon.com/dcumem"
DEFAULT_CORE_NAME = "hygon.com/dcucores"


class HygonConfig(BaseModel):
    """HAMi's ``HygonConfig`` with the chart defaults. Keys are HAMi's camelCase names.

    ``memoryFactor`` multiplies the ``hygon.com/dcumem`` quantity into MiB; HAMi applies it only when it
    is greater than 1, so 0 (Go's zero value for an omitted key) behaves as 1.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_COUNT_NAME, alias="resourceCountName", min_length=1)
    resource_memory_name: str = Field(DEFAULT_MEMORY_NAME, alias="resourceMemoryName")
    resource_core_name: str = Field(DEFAULT_CORE_NAME, alias="resourceCoreName")
    memory_factor: int = Field(1, alias="memoryFactor", ge=0, le=INT32_MAX)

