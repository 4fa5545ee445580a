"""The ``hami.devices`` entry point of hami-mthreads: one Mthreads backend when the ``mthreads:`` section is present."""

from __future__ import annotations

from collections.abc import Mapping

from hami_core.plugins import hookimpl, parse_section
from hami_mthreads.backend import MthreadsBackend
from hami_mthreads.config import SECTION, MthreadsConfig


@hookimpl
def hami_device_backends(config: Mapping[str, object]) -> list[MthreadsBackend]:
    """``mthreads:`` with an empty body (or ``{}``) means the chart defaults; no section, no backend."""
    cfg = parse_section(SECTION, MthreadsConfig, config[SECTION]) if SECTION in config else None
    return [] if cfg is None else [MthreadsBackend.from_config(cfg)]
