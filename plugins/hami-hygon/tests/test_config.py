"""The ``hygon:`` section of device-config.yaml (vendors E.1)."""

from __future__ import annotations

from pathlib import Path

from hygon_testlib import container, dcu_container, make_engine, make_pod, parse_config

import hami_hygon.plugin
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks, assert_fields
from hami_hygon.config import HygonConfig


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_hygon.plugin, "hygon", HygonConfig, ["hygon.com/dcunum"]
    bad_sections = [{"memoryFactor": -1}, {"memoryFactor": "lots"}, {"memoryFactor": 2**31}, {"memoryFactor": -3},
                    {"resourceCountName": ""}, {"resourceCountNmae": "hygon.com/dcunum"},
                    {"resourceMemoryName": ["hygon.com/dcumem"]}]


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert isinstance(cfg, HygonConfig)
    assert_fields(cfg, resource_count_name="hygon.com/dcunum", resource_memory_name="hygon.com/dcumem",
                  resource_core_name="hygon.com/dcucores", memory_factor=1)


def test_camel_case_keys_as_in_the_chart() -> None:
    cfg = parse_config({"resourceCountName": "hygon.com/dcu", "resourceMemoryName": "hygon.com/dcu-mem",
                        "resourceCoreName": "hygon.com/dcu-cores", "memoryFactor": 1024})
    assert (cfg.resource_count_name, cfg.resource_memory_name, cfg.resource_core_name, cfg.memory_factor) == (
        "hygon.com/dcu", "hygon.com/dcu-mem", "hygon.com/dcu-cores", 1024)


def test_custom_resource_names_flow_into_requests_and_admission() -> None:
    engine = make_engine({"resourceCountName": "hygon.com/dcu", "resourceMemoryName": "hygon.com/dcu-mem",
                          "resourceCoreName": "hygon.com/dcu-cores"})
    pod = make_pod(container("custom", limits={"hygon.com/dcu": "2", "hygon.com/dcu-mem": "3000",
                                               "hygon.com/dcu-cores": "30"}),
                   dcu_container("default-names", num=1))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"DCU": DeviceRequest("DCU", 2, 3000, 0, 30)}
    # The chart names are no longer read.
    assert reqs.containers[1] == {}
    assert engine.admit(pod)["spec"]["schedulerName"] == "hami-scheduler"
    assert engine.admit(make_pod(dcu_container()))["spec"].get("schedulerName") is None


def test_memory_factor_scales_requests_and_resource_names() -> None:
    engine = make_engine({"memoryFactor": 1024})
    assert engine.backends["DCU"].resource_names.memory_factor == 1024
    reqs = engine.requests(make_pod(dcu_container(mem=16, cores=50)))
    assert reqs.containers[0]["DCU"] == DeviceRequest("DCU", 1, 16384, 0, 50)


def test_memory_factor_zero_behaves_as_one() -> None:
    # Go's zero value when the key is omitted from a hand-written config: HAMi scales only when > 1.
    engine = make_engine({"memoryFactor": 0})
    assert engine.backends["DCU"].resource_names.memory_factor == 1
    assert engine.requests(make_pod(dcu_container(mem=2000))).containers[0]["DCU"].memreq == 2000


def test_yaml_section_with_an_empty_body(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("hygon:\n", encoding="utf-8")
    engine = Engine(path, plugins=make_engine().plugins)
    assert sorted(engine.backends) == ["DCU"]
