"""The ``cambricon:`` section of device-config.yaml (vendors D.1, scheduler §10.1) and its ``models`` list."""

from __future__ import annotations

from typing import Any

import pytest
from cambricon_testlib import MODELS, make_engine

import hami_cambricon.plugin
from hami_cambricon.config import CambriconConfig, MluModelSpec, parse_config
from hami_core.plugins.errors import ConfigError
from hami_core.testing import ConfigSectionChecks, assert_fields


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_cambricon.plugin, "cambricon", CambriconConfig, ["cambricon.com/vmlu"]
    bad_sections = [
        {"resourceCountNmae": "cambricon.com/vmlu"}, {"resourceCountName": ""}, {"resourceCoreName": ""},
        {"legacyAssignedAnnotation": "sometimes"}, {"models": {"name": "MLU370"}},
        ({"models": [{"name": "MLU370"}]}, "models.0.resourceCountName"),
        ({"models": [{"name": "MLU 370", "resourceCountName": "a"}]}, "models.0.name"),
        ({"models": [{"name": "MLU370", "resourceCountName": "a", "colour": "red"}]}, "models.0.colour"),
        ({"models": [{"name": "MLU370", "resourceCountName": "a", "nodeSelector": ["x"]}]}, "models.0.nodeSelector"),
        ({"models": [{"name": "M" * 33, "resourceCountName": "a"}]}, "models.0.name"),
    ]

    def parse(self, value: Any) -> CambriconConfig:
        # hami-cambricon's own parser: parse_section, then the rules across ``models`` entries.
        return parse_config(value)


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert_fields(cfg, resource_count_name="cambricon.com/vmlu", resource_memory_name="cambricon.com/mlu.smlu.vmemory",
                  resource_core_name="cambricon.com/mlu.smlu.vcore", models=[])
    assert cfg.legacy_assigned_annotation is False
    assert cfg.specs == (MluModelSpec("MLU", "cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory",
                                      "cambricon.com/mlu.smlu.vcore"),)


def test_camel_case_keys_as_in_the_chart() -> None:
    cfg = parse_config({"resourceCountName": "cambricon.com/mlu",
                        "resourceMemoryName": "cambricon.com/mlu370.smlu.vmemory",
                        "resourceCoreName": "cambricon.com/mlu370.smlu.vcore", "legacyAssignedAnnotation": True})
    assert isinstance(cfg, CambriconConfig)
    (spec,) = cfg.specs
    assert (spec.name, spec.count, spec.memory, spec.cores) == (
        "MLU", "cambricon.com/mlu", "cambricon.com/mlu370.smlu.vmemory", "cambricon.com/mlu370.smlu.vcore")
    assert cfg.legacy_assigned_annotation is True


def test_empty_models_list_is_the_hami_default() -> None:
    assert parse_config({"models": []}).specs == parse_config({}).specs


def test_models_resolve_with_per_model_defaults() -> None:
    cfg = parse_config({"models": [
        {"name": "MLU370", "resourceCountName": "cambricon.com/mlu370.vmlu"},
        {"name": "MLU590", "resourceCountName": "cambricon.com/mlu590.vmlu",
         "resourceMemoryName": "cambricon.com/mlu590.mem", "resourceCoreName": "cambricon.com/mlu590.core",
         "nodeSelector": {"accelerator": "mlu590"}},
    ]})
    mlu370, mlu590 = cfg.specs
    assert (mlu370.name, mlu370.count, mlu370.memory, mlu370.cores, dict(mlu370.node_selector)) == (
        "MLU370", "cambricon.com/mlu370.vmlu", "cambricon.com/mlu370.smlu.vmemory", "cambricon.com/mlu370.smlu.vcore",
        {})
    assert (mlu590.memory, mlu590.cores, dict(mlu590.node_selector)) == (
        "cambricon.com/mlu590.mem", "cambricon.com/mlu590.core", {"accelerator": "mlu590"})
    assert mlu370.to_allocate_annotation == "hami.io/cambricon-mlu370-devices-to-allocate"
    assert mlu590.allocated_annotation == "hami.io/cambricon-mlu590-devices-allocated"
    assert mlu370.device_id("n1", 2) == "n1-cambricon-mlu370-2"
    assert cfg.spec("MLU590") is mlu590
    assert cfg.spec("MLU") is None


def test_model_may_leave_out_memory() -> None:
    (spec,) = parse_config({"models": [{"name": "MLU220", "resourceCountName": "x.com/mlu220",
                                        "resourceMemoryName": ""}]}).specs
    assert spec.memory == ""


def test_custom_resource_names_flow_into_requests() -> None:
    engine = make_engine({"resourceCountName": "cambricon.com/mlu",
                          "resourceMemoryName": "cambricon.com/mlu370.smlu.vmemory",
                          "resourceCoreName": "cambricon.com/mlu370.smlu.vcore"})
    assert engine.backends["MLU"].resource_names.count == "cambricon.com/mlu"


@pytest.mark.parametrize(("models", "field", "text"), [
    ([{"name": "MLU370", "resourceCountName": "a"}, {"name": "mlu370", "resourceCountName": "b"}],
     "cambricon.models.1.name", "repeats models.0"),
    # A backend receives every device whose type contains its name (vendors A.3, J.3).
    ([{"name": "MLU370", "resourceCountName": "a"}, {"name": "MLU370-X8", "resourceCountName": "b"}],
     "cambricon.models.1.name", "must not contain one another"),
    ([{"name": "MLU370", "resourceCountName": "cambricon.com/vmlu"},
      {"name": "MLU590", "resourceCountName": "cambricon.com/vmlu"}],
     "cambricon.models.1.resourceCountName", "also the count resource of models.0"),
    ([{"name": "MLU370", "resourceCountName": "a", "resourceCoreName": "cambricon.com/mlu.smlu.vcore"},
      {"name": "MLU590", "resourceCountName": "b", "resourceCoreName": "cambricon.com/mlu.smlu.vcore"}],
     "cambricon.models.1.nodeSelector", "same capacity"),
    ([{"name": "MLU370", "resourceCountName": "a", "resourceCoreName": "c", "nodeSelector": {"accelerator": "mlu370"}},
      {"name": "MLU590", "resourceCountName": "b", "resourceCoreName": "c", "nodeSelector": {"zone": "z1"}}],
     "cambricon.models.1.nodeSelector", "same capacity"),
])
def test_models_that_would_overlap_are_refused(models: list, field: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"models": models})
    assert f"{field}:" in str(info.value)
    assert text in str(info.value)


def test_shared_capacity_with_exclusive_selectors_is_accepted() -> None:
    cfg = parse_config({"models": [
        {"name": "MLU370", "resourceCountName": "a", "resourceCoreName": "c",
         "nodeSelector": {"accelerator": "mlu370"}},
        {"name": "MLU590", "resourceCountName": "b", "resourceCoreName": "c",
         "nodeSelector": {"accelerator": "mlu590"}},
    ]})
    assert [s.name for s in cfg.specs] == ["MLU370", "MLU590"]


def test_top_level_names_do_not_mix_with_models() -> None:
    with pytest.raises(ConfigError, match=r"cambricon\.resourceCountName: cannot be combined with cambricon\.models"):
        parse_config({"resourceCountName": "cambricon.com/vmlu", **MODELS})
