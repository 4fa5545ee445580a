"""The pytest plugin (entry point ``pytest11: hami``): adds the ``hami_testing`` ini key and the fixtures.

Set ``hami_testing = false`` in ``[tool.pytest.ini_options]`` (or ``-o hami_testing=false``) to keep the
fixtures out of a test session; the conformance base class still works, since it brings its own fixtures.
"""

from __future__ import annotations

from typing import Any

import pytest

INI_KEY = "hami_testing"
FIXTURES_PLUGIN = "hami.testing.fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI_KEY, "load the hami_core.testing fixtures (hami_plugin_manager, make_node, ...)",
                  type="bool", default=True)


def pytest_configure(config: pytest.Config) -> None:
    if not enabled(config) or config.pluginmanager.has_plugin(FIXTURES_PLUGIN):
        return
    from hami_core.testing import fixtures

    config.pluginmanager.register(fixtures, FIXTURES_PLUGIN)


def enabled(config: Any) -> bool:
    """Whether the ini key leaves the fixtures on."""
    try:
        return bool(config.getini(INI_KEY))
    except ValueError:  # the key was not declared: this module was not loaded as a plugin
        return False
