"""The ``vastai:`` section of HAMi's device-config.yaml (HAMi ``VastaiConfig``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: HAMi's chart default: ``vastaiResourceName`` in ``charts/hami/values.yaml``, rendered as
#: ``vastai.resourceCountName`` by ``charts/hami/templates/scheduler/device-configmap.yaml``.
DEFAULT_COUNT_NAME = "vastaitech.com/va"


class VastaiConfig(BaseModel):
    """HAMi's ``VastaiConfig`` with the chart default; its one key is HAMi's camelCase name.

    Vastai has no memory or core resource: a container asks for whole devices (cards, or dies in die mode).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_COUNT_NAME, alias="resourceCountName", min_length=1)
