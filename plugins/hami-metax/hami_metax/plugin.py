"""The ``hami.devices`` entry point of hami-metax: both MetaX backends when the ``metax:`` section is present."""

from __future__ import annotations

from collections.abc import Mapping

from hami_core.plugins import StandardBackend, hookimpl, parse_section
from hami_metax import gpu, sgpu
from hami_metax.config import SECTION, MetaxConfig


@hookimpl
def hami_device_backends(config: Mapping[str, object]) -> list[StandardBackend]:
    """MetaX GPU and sGPU, always together (as HAMi builds them); an empty ``metax:`` means the chart defaults."""
    cfg = parse_section(SECTION, MetaxConfig, config[SECTION]) if SECTION in config else None
    return [] if cfg is None else [gpu.GpuBackend.from_config(cfg), sgpu.SgpuBackend.from_config(cfg)]
