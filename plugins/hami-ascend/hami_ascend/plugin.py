"""The ``hami.devices`` entry point of hami-ascend: one NPU backend per chip of the ``vnpus:`` section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_ascend.backend import NpuBackend, backends
from hami_ascend.config import SECTION, AscendConfig
from hami_core.plugins import hookimpl, parse_section


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[NpuBackend]:
    """``vnpus:`` with an empty body (or ``{}``) means the chart's chips; no section, no backend."""
    return backends(parse_section(SECTION, AscendConfig, config[SECTION])) if SECTION in config else []
