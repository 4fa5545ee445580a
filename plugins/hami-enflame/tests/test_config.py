"""The ``enflame:`` section: chart defaults, HAMi's fallbacks for the DRS names, bad fields (config.go)."""

from __future__ import annotations

import pytest
from enflame_testlib import backends

from hami_core.plugins.errors import ConfigError
from hami_enflame.config import EnflameConfig, parse_config


def test_defaults() -> None:
    cfg = parse_config(None)
    assert cfg == parse_config({})
    assert cfg.resource_name_gcu == "enflame.com/gcu"
    assert (cfg.drs_resource, cfg.memory_resource, cfg.core_resource) == (
        "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core")


def test_every_camel_case_key_is_read() -> None:
    gcu, drs = backends(resourceNameGCU="acme/gcu", resourceNameDRSGCU="acme/drs", resourceNameGCUMemory="acme/mem",
                        resourceNameGCUCore="acme/core", resourceNameVGCU="acme/vgcu",
                        resourceNameVGCUPercentage="acme/vgcu-pct")
    assert gcu.resource_names.count == "acme/gcu"
    assert drs.resource_names.all() == ("acme/drs", "acme/mem", "acme/core")
    assert drs.config.resource_name_vgcu_percentage == "acme/vgcu-pct"


def test_legacy_vgcu_name_is_the_drs_fallback() -> None:
    # InitEnflameDevice: DRS name = resourceNameDRSGCU, else resourceNameVGCU, else enflame.com/drs-gcu.
    assert backends(resourceNameVGCU="enflame.com/vgcu")[1].resource_names.count == "enflame.com/vgcu"
    assert backends(resourceNameDRSGCU="", resourceNameVGCU="")[1].resource_names.count == "enflame.com/drs-gcu"
    assert backends(resourceNameGCUMemory="")[1].resource_names.memory == "enflame.com/gcu-memory"


@pytest.mark.parametrize(("section", "field"), [
    ({"resourceNameGPU": "x"}, "enflame.resourceNameGPU"),
    ({"resourceNameGCU": ""}, "enflame.resourceNameGCU"),
    ({"resourceNameDRSGCU": 3}, "enflame.resourceNameDRSGCU"),
])
def test_bad_field_names_the_field(section: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config(section)


def test_section_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="enflame"):
        parse_config(["enflame.com/gcu"])
    assert isinstance(parse_config({}), EnflameConfig)
