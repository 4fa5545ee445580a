"""The ``vnpus:`` section of device-config.yaml (vendors C.1-C.2, scheduler §10.1)."""

from __future__ import annotations

from typing import Any

import pytest
from ascend_testlib import chip_section, make_engine, make_pod, npu_container, parse_config
from hypothesis import given
from hypothesis import strategies as st

import hami_ascend.plugin
from hami_ascend.config import CHART_CONFIGS, SECTION, AscendConfig
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks

# chipName → (commonWord, allocatable, capacity, aiCore, aiCPU, superPod, [(template, MiB, aiCore, aiCPU)])
CHART = {
    "910A": ("Ascend910A", 32768, 32768, 30, 0, False,
             [("vir02", 2184, 2, 0), ("vir04", 4369, 4, 0), ("vir08", 8738, 8, 0), ("vir16", 17476, 16, 0)]),
    "910B2": ("Ascend910B2", 65536, 65536, 24, 6, False,
              [("vir03_1c_8g", 8192, 3, 1), ("vir06_1c_16g", 16384, 6, 1), ("vir12_3c_32g", 32768, 12, 3)]),
    "910B3": ("Ascend910B3", 65536, 65536, 20, 7, False,
              [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)]),
    "910B4-1": ("Ascend910B4-1", 65536, 65536, 20, 7, False,
                [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)]),
    "910B4": ("Ascend910B4", 32768, 32768, 20, 7, False,
              [("vir05_1c_8g", 8192, 5, 1), ("vir10_3c_16g", 16384, 10, 3)]),
    "310P3": ("Ascend310P", 21527, 24576, 8, 7, False,
              [("vir01", 3072, 1, 1), ("vir02", 6144, 2, 2), ("vir04", 12288, 4, 4)]),
    "Ascend910": ("Ascend910C", 65536, 65536, 20, 7, True,
                  [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)]),
}


def _chip(**keys: Any) -> dict[str, Any]:
    """A ``configs[]`` entry with the two keys every entry needs, then ``keys``."""
    return {"commonWord": "A", "resourceName": "x/y", **keys}


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_ascend.plugin, SECTION, AscendConfig, [{"commonWord": "Ascend910A"}]
    bad_sections = [
        {"hamiVnpuCore": "sometimes"}, {"hamiVnpuCores": True},
        ({"configs": [{"commonWord": "Ascend910B3"}]}, "configs.0.resourceName"),
        ({"configs": [{"resourceName": "huawei.com/Ascend910B3"}]}, "configs.0.commonWord"),
        ({"configs": [_chip(commonWord="Ascend,910")]}, "configs.0.commonWord"),
        ({"configs": [_chip(memoryAllocatable=-1)]}, "configs.0.memoryAllocatable"),
        ({"configs": [_chip(memoryCapacity="lots")]}, "configs.0.memoryCapacity"),
        ({"configs": [chip_section("Ascend910A", memoryCapacity=-1)]}, "configs.0.memoryCapacity"),
        ({"configs": [_chip(superPod="yes please")]}, "configs.0.superPod"),
        ({"configs": [_chip(templates=[{"name": "t", "memory": "16Gi"}])]}, "configs.0.templates.0.memory"),
        ({"configs": [_chip(templates=[{"name": "t", "memory": 1, "aicore": 1}])]}, "configs.0.templates.0.aicore"),
        ({"configs": [_chip(resourceNmae="x/z")]}, "configs.0.resourceNmae"),
    ]


def test_empty_section_means_the_chart_defaults() -> None:
    cfg = parse_config(None)
    assert cfg == AscendConfig()
    assert cfg.hami_vnpu_core is False
    assert cfg.chips() == CHART_CONFIGS
    got = {c.chip_name: (c.common_word, c.memory_allocatable, c.memory_capacity, c.ai_core, c.ai_cpu, c.super_pod,
                         [(t.name, t.memory, t.ai_core, t.ai_cpu) for t in c.templates]) for c in cfg.chips()}
    assert got == CHART
    for chip in cfg.chips():
        word = chip.common_word
        assert (chip.resource_name, chip.resource_memory_name, chip.resource_core_name) == (
            f"huawei.com/{word}", f"huawei.com/{word}-memory", f"huawei.com/{word}-core")
        assert (chip.memory_factor, chip.runtime_class_name, chip.overwrite_env) == (1, "", False)


def test_camel_case_keys_as_in_the_chart() -> None:
    cfg = parse_config({"hamiVnpuCore": True, "configs": [{
        "chipName": "910B3", "commonWord": "Ascend910B3", "resourceName": "huawei.com/Ascend910B3",
        "resourceMemoryName": "huawei.com/Ascend910B3-memory", "resourceCoreName": "huawei.com/Ascend910B3-core",
        "memoryAllocatable": 65536, "memoryCapacity": 65536, "memoryFactor": 2, "aiCore": 20, "aiCPU": 7,
        "runtimeClassName": "ascend", "overwriteEnv": True, "superPod": False,
        "templates": [{"name": "big", "memory": 32768, "aiCore": 10, "aiCPU": 3},
                      {"name": "small", "memory": 16384, "aiCore": 5, "aiCPU": 1}]}]})
    (chip,) = cfg.chips()
    assert cfg.hami_vnpu_core is True
    assert (chip.memory_factor, chip.runtime_class_name, chip.overwrite_env) == (2, "ascend", True)
    # HAMi sorts templates by memory ascending at init.
    assert [t.name for t in chip.templates] == ["small", "big"]


def test_trim_rounds_up_to_a_template_then_the_whole_card() -> None:
    chip = {c.common_word: c for c in CHART_CONFIGS}["Ascend910A"]
    assert chip.trim(1) == (2184, "vir02")
    assert chip.trim(2184) == (2184, "vir02")
    assert chip.trim(2185) == (4369, "vir04")
    assert chip.trim(8738) == (8738, "vir08")
    assert chip.trim(17477) == (32768, "")
    assert chip.trim(32768) == (32768, "")
    assert chip.trim(32769) == (0, "")
    p310 = {c.common_word: c for c in CHART_CONFIGS}["Ascend310P"]
    # Between the largest template and the capacity the booked memory is memoryAllocatable, not capacity.
    assert p310.trim(24576) == (21527, "")


@given(chip=st.sampled_from(CHART_CONFIGS), memory=st.integers(min_value=0, max_value=70000))
def test_trim_is_stable_so_admission_can_run_twice(chip, memory: int) -> None:
    booked, name = chip.trim(memory)
    if memory > chip.memory_capacity:
        assert (booked, name) == (0, "")
        return
    assert chip.trim(booked) == (booked, name)
    if name:
        assert booked >= memory
        assert name in {t.name for t in chip.templates}
    else:
        assert booked == chip.memory_allocatable


def test_custom_resource_names_flow_into_requests() -> None:
    engine = make_engine({"configs": [chip_section("Ascend910B3", resourceName="example.com/npu",
                                                   resourceMemoryName="example.com/npu-mem",
                                                   resourceCoreName="example.com/npu-core")]})
    pod = make_pod({"name": "c", "resources": {"limits": {"example.com/npu": "1", "example.com/npu-mem": "16384"}}},
                   npu_container("Ascend910B3", 1, 16384, name="chart-names"))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"Ascend910B3": DeviceRequest("Ascend910B3", 1, 16384, 0, 0)}
    assert reqs.containers[1] == {}
    assert list(engine.backends) == ["Ascend910B3"]


def test_a_common_word_may_appear_once() -> None:
    with pytest.raises(ConfigError, match=r"vnpus: .*commonWord 'Ascend910B3' appears twice"):
        parse_config({"configs": [chip_section("Ascend910B3"), chip_section("Ascend910B3")]})
