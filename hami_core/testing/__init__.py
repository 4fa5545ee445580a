"""The plugin author's test kit: pytest fixtures, Node/Pod factories, a hook recorder, the conformance suite.

Installing hami-core registers :mod:`hami_core.testing.plugin` with pytest (entry point ``pytest11``), so a
vendor's tests get the fixtures ``hami_plugin_manager``, ``register_plugin``, ``make_node``, ``make_pod`` and
``hami_hook_recorder`` with no conftest. Opt out with ``hami_testing = false`` under
``[tool.pytest.ini_options]``.

A vendor proves its backend by subclassing :class:`DeviceBackendConformance` in a test module and giving
four fixtures (see ``docs/plugin-authoring.md``).
"""

from __future__ import annotations

from hami_core.testing.conformance import DeviceBackendConformance
from hami_core.testing.factories import container, node, pod
from hami_core.testing.recorder import HookCall, HookRecorder

__all__ = ["DeviceBackendConformance", "HookCall", "HookRecorder", "container", "node", "pod"]
