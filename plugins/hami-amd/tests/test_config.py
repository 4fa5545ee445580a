"""The ``amd:`` section of device-config.yaml (HAMi ``AMDConfig`` and the chart defaults)."""

from __future__ import annotations

from pathlib import Path

from amd_testlib import amd_container, container, make_engine, make_pod, parse_config

import hami_amd.plugin
from hami_amd.config import AmdConfig
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks, assert_fields


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_amd.plugin, "amd", AmdConfig, ["amd.com/gpu"]
    bad_sections = [{"resourceCountName": ""}, {"resourceCountNmae": "amd.com/gpu"}, {"memoryFactor": 2},
                    {"resourceMemoryName": ["amd.com/gpumem"]}, {"resourceCoreName": 100}]


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert isinstance(cfg, AmdConfig)
    assert_fields(cfg, resource_count_name="amd.com/gpu", resource_memory_name="amd.com/gpumem",
                  resource_core_name="amd.com/gpucores")


def test_custom_resource_names_flow_into_requests_and_admission() -> None:
    engine = make_engine({"resourceCountName": "amd.com/vgpu", "resourceMemoryName": "amd.com/vgpu-mem",
                          "resourceCoreName": "amd.com/vgpu-cores"})
    pod = make_pod(container("custom", limits={"amd.com/vgpu": "2", "amd.com/vgpu-mem": "3000",
                                               "amd.com/vgpu-cores": "30"}),
                   amd_container("default-names", num=1))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"AMD": DeviceRequest("AMD", 2, 3000, 0, 30)}
    assert reqs.containers[1] == {}  # the chart names are no longer read
    assert engine.admit(pod)["spec"]["schedulerName"] == "hami-scheduler"
    assert engine.admit(make_pod(amd_container()))["spec"].get("schedulerName") is None


def test_empty_memory_and_core_names_are_not_read() -> None:
    engine = make_engine({"resourceMemoryName": "", "resourceCoreName": ""})
    req = engine.requests(make_pod(amd_container(mem=4096, cores=25))).containers[0]["AMD"]
    assert req == DeviceRequest("AMD", 1, 0, 0, 100)


def test_yaml_section_with_an_empty_body(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("amd:\n", encoding="utf-8")
    engine = Engine(path, plugins=make_engine().plugins)
    assert sorted(engine.backends) == ["AMD"]
