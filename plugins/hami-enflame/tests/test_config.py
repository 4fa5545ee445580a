"""The ``enflame:`` section: chart defaults, HAMi's fallbacks for the DRS names, bad fields (config.go)."""

from __future__ import annotations

from enflame_testlib import backends, parse_config

import hami_enflame.plugin
from hami_core.testing import ConfigSectionChecks
from hami_enflame.config import SECTION, EnflameConfig


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_enflame.plugin, SECTION, EnflameConfig, ["enflame.com/gcu"]
    bad_sections = [{"resourceNameGPU": "x"}, {"resourceNameGCU": ""}, {"resourceNameDRSGCU": 3}]


def test_defaults() -> None:
    cfg = parse_config(None)
    assert isinstance(cfg, EnflameConfig)
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
