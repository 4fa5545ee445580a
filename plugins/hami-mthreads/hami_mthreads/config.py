"""The ``mthreads:`` section of HAMi's device-config.yaml (vendors.md H.1)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SECTION = "mthreads"

#: Chart defaults (HAMi's ``--mthreads-name``, ``--mthreads-memory``, ``--mthreads-cores`` flags).
DEFAULT_RESOURCE_COUNT = "mthreads.com/vgpu"
DEFAULT_RESOURCE_MEMORY = "mthreads.com/sgpu-memory"
DEFAULT_RESOURCE_CORES = "mthreads.com/sgpu-core"


class MthreadsConfig(BaseModel):
    """HAMi's ``MthreadsConfig``: the three resource names. Keys are HAMi's camelCase names.

    Memory is counted in units of 512 MiB and cores in sixteenths of a GPU (H.1); the names are
    needed for registration too (capacity of the core and memory resources, H.2), so none may be empty.
    Validate it with ``parse_section("mthreads", MthreadsConfig, value)``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_RESOURCE_COUNT, alias="resourceCountName", min_length=1)
    resource_memory_name: str = Field(DEFAULT_RESOURCE_MEMORY, alias="resourceMemoryName", min_length=1)
    resource_core_name: str = Field(DEFAULT_RESOURCE_CORES, alias="resourceCoreName", min_length=1)

