"""hami-core: HAMi's GPU-sharing scheduler in Python.

Public surface: :class:`Engine` (the embedding API), :data:`hookimpl` (the one import a plugin needs),
:func:`get_plugin_manager`, and the error hierarchy.
"""

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

__version__ = "0.1.0"

__all__ = [
    "AdmissionDenied",
    "AdmissionFailed",
    "ConfigError",
    "Decision",
    "Engine",
    "HamiError",
    "PermanentError",
    "PluginError",
    "TemporaryError",
    "WireFormatError",
    "__version__",
    "get_plugin_manager",
    "hookimpl",
]


def __getattr__(name: str) -> object:
    # Lazy so that `import hami_core` (e.g. by a plugin for `hookimpl`) stays cheap and cycle-free.
    if name in ("Engine", "Decision"):
        from hami_core.engine import facade

        return getattr(facade, name)
    if name == "get_plugin_manager":
        from hami_core.plugins.manager import get_plugin_manager

        return get_plugin_manager
    raise AttributeError(f"module 'hami_core' has no attribute {name!r}")
