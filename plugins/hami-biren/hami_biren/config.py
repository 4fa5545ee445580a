"""The ``biren:`` section of HAMi's device-config.yaml (HAMi ``BirenConfig``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: HAMi's chart default: ``birenResourceName`` in ``charts/hami/values.yaml``, rendered by
#: ``charts/hami/templates/scheduler/device-configmap.yaml`` as ``biren.resourceCountName``.
DEFAULT_COUNT_NAME = "birentech.com/gpu"


class BirenConfig(BaseModel):
    """HAMi's ``BirenConfig`` with the chart default. Its one key is HAMi's camelCase name.

    HAMi's Biren backend reads only a count resource: no memory, core or percentage resource exists.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_COUNT_NAME, alias="resourceCountName", min_length=1)
