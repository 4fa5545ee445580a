"""The plugin author's test kit: pytest fixtures, Node/Pod factories, unit-test builders, a hook recorder,
the conformance suite.

Installing hami-core registers :mod:`hami_core.testing.plugin` with pytest (entry point ``pytest11``), so a
vendor's tests get the fixtures ``hami_plugin_manager``, ``register_plugin``, ``make_node``, ``make_pod`` and
``hami_hook_recorder`` with no conftest. Opt out with ``hami_testing = false`` under
``[tool.pytest.ini_options]``.

A vendor proves its backend by subclassing :class:`DeviceBackendConformance` in a test module and giving
four fixtures (see ``docs/plugin-authoring.md``). Its own unit tests build their inputs with
:mod:`hami_core.testing.builders` (``Clock``, ``engine_with``, ``usage``, ``request``, ``fit_one``...).
"""

from __future__ import annotations

from hami_core.testing.builders import (
    T0,
    Clock,
    FakeNode,
    candidate,
    chosen,
    engine_with,
    fit_one,
    gpu_policy,
    local_time,
    plugin_manager,
    request,
    requesting,
    running_pod,
    usage,
)
from hami_core.testing.conformance import DeviceBackendConformance
from hami_core.testing.factories import container, device_container, node, pod
from hami_core.testing.recorder import HookCall, HookRecorder

__all__ = [
    "T0",
    "Clock",
    "DeviceBackendConformance",
    "FakeNode",
    "HookCall",
    "HookRecorder",
    "candidate",
    "chosen",
    "container",
    "device_container",
    "engine_with",
    "fit_one",
    "gpu_policy",
    "local_time",
    "node",
    "plugin_manager",
    "pod",
    "request",
    "requesting",
    "running_pod",
    "usage",
]
