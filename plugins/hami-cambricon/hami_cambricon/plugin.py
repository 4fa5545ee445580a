"""The ``hami.devices`` entry point of hami-cambricon: the MLU backends of the ``cambricon:`` section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_cambricon.backend import MluBackend, make_backends
from hami_cambricon.config import SECTION, parse_config
from hami_core.plugins import hookimpl


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[MluBackend]:
    """``cambricon:`` with an empty body means HAMi's ``MLU`` backend; ``models`` one per model; no section, none."""
    return make_backends(parse_config(config[SECTION])) if SECTION in config else []
