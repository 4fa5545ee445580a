"""The ``hami.devices`` entry point of hami-iluvatar: one backend per ``iluvatars:`` chip."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_core.plugins import hookimpl
from hami_iluvatar.backend import IluvatarBackend
from hami_iluvatar.config import SECTION, parse_config


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[IluvatarBackend]:
    """An empty section means the chart chips, ``[]`` none; no section, no backend."""
    return [IluvatarBackend.from_config(c) for c in parse_config(config[SECTION])] if SECTION in config else []
