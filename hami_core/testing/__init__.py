"""The plugin author's test kit: pytest fixtures, Node/Pod factories, unit-test builders, a hook recorder,
the conformance suite.

Installing hami-core registers :mod:`hami_core.testing.plugin` with pytest (entry point ``pytest11``), so a
vendor's tests get the fixtures ``hami_plugin_manager``, ``register_plugin``, ``make_node``, ``make_pod``,
``clock`` and ``hami_hook_recorder`` with no conftest. Opt out with ``hami_testing = false`` under
``[tool.pytest.ini_options]``.

A vendor proves its backend by subclassing :class:`DeviceBackendConformance` in a test module and giving
four fixtures, or class attributes where they are plain data (see ``docs/plugin-authoring.md``), and its
installed distribution by subclassing :class:`InstalledDistribution`, its config section by subclassing
:class:`ConfigSectionChecks`. Its own unit tests build their inputs with
:mod:`hami_core.testing.builders` (``Clock``, ``engine_with``, ``usage``, ``request``, ``fit_one``...).
A node-side test drives its device plugin through :mod:`hami_core.testing.fake_kubelet` (imported on its own:
it needs gRPC, the ``node`` extra).
"""

from __future__ import annotations

from hami_core.testing.builders import (
    T0,
    Clock,
    FakeNode,
    VendorKit,
    candidate,
    chosen,
    container_limits,
    container_request,
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
from hami_core.testing.installed import InstalledDistribution, assert_fields
from hami_core.testing.recorder import HookCall, HookRecorder
from hami_core.testing.sections import ConfigSectionChecks

__all__ = [
    "T0",
    "Clock",
    "ConfigSectionChecks",
    "DeviceBackendConformance",
    "FakeNode",
    "HookCall",
    "HookRecorder",
    "InstalledDistribution",
    "VendorKit",
    "assert_fields",
    "candidate",
    "chosen",
    "container",
    "container_limits",
    "container_request",
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
