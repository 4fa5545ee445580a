"""Built-in scheduling policy packages: whole policies that reach the engine only through the plugin hooks.

Each package is registered as a built-in plugin after HAMi's defaults (:data:`PACKAGES`, read by
:mod:`hami_core.default_plugins`) and declares, in its ``__init__``:

* ``SCHEDULER_SECTIONS``: ``{name: pydantic model}``, its own sections under ``scheduler:``, validated with the rest
  of the configuration (:func:`scheduler_sections`; so ``load_config`` names a bad field before any plugin loads);
* ``GPU_POLICIES``: ``{token: HAMi order}``, the GPU policy tokens it adds and the HAMi device order each starts from
  (:func:`gpu_policies`), which its ``hami_order_devices`` refines.

The engine's core names none of them.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType
from typing import Any

__all__ = ["PACKAGES", "gpu_policies", "scheduler_sections"]

#: The built-in policy packages, in registration order.
PACKAGES: tuple[str, ...] = ("hami_core.policies.fgd",)


@functools.cache
def _modules() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(name) for name in PACKAGES)


def _merged(attribute: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for module in _modules():
        out.update(getattr(module, attribute, {}))
    return out


@functools.cache
def scheduler_sections() -> dict[str, Any]:
    """Every package's ``scheduler:`` sections: name → the pydantic model that validates it."""
    return _merged("SCHEDULER_SECTIONS")


@functools.cache
def gpu_policies() -> dict[str, str]:
    """Every package's GPU policy tokens: token → the HAMi device order it starts from."""
    return _merged("GPU_POLICIES")
