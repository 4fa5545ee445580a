"""The checks every vendor's device-config section owes to :func:`~hami_core.plugins.parse_section`, as a
pytest base class: an empty or null section means the defaults, anything but a mapping is refused, and every
invalid field is named ``<section>.<field>``, by the parser and by an engine built on the section.

A vendor subclasses :class:`ConfigSectionChecks` in a ``Test*`` class::

    class TestAcmeSection(ConfigSectionChecks):
        plugin = hami_acme.plugin
        section = "acme"
        model = AcmeConfig
        # one key: the field the error must name; or (section, "dotted.path") for a nested one
        bad_sections = [{"memoryFactor": -1}, {"resourceCountName": ""}, ({"models": [{}]}, "models.0.name")]

Each bad section is its own test, twice: through :func:`parse_section` and through an engine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from hami_core.plugins.errors import ConfigError
from hami_core.plugins.helpers import parse_section
from hami_core.testing.builders import engine_with

__all__ = ["ConfigSectionChecks"]


class ConfigSectionChecks:
    """Base class of a vendor's config-section tests; see the module docstring for the attributes."""

    #: The vendor's plugin module (for the engine checks).
    plugin: ClassVar[object]
    #: The device-config key (``acme``).
    section: ClassVar[str]
    #: The pydantic model the plugin validates the section into.
    model: ClassVar[type[BaseModel]]
    #: Invalid sections: a one-key mapping (the key is the field the error names) or ``(section, "dotted.field")``.
    bad_sections: ClassVar[Sequence[Mapping[str, Any] | tuple[Any, str]]] = ()
    #: Something other than a mapping that a user might write under the key (a list of resource names, say).
    not_a_mapping: ClassVar[Any] = ["x"]

    def parse(self, value: Any) -> BaseModel:
        """The section validated as the plugin validates it."""
        return parse_section(self.section, self.model, value)

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if {"bad_section", "field"} <= set(metafunc.fixturenames):
            cases = [case if isinstance(case, tuple) else (case, _only_key(case)) for case in self.bad_sections]
            metafunc.parametrize(("bad_section", "field"), cases, ids=[field for _, field in cases])

    def test_null_section_means_the_defaults(self) -> None:
        # `acme:` with an empty body in YAML is None: enabled with the defaults, as `acme: {}` is.
        assert self.parse(None) == self.parse({})

    def test_section_must_be_a_mapping(self) -> None:
        kind = type(self.not_a_mapping).__name__
        with pytest.raises(ConfigError, match=f"^{re.escape(self.section)}: must be a mapping, got {kind}$"):
            self.parse(self.not_a_mapping)

    def test_bad_values_name_the_field(self, bad_section: Any, field: str) -> None:
        with pytest.raises(ConfigError) as info:
            self.parse(bad_section)
        assert f"{self.section}.{field}:" in str(info.value)

    def test_bad_value_fails_the_engine_with_the_field(self, bad_section: Any, field: str) -> None:
        with pytest.raises(ConfigError) as info:
            engine_with(self.plugin, config={self.section: bad_section})
        assert f"{self.section}.{field}:" in str(info.value)


def _only_key(section: Mapping[str, Any]) -> str:
    if len(section) != 1:
        raise TypeError(f"a bad section without a field must have exactly one key, got {dict(section)!r}: "
                        "give it as (section, 'dotted.field')")
    return str(next(iter(section)))
