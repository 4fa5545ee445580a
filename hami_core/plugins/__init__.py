"""The plugin contract: hook specifications, the objects plugins exchange, and the plugin manager."""

from hami_core.plugins.errors import (
    AdmissionDenied,
    AdmissionFailed,
    ConfigError,
    HamiError,
    PermanentError,
    PluginError,
    TemporaryError,
    WireFormatError,
)
from hami_core.plugins.hookspecs import hookimpl

__all__ = [
    "AdmissionDenied",
    "AdmissionFailed",
    "ConfigError",
    "HamiError",
    "PermanentError",
    "PluginError",
    "TemporaryError",
    "WireFormatError",
    "hookimpl",
]
