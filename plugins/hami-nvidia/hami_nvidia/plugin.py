"""The ``hami.devices`` entry point of hami-nvidia: one NVIDIA backend when the ``nvidia:`` section is present."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins import hookimpl, parse_section
from hami_nvidia.backend import VENDOR, NvidiaBackend
from hami_nvidia.config import NvidiaConfig


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[NvidiaBackend]:
    """``nvidia:`` (``VENDOR``) with an empty body (or ``{}``) means the chart defaults; no section, no backend."""
    return [NvidiaBackend.from_config(parse_section(VENDOR, NvidiaConfig, config[VENDOR]))] if VENDOR in config else []
