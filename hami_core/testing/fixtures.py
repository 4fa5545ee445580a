"""Fixtures for plugin authors, registered by :mod:`hami_core.testing.plugin`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hami_core.plugins.manager import HamiPluginManager, get_plugin_manager
from hami_core.testing import factories
from hami_core.testing.builders import T0, Clock
from hami_core.testing.recorder import HookRecorder


@pytest.fixture
def hami_plugin_manager() -> HamiPluginManager:
    """A fresh plugin manager with the built-in plugins only (no ``hami.devices`` entry points)."""
    return get_plugin_manager(load_entrypoints=False)


class PluginRegistration:
    """What ``register_plugin`` returns: the registered name; as a context manager, unregisters on exit."""

    def __init__(self, pm: HamiPluginManager, plugin: object, name: str) -> None:
        self.pm = pm
        self.plugin = plugin
        self.name = name

    def unregister(self) -> None:
        if self.pm.is_registered(self.plugin):
            self.pm.unregister(self.plugin)

    def __enter__(self) -> PluginRegistration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unregister()


@pytest.fixture
def register_plugin(hami_plugin_manager: HamiPluginManager) -> Iterator[Callable[..., PluginRegistration]]:
    """Register a plugin for this test only: ``register_plugin(module_or_object, name=None, pm=None)``.

    The plugin goes into ``hami_plugin_manager`` (or ``pm``) at once and is unregistered at teardown, or at
    the end of a ``with register_plugin(p):`` block. Its hook signatures are checked as the loader does.
    """
    done: list[PluginRegistration] = []

    def register(plugin: object, name: str | None = None, pm: HamiPluginManager | None = None) -> PluginRegistration:
        target = pm if pm is not None else hami_plugin_manager
        label = name or getattr(plugin, "__name__", None) or repr(plugin)
        target.register(plugin, name=label)
        target.check_pending()
        done.append(PluginRegistration(target, plugin, label))
        return done[-1]

    yield register
    for registration in reversed(done):
        registration.unregister()


@pytest.fixture
def make_node() -> Callable[..., dict[str, Any]]:
    """Node factory: ``make_node(annotations={...}, allocatable={...})``; names default to ``node-1``, ``node-2``...

    Keywords as :func:`hami_core.testing.factories.node`.
    """
    counter = itertools.count(1)

    def factory(name: str | None = None, **kwargs: Any) -> dict[str, Any]:
        return factories.node(name or f"node-{next(counter)}", **kwargs)

    return factory


@pytest.fixture
def make_pod() -> Callable[..., dict[str, Any]]:
    """Pod factory: ``make_pod(make_pod.container(limits={...}), gpu_policy="binpack")``; names ``pod-1``...

    Keywords as :func:`hami_core.testing.factories.pod`; ``make_pod.container`` builds containers.
    """
    counter = itertools.count(1)

    def factory(*containers: dict[str, Any], name: str | None = None, **kwargs: Any) -> dict[str, Any]:
        return factories.pod(*containers, name=name or f"pod-{next(counter)}", **kwargs)

    factory.container = factories.container  # type: ignore[attr-defined]
    return factory


@pytest.fixture
def clock() -> Clock:
    """A fake engine clock at :data:`~hami_core.testing.builders.T0`: ``make_engine(clock=clock)``, then
    ``clock.now += seconds`` to let time pass. A conftest or module fixture of the same name takes precedence."""
    return Clock(T0)


@pytest.fixture
def hami_hook_recorder(hami_plugin_manager: HamiPluginManager) -> Iterator[HookRecorder]:
    """A :class:`~hami_core.testing.recorder.HookRecorder` on ``hami_plugin_manager`` for this test."""
    recorder = HookRecorder(hami_plugin_manager)
    yield recorder
    recorder.finish_recording()
