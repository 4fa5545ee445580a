"""Fixtures for the plugin-loader tests: fake distributions on ``sys.path``, never installs.

``tests/plugins/data/<dist>/`` each hold one ``*.dist-info`` plus the package its entry points name.
A test puts only the distributions it needs on ``sys.path``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import importlib_metadata
import pytest
import stevedore
from stevedore import _cache as stevedore_cache

from hami_core.plugins.manager import (
    ENTRY_POINT_GROUP,
    HamiPluginManager,
    PluginReport,
    get_plugin_manager,
)

DATA = Path(__file__).parent / "data"
FAKE_PACKAGE_PREFIX = "hami_test_"

LoadFn = Callable[..., HamiPluginManager]


@pytest.fixture(autouse=True)
def isolated_entry_points(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Keep every test's view of entry points and fake modules its own.

    The manager reads entry points through importlib_metadata, but stevedore's own caches are reset
    anyway so nothing here can leak through them, nor write to ``~/.cache/python-entrypoints``: its
    class-level ``ENTRY_POINT_CACHE`` (keyed by group only) and its module-level ``Cache`` (a memo keyed
    by ``sys.path`` plus files under a directory fixed at import from ``XDG_CACHE_HOME``).
    """
    monkeypatch.setattr(stevedore.ExtensionManager, "ENTRY_POINT_CACHE", {})
    cache = stevedore_cache.Cache(cache_dir=str(tmp_path / "stevedore-cache"))
    for name in ("get_group_all", "get_group_named", "get_single"):
        monkeypatch.setattr(stevedore_cache, name, getattr(cache, name))
    yield
    for module in [m for m in sys.modules if m.startswith(FAKE_PACKAGE_PREFIX)]:
        del sys.modules[module]


@pytest.fixture
def installed_entry_points() -> frozenset[str]:
    """Names of ``hami.devices`` entry points really installed in this environment (vendor plugins)."""
    return frozenset(ep.name for ep in importlib_metadata.entry_points(group=ENTRY_POINT_GROUP))


@pytest.fixture
def add_dists(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Put fake distributions (folder names under ``data/``) on ``sys.path`` for this test."""

    def add(*dists: str) -> None:
        for dist in reversed(dists):
            monkeypatch.syspath_prepend(str(DATA / dist))

    return add


@pytest.fixture
def load(add_dists: Callable[..., None], installed_entry_points: frozenset[str]) -> LoadFn:
    """Build a manager seeing only the given fake distributions.

    Really installed vendor plugins are blocked, so a colleague's half-written plugin in the venv
    cannot change what these tests observe.
    """

    def load(*dists: str, blocked: tuple[str, ...] = (), **kwargs: object) -> HamiPluginManager:
        add_dists(*dists)
        return get_plugin_manager(blocked=(*installed_entry_points, *blocked), **kwargs)  # type: ignore[arg-type]

    return load


@pytest.fixture
def report_of() -> Callable[[HamiPluginManager, str], PluginReport]:
    """``report_of(pm, name)``: the single report named ``name``."""

    def report_of(pm: HamiPluginManager, name: str) -> PluginReport:
        matches = [r for r in pm.reports if r.name == name]
        assert len(matches) == 1, pm.reports
        return matches[0]

    return report_of
