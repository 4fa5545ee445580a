"""Fixtures for the core's tests: an engine with the vendor-neutral Acme plugin and a settable clock."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
from core_helpers import T0, AcmePlugin

from hami_core.engine.facade import Engine
from hami_core.plugins.manager import get_plugin_manager

EngineFactory = Callable[..., Engine]


@pytest.fixture
def clock() -> list[float]:
    """A settable clock: ``clock[0]`` is "now"."""
    return [T0]


@pytest.fixture
def make_engine(clock: list[float]) -> EngineFactory:
    def factory(config: Mapping[str, Any] | None = None, *extra: object) -> Engine:
        pm = get_plugin_manager(load_entrypoints=False, plugins=[AcmePlugin(), *extra])
        return Engine(config if config is not None else {"acme": {}}, plugins=pm, clock=lambda: clock[0])

    return factory


@pytest.fixture
def engine(make_engine: EngineFactory) -> Engine:
    return make_engine()
