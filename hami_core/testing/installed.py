"""Checks of an installed vendor distribution, as a pytest base class: the ``hami.devices`` entry point it
declares, the plugin manager loading it, and device configs that enable none of its backends.

A vendor subclasses :class:`InstalledDistribution` in a ``Test*`` class and names its distribution::

    class TestInstalled(InstalledDistribution):
        distribution = "hami-acme"
        entry_point = "acme"                 # the entry point's name, also the backends' vendor
        module = "hami_acme.plugin"
        version = "0.1.0"                    # optional: the version the tests pin
        enabled_config, backend_names = {"acme": {}}, ["ACME"]
        configs_without_backend = ({}, {"nvidia": {}})

        def test_acme_backend_has_hamis_keys(self) -> None:
            (b,) = self.installed_backends({"acme": {}}).values()
            assert_fields(b, name="ACME", register_annotation="hami.io/node-acme-register")

These checks need the distribution installed (``pip install -e plugins/hami-acme``), unlike the rest of a vendor's
tests, which build their plugin managers without entry points.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import DeviceBackend
from hami_core.testing.builders import plugin_manager

__all__ = ["InstalledDistribution", "assert_fields"]


def assert_fields(obj: object, **expected: Any) -> None:
    """Assert ``obj.<name> == value`` for every keyword; a failure lists every field that differs."""
    actual = {name: getattr(obj, name) for name in expected}
    wrong = {name: (actual[name], value) for name, value in expected.items() if actual[name] != value}
    assert not wrong, "fields differ (actual, expected): " + "; ".join(f"{k}: {v!r}" for k, v in wrong.items())


class InstalledDistribution:
    """Base class of a vendor's installed-distribution tests; see the module docstring for the attributes."""

    #: The distribution's name (``hami-acme``).
    distribution: ClassVar[str]
    #: The name of its one ``hami.devices`` entry point: the plugin's name and its backends' ``vendor``.
    entry_point: ClassVar[str]
    #: The module the entry point names (``hami_acme.plugin``).
    module: ClassVar[str]
    #: The version the distribution must have; ``None``: any (the loader's report must still give it).
    version: ClassVar[str | None] = None
    #: A device config that enables the vendor, and the names of the backends the installed plugin gives for it, in
    #: the plugin manager's order (by name).
    enabled_config: ClassVar[Mapping[str, Any]]
    backend_names: ClassVar[Sequence[str]]
    #: Device configs under which the plugin declares no backend (no section of its own, or an empty one).
    configs_without_backend: ClassVar[Sequence[Mapping[str, Any]]] = ({},)

    def installed_backends(self, config: Mapping[str, Any]) -> dict[str, DeviceBackend]:
        """The vendor's backends by name, as the plugin manager with every installed plugin builds them for
        ``config``; each must be registered by this entry point."""
        mine = [b for b in get_plugin_manager().backends(config) if b.vendor == self.entry_point]
        assert {b.plugin for b in mine} <= {self.entry_point}, [(b.name, b.plugin) for b in mine]
        return {b.name: b for b in mine}

    def test_distribution_declares_the_entry_point(self) -> None:
        dist = importlib.metadata.distribution(self.distribution)
        eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
        assert [(ep.name, ep.value) for ep in eps] == [(self.entry_point, self.module)]
        if self.version is not None:
            assert dist.version == self.version

    def test_entry_point_is_loaded_by_the_plugin_manager(self) -> None:
        pm = get_plugin_manager()
        reports = [r for r in pm.reports if r.name == self.entry_point]
        assert len(reports) == 1
        report = reports[0]
        assert report.status == "loaded", report.reason
        assert report.distribution == self.distribution
        assert report.version == importlib.metadata.version(self.distribution)
        assert pm.distribution_of(self.entry_point) == self.distribution

    def test_enabled_config_gives_the_backends(self) -> None:
        assert list(self.installed_backends(self.enabled_config)) == list(self.backend_names)

    def test_no_section_gives_no_backend(self) -> None:
        plugin = importlib.import_module(self.module)
        for config in self.configs_without_backend:
            assert plugin_manager(plugin).backends(config) == [], config
