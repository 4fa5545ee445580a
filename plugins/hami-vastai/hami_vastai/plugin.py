"""The ``hami.devices`` entry point of hami-vastai: a Vastai backend when ``vastai:`` is present (empty: defaults)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins import hookimpl, parse_section
from hami_vastai.backend import VastaiBackend
from hami_vastai.config import VastaiConfig


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[VastaiBackend]:
    cfgs = [parse_section("vastai", VastaiConfig, config["vastai"])] if "vastai" in config else []
    return [VastaiBackend.from_config(cfg) for cfg in cfgs]
