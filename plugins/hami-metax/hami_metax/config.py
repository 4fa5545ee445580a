"""The ``metax:`` section of HAMi's device-config.yaml (vendors.md Part G, scheduler §10.1)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from hami_core.engine.config import pydantic_error
from hami_core.plugins.errors import ConfigError
from hami_metax.state import SgpuState

SECTION = "metax"


class MetaxConfig(BaseModel):
    """HAMi's ``MetaxConfig`` with the chart defaults; keys are HAMi's camelCase names.

    One section configures both backends: ``resourceCountName`` is MetaX GPU's (whole card) resource,
    the ``resourceV*`` names and ``sgpuTopologyAware`` are MetaX sGPU's.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field("metax-tech.com/gpu", alias="resourceCountName", min_length=1)
    resource_vcount_name: str = Field("metax-tech.com/sgpu", alias="resourceVCountName", min_length=1)
    resource_vmemory_name: str = Field("metax-tech.com/vmemory", alias="resourceVMemoryName")
    resource_vcore_name: str = Field("metax-tech.com/vcore", alias="resourceVCoreName")
    sgpu_topology_aware: bool = Field(False, alias="sgpuTopologyAware")

    _state: SgpuState = PrivateAttr(default_factory=SgpuState)

    @property
    def state(self) -> SgpuState:
        """The sGPU backend's scheduler-side memory (jittery QoS cache, pod app classes)."""
        return self._state

    # Two sections with the same settings are equal, whatever their engines remember.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetaxConfig):
            return NotImplemented
        return self.model_dump() == other.model_dump()

    def __hash__(self) -> int:
        return hash(tuple(self.model_dump().items()))


def parse_config(section: Any) -> MetaxConfig:
    """Validate the ``metax:`` section; a bad field raises :class:`ConfigError` naming ``metax.<field>``.

    ``None`` (a YAML ``metax:`` with an empty body) and ``{}`` mean HAMi's chart defaults.
    """
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ConfigError(f"{SECTION}: must be a mapping, got {type(section).__name__}")
    try:
        return MetaxConfig.model_validate(section)
    except ValidationError as exc:
        raise pydantic_error(SECTION, exc) from None
