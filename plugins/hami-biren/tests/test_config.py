"""The ``biren:`` section of device-config.yaml (HAMi ``BirenConfig``, chart value ``birenResourceName``)."""

from __future__ import annotations

from pathlib import Path

from biren_testlib import GPU, container, gpu_container, make_engine, make_pod, parse_config

import hami_biren.plugin
from hami_biren.config import BirenConfig
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks, assert_fields


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_biren.plugin, "biren", BirenConfig, [GPU]
    bad_sections = [{"resourceCountName": ""}, {"resourceCountName": ["birentech.com/gpu"]},
                    {"resourceCountName": 7}, {"resourceCountNmae": GPU},
                    # Biren has no memory or core resource: other vendors' keys are typos here.
                    {"resourceMemoryName": "birentech.com/gpumem"}, {"resourceCoreName": "birentech.com/gpucores"}]


def test_chart_default() -> None:
    assert_fields(parse_config({}), resource_count_name="birentech.com/gpu")


def test_camel_case_key_as_in_the_chart() -> None:
    assert parse_config({"resourceCountName": "birentech.com/1-2-gpu"}).resource_count_name == "birentech.com/1-2-gpu"


def test_custom_resource_name_flows_into_requests_and_admission() -> None:
    # The device plugin serves SVI-2 instances as birentech.com/1-2-gpu; a scheduler configured for that name.
    engine = make_engine({"resourceCountName": "birentech.com/1-2-gpu"})
    pod = make_pod(container("svi", limits={"birentech.com/1-2-gpu": "2"}), gpu_container("default-name"))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"Biren": DeviceRequest("Biren", 2, 0, 100, 0)}
    assert reqs.containers[1] == {}  # the chart name is no longer read
    assert engine.admit(pod)["spec"]["schedulerName"] == "hami-scheduler"
    assert engine.admit(make_pod(gpu_container()))["spec"].get("schedulerName") is None


def test_yaml_section_with_an_empty_body(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("biren:\n", encoding="utf-8")
    engine = Engine(path, plugins=make_engine().plugins)
    assert sorted(engine.backends) == ["Biren"]
