"""``HamiPluginManager.backends``: one call per plugin, typed results, errors that name the plugin."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from hami_core import hookimpl
from hami_core.plugins.errors import ConfigError, PluginError
from hami_core.plugins.manager import HamiPluginManager, get_plugin_manager
from hami_core.plugins.types import DeviceBackend, ResourceNames


def _backend(name: str, vendor: str = "acme") -> DeviceBackend:
    names = ResourceNames(f"{vendor}.example.com/{name.lower()}")
    return DeviceBackend(name=name, vendor=vendor, resource_names=names)


class Returns:
    """A plugin whose ``hami_device_backends`` returns ``result`` and records the config it saw."""

    def __init__(self, name: str, result: object) -> None:
        self.__name__ = name
        self.result = result
        self.seen: list[Mapping[str, Any]] = []

    @hookimpl
    def hami_device_backends(self, config: Mapping[str, Any]) -> object:
        self.seen.append(config)
        return self.result


class Raises:
    """A plugin whose ``hami_device_backends`` raises ``error``."""

    def __init__(self, name: str, error: Exception) -> None:
        self.__name__ = name
        self.error = error

    @hookimpl
    def hami_device_backends(self, config: Mapping[str, Any]) -> Iterable[DeviceBackend]:
        raise self.error


def _manager(*plugins: object) -> HamiPluginManager:
    return get_plugin_manager(load_entrypoints=False, plugins=plugins)


def test_backends_are_sorted_and_stamped_with_their_plugin() -> None:
    config = {"acme": {"split": 4}}
    acme = Returns("acme", [_backend("ACME2"), _backend("ACME1")])
    zeta = Returns("zeta", (_backend("ZETA", vendor="zeta"),))

    backends = _manager(zeta, acme).backends(config)

    assert [(b.name, b.plugin) for b in backends] == [("ACME1", "acme"), ("ACME2", "acme"), ("ZETA", "zeta")]
    assert acme.seen == [config] and zeta.seen == [config]


def test_none_and_empty_results_enable_nothing() -> None:
    assert _manager(Returns("none", None), Returns("empty", [])).backends({}) == []


def test_impl_may_omit_the_config_argument() -> None:
    class NoArgs:
        __name__ = "noargs"

        @hookimpl
        def hami_device_backends(self) -> list[DeviceBackend]:
            return [_backend("NOARGS")]

    assert [b.name for b in _manager(NoArgs()).backends({})] == ["NOARGS"]


def test_non_device_backend_item_names_the_plugin() -> None:
    pm = _manager(Returns("sloppy", [_backend("OK"), {"name": "NOT-A-BACKEND"}]))

    with pytest.raises(PluginError, match=r"plugin 'sloppy'.*returned dict.*expected DeviceBackend"):
        pm.backends({})


def test_non_iterable_result_names_the_plugin() -> None:
    pm = _manager(Returns("single", _backend("SINGLE")))

    with pytest.raises(PluginError, match=r"plugin 'single'.*TypeError"):
        pm.backends({})


def test_duplicate_backend_names_name_both_plugins() -> None:
    pm = _manager(Returns("first", [_backend("GPU")]), Returns("second", [_backend("GPU", vendor="other")]))

    with pytest.raises(PluginError) as info:
        pm.backends({})

    message = str(info.value)
    assert "'GPU'" in message and "'first'" in message and "'second'" in message


def test_duplicate_backend_name_within_one_plugin() -> None:
    pm = _manager(Returns("twice", [_backend("GPU"), _backend("GPU")]))

    with pytest.raises(PluginError, match=r"'GPU' is registered twice.*'twice'.*'twice'"):
        pm.backends({})


def test_config_error_propagates_unchanged() -> None:
    error = ConfigError("acme.split: must be >= 1, got 0")
    pm = _manager(Raises("acme", error))

    with pytest.raises(ConfigError) as info:
        pm.backends({"acme": {"split": 0}})

    assert info.value is error


def test_other_exceptions_are_wrapped_naming_the_plugin() -> None:
    error = KeyError("nvidia")
    pm = _manager(Raises("fragile", error))

    with pytest.raises(PluginError, match=r"plugin 'fragile'.*KeyError") as info:
        pm.backends({})

    assert info.value.__cause__ is error


def test_invalid_backend_built_by_the_plugin_is_attributed_to_it() -> None:
    class Invalid:
        __name__ = "invalid"

        @hookimpl
        def hami_device_backends(self) -> list[DeviceBackend]:
            return [DeviceBackend(name="BAD,NAME", vendor="x", resource_names=ResourceNames("x.com/gpu"))]

    with pytest.raises(PluginError, match=r"plugin 'invalid'.*BAD,NAME"):
        _manager(Invalid()).backends({})


def test_wrapper_impl_is_rejected() -> None:
    class Wrapper:
        __name__ = "wrapper"

        @hookimpl(wrapper=True)
        def hami_device_backends(self):  # type: ignore[no-untyped-def]
            return (yield)

    with pytest.raises(PluginError, match=r"plugin 'wrapper'.*cannot be a wrapper"):
        _manager(Wrapper()).backends({})


def test_unmarked_hook_function_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    """A ``hami_*`` function without ``@hookimpl`` would be ignored by pluggy without a word."""
    import logging
    import types

    from hami_core.plugins.manager import get_plugin_manager

    module = types.ModuleType("forgetful_plugin")

    def hami_node_devices(backend, node):  # type: ignore[no-untyped-def]
        return []

    module.hami_node_devices = hami_node_devices  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="hami.plugins"):
        get_plugin_manager(load_entrypoints=False, plugins=[module])
    assert "hami_node_devices" in caplog.text and "@hookimpl" in caplog.text
