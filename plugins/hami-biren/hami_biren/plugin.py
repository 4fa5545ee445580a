"""The ``hami.devices`` entry point of hami-biren: one Biren backend when the ``biren:`` section is present."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_biren.backend import BirenBackend
from hami_biren.config import BirenConfig
from hami_core.plugins import hookimpl, parse_section


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[BirenBackend]:
    """``biren:`` with an empty body (or ``{}``) means the chart defaults; no section, no backend."""
    return [BirenBackend.from_config(parse_section("biren", BirenConfig, config["biren"]))] if "biren" in config else []
