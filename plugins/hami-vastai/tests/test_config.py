"""The ``vastai:`` section of device-config.yaml (HAMi ``VastaiConfig``, chart value ``vastaiResourceName``)."""

from __future__ import annotations

from pathlib import Path

from vastai_testlib import VA, container, make_engine, make_pod, parse_config, va_container

import hami_vastai.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks
from hami_vastai.config import VastaiConfig


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_vastai.plugin, "vastai", VastaiConfig, [VA]
    # HAMi's section has one key: a memory or core name (another vendor's key) is refused, as a typo is.
    bad_sections = [{"resourceCountName": ""}, {"resourceCountName": ["vastaitech.com/va"]},
                    {"resourceCountName": 1}, {"resourceCountNmae": VA}, {"resourceMemoryName": "vastaitech.com/mem"},
                    {"resourceCoreName": "vastaitech.com/core"}, {"memoryFactor": 2}]


def test_chart_default() -> None:
    cfg = parse_config({})
    assert isinstance(cfg, VastaiConfig)
    assert cfg.resource_count_name == "vastaitech.com/va"


def test_camel_case_key_as_in_the_chart() -> None:
    assert parse_config({"resourceCountName": "vastaitech.com/vgpu"}).resource_count_name == "vastaitech.com/vgpu"


def test_custom_resource_name_flows_into_requests_admission_and_health() -> None:
    # HAMi's config_test "Vastai only": resourceCountName vastaitech.com/vgpu.
    engine = make_engine({"resourceCountName": "vastaitech.com/vgpu"})
    pod = make_pod(container("custom", limits={"vastaitech.com/vgpu": "2"}), va_container("chart-name"))
    reqs = engine.requests(pod)
    assert reqs.containers == ({"Vastai": DeviceRequest("Vastai", 2, 0, 100, 0)}, {})
    assert engine.admit(pod)["spec"]["schedulerName"] == "hami-scheduler"
    assert engine.admit(make_pod(va_container()))["spec"].get("schedulerName") is None
    assert engine.backends["Vastai"].resource_names.count == "vastaitech.com/vgpu"


def test_yaml_section_with_an_empty_body(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("vastai:\n", encoding="utf-8")
    engine = Engine(path, plugins=make_engine().plugins)
    assert sorted(engine.backends) == ["Vastai"]
