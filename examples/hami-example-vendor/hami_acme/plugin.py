"""hami-acme's ``hami.devices`` entry point: declare the ACME backend when ``acme:`` is configured."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_acme.backend import VENDOR, AcmeBackend, AcmeConfig
from hami_core.plugins import hookimpl, parse_section


@hookimpl
def hami_device_backends(config: Mapping[str, Any]) -> list[AcmeBackend]:
    if VENDOR not in config:
        return []  # not enabled in device-config.yaml
    return [AcmeBackend.from_config(parse_section(VENDOR, AcmeConfig, config[VENDOR]))]
