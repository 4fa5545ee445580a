"""The ``metax:`` section of HAMi's device-config.yaml (vendors.md Part G, scheduler §10.1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SECTION = "metax"


class MetaxConfig(BaseModel):
    """HAMi's ``MetaxConfig`` with the chart defaults; keys are HAMi's camelCase names.

    One section configures both backends: ``resourceCountName`` is MetaX GPU's (whole card) resource,
    the ``resourceV*`` names and ``sgpuTopologyAware`` are MetaX sGPU's. Validate it with
    ``parse_section("metax", MetaxConfig, value)``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field("metax-tech.com/gpu", alias="resourceCountName", min_length=1)
    resource_vcount_name: str = Field("metax-tech.com/sgpu", alias="resourceVCountName", min_length=1)
    resource_vmemory_name: str = Field("metax-tech.com/vmemory", alias="resourceVMemoryName")
    resource_vcore_name: str = Field("metax-tech.com/vcore", alias="resourceVCoreName")
    sgpu_topology_aware: bool = Field(False, alias="sgpuTopologyAware")
