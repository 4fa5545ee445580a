"""The ``hami.devices`` entry point of hami-awsneuron: one Neuron backend when the ``awsneuron:`` section is present."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_awsneuron.backend import NeuronBackend
from hami_awsneuron.config import AWSNeuronConfig
from hami_core.plugins import hookimpl, parse_section


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[NeuronBackend]:
    """``awsneuron:`` with an empty body (or ``{}``) means the chart defaults; no section, no backend."""
    if "awsneuron" not in config:
        return []
    return [NeuronBackend.from_config(parse_section("awsneuron", AWSNeuronConfig, config["awsneuron"]))]
