"""The ``hami.devices`` entry point of hami-kunlun: ``kunlun`` and ``XPU`` from one ``kunlun:`` section, as HAMi."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins import hookimpl, parse_section
from hami_kunlun import kunlun, xpu
from hami_kunlun.config import SECTION, KunlunConfig


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[kunlun.KunlunBackend | xpu.XpuBackend]:
    cfgs = [parse_section(SECTION, KunlunConfig, config[SECTION])] if SECTION in config else []
    return [backend.from_config(cfg) for cfg in cfgs for backend in (kunlun.KunlunBackend, xpu.XpuBackend)]
