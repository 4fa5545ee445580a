"""The ``hami.devices`` entry point of hami-amd: one AMD GPU backend when the ``amd:`` section is present."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_amd.backend import AmdBackend
from hami_amd.config import AmdConfig
from hami_core.plugins import hookimpl, parse_section


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[AmdBackend]:
    """``amd:`` with an empty body (or ``{}``) means the chart defaults; no section, no backend."""
    return [AmdBackend.from_config(parse_section("amd", AmdConfig, config["amd"]))] if "amd" in config else []
