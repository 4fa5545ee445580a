"""The ``hami.devices`` entry point of hami-enflame: ``GCU`` and ``Enflame`` from one ``enflame:`` section, as HAMi."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins import hookimpl, parse_section
from hami_enflame import drs, gcu
from hami_enflame.config import SECTION, EnflameConfig


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[gcu.GcuBackend | drs.DrsBackend]:
    cfgs = [parse_section(SECTION, EnflameConfig, config[SECTION])] if SECTION in config else []
    return [backend.from_config(cfg) for cfg in cfgs for backend in (gcu.GcuBackend, drs.DrsBackend)]
