"""The ``awsneuron:`` section of HAMi's device-config.yaml (HAMi ``AWSNeuronConfig``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: HAMi's chart defaults (``charts/hami/templates/scheduler/device-configmap.yaml``).
DEFAULT_COUNT_NAME = "aws.amazon.com/neuron"
DEFAULT_CORE_NAME = "aws.amazon.com/neuroncore"


class AWSNeuronConfig(BaseModel):
    """HAMi's ``AWSNeuronConfig`` with the chart defaults. Keys are HAMi's camelCase names.

    ``resourceCountName`` counts whole Neuron devices, ``resourceCoreName`` NeuronCores; both are read from a
    container's limits, else its requests, and from a node's ``status.capacity``. An empty core name turns core
    requests off (no container can name the resource).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_COUNT_NAME, alias="resourceCountName", min_length=1)
    resource_core_name: str = Field(DEFAULT_CORE_NAME, alias="resourceCoreName")
