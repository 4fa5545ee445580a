"""The ``hami.devices`` entry point of hami-hygon: one DCU backend when the ``hygon:`` section is present."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins import hookimpl, parse_section
from hami_hygon.backend import DcuBackend
from hami_hygon.config import HygonConfig


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[DcuBackend]:
    """``hygon:`` with an empty body (or ``{}``) means the chart defaults; no section, no backend."""
    return [DcuBackend.from_config(parse_section("hygon", HygonConfig, config["hygon"]))] if "hygon" in config else []
