"""The ``iluvatars:`` section of device-config.yaml (vendors F.1)."""

from __future__ import annotations

from typing import Any

import pytest
from iluvatar_testlib import make_engine, plugin_manager

from hami_core.engine.facade import Engine
from hami_core.plugins.errors import ConfigError
from hami_iluvatar.config import IluvatarChipConfig, chart_defaults, parse_config

FULL = {"chipName": "MR-V100", "commonWord": "MR-V100", "resourceCountName": "iluvatar.ai/MR-V100-vgpu",
        "resourceMemoryName": "iluvatar.ai/MR-V100.vMem", "resourceCoreName": "iluvatar.ai/MR-V100.vCore"}


def test_chart_defaults() -> None:
    chips = parse_config({})
    assert chips == parse_config(None) == chart_defaults()
    assert [(c.chip_name, c.common_word, c.resource_count_name, c.resource_memory_name, c.resource_core_name)
            for c in chips] == [
        ("MR-V100", "MR-V100", "iluvatar.ai/MR-V100-vgpu", "iluvatar.ai/MR-V100.vMem", "iluvatar.ai/MR-V100.vCore"),
        ("MR-V50", "MR-V50", "iluvatar.ai/MR-V50-vgpu", "iluvatar.ai/MR-V50.vMem", "iluvatar.ai/MR-V50.vCore"),
        ("BI-V150", "BI-V150", "iluvatar.ai/BI-V150-vgpu", "iluvatar.ai/BI-V150.vMem", "iluvatar.ai/BI-V150.vCore"),
        ("BI-V100", "BI-V100", "iluvatar.ai/BI-V100-vgpu", "iluvatar.ai/BI-V100.vMem", "iluvatar.ai/BI-V100.vCore"),
    ]


def test_camel_case_entry_as_in_the_chart() -> None:
    (chip,) = parse_config([FULL])
    assert chip == IluvatarChipConfig(chip_name="MR-V100", common_word="MR-V100",
                                      resource_count_name="iluvatar.ai/MR-V100-vgpu",
                                      resource_memory_name="iluvatar.ai/MR-V100.vMem",
                                      resource_core_name="iluvatar.ai/MR-V100.vCore")


def test_common_word_and_names_may_differ_from_the_chip() -> None:
    (chip,) = parse_config([{"chipName": "BI-V150", "commonWord": "BI150", "resourceCountName": "acme.io/bi150",
                             "resourceMemoryName": "acme.io/bi150-mem", "resourceCoreName": ""}])
    assert (chip.common_word, chip.resource_count_name, chip.resource_memory_name, chip.resource_core_name) == (
        "BI150", "acme.io/bi150", "acme.io/bi150-mem", "")


def test_missing_keys_follow_the_chart_pattern() -> None:
    (chip,) = parse_config([{"chipName": "BI-V200"}])
    assert (chip.common_word, chip.resource_count_name, chip.resource_memory_name, chip.resource_core_name) == (
        "BI-V200", "iluvatar.ai/BI-V200-vgpu", "iluvatar.ai/BI-V200.vMem", "iluvatar.ai/BI-V200.vCore")
    (chip,) = parse_config([{"chipName": "BI-V200", "commonWord": "BIV2"}])
    assert (chip.common_word, chip.resource_count_name) == ("BIV2", "iluvatar.ai/BI-V200-vgpu")


def error(section: Any) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(section)
    return str(info.value)


def test_unknown_key_is_named() -> None:
    message = error([FULL, {**FULL, "chipName": "MR-V50", "commonWord": "MR-V50", "memoryFactor": 2}])
    assert "iluvatars.1.memoryFactor" in message
    assert "Extra inputs are not permitted" in message


def test_missing_chip_name_is_named() -> None:
    assert "iluvatars.0.chipName: Field required" in error([{"commonWord": "MR-V100"}])


def test_wrong_type_is_named() -> None:
    assert "iluvatars.0.resourceCountName" in error([{**FULL, "resourceCountName": 5}])
    assert "iluvatars.0.resourceCountName" in error([{**FULL, "resourceCountName": ""}])


@pytest.mark.parametrize("word", ["MR V100", "MR-V100,x", "MR:V100", "a;b", "-MR", "x" * 44])
def test_common_word_must_fit_in_annotation_keys(word: str) -> None:
    assert "iluvatars.0.commonWord" in error([{**FULL, "commonWord": word}])


def test_duplicate_common_word() -> None:
    message = error([FULL, {**FULL, "chipName": "MR-V100b"}])
    assert message == "invalid configuration: iluvatars.1.commonWord: 'MR-V100' is already used by iluvatars.0"


@pytest.mark.parametrize("section", [{"chipName": "MR-V100"}, "MR-V100", 3])
def test_section_must_be_a_list(section: Any) -> None:
    assert error(section).startswith("iluvatars: must be a list of chip entries")


def test_entry_must_be_a_mapping() -> None:
    assert "iluvatars.0" in error(["MR-V100"])


def test_engine_reports_a_bad_section() -> None:
    with pytest.raises(ConfigError, match=r"iluvatars\.0\.chipName"):
        make_engine([{"commonWord": "x"}])


def test_engine_reads_the_section_from_yaml(tmp_path: Any) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("iluvatars:\n", encoding="utf-8")
    engine = Engine(str(path), plugins=plugin_manager())
    assert sorted(engine.backends) == ["BI-V100", "BI-V150", "MR-V100", "MR-V50"]
    path.write_text("iluvatars:\n- chipName: BI-V150\n", encoding="utf-8")
    engine = Engine(str(path), plugins=plugin_manager())
    assert list(engine.backends) == ["BI-V150"]
