"""The ``metax:`` section of device-config.yaml (vendors G, scheduler §10.1)."""

from __future__ import annotations

import pytest
from metax_testlib import container, make_engine, make_pod

from hami_core.plugins.errors import ConfigError
from hami_core.plugins.types import DeviceRequest
from hami_metax.config import MetaxConfig, parse_config


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert cfg == parse_config(None)
    assert cfg.resource_count_name == "metax-tech.com/gpu"
    assert cfg.resource_vcount_name == "metax-tech.com/sgpu"
    assert cfg.resource_vmemory_name == "metax-tech.com/vmemory"
    assert cfg.resource_vcore_name == "metax-tech.com/vcore"
    assert cfg.sgpu_topology_aware is False


def test_camel_case_keys_as_in_the_chart() -> None:
    cfg = parse_config({"resourceCountName": "metax-tech.com/gpu", "resourceVCountName": "metax-tech.com/sgpu",
                        "resourceVMemoryName": "metax-tech.com/vmemory", "resourceVCoreName": "metax-tech.com/vcore",
                        "sgpuTopologyAware": True})
    assert isinstance(cfg, MetaxConfig)
    assert cfg.sgpu_topology_aware is True
    assert cfg != parse_config({})
    assert hash(cfg) == hash(parse_config({"sgpuTopologyAware": True}))


def test_custom_resource_names_flow_into_requests() -> None:
    engine = make_engine({"resourceCountName": "example.com/mx", "resourceVCountName": "example.com/smx",
                          "resourceVMemoryName": "example.com/smx-mem", "resourceVCoreName": "example.com/smx-core"})
    pod = make_pod(container("gpu", limits={"example.com/mx": "2"}),
                   container("sgpu", limits={"example.com/smx": "1", "example.com/smx-mem": "4",
                                             "example.com/smx-core": "30"}),
                   container("chart-names", limits={"metax-tech.com/gpu": "1", "metax-tech.com/sgpu": "1"}))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"Metax-GPU": DeviceRequest("Metax-GPU", 2, 0, 100, 100)}
    assert reqs.containers[1] == {"Metax-SGPU": DeviceRequest("Metax-SGPU", 1, 4096, 0, 30)}
    assert reqs.containers[2] == {}
    assert engine.backends["Metax-SGPU"].resource_names.memory == "example.com/smx-mem"


def test_custom_resource_names_flow_into_admission() -> None:
    engine = make_engine({"resourceVCountName": "example.com/smx"})
    out = engine.admit(make_pod(container(limits={"example.com/smx": "1"})))
    assert out["metadata"]["annotations"] == {"metax-tech.com/sgpu-qos-policy": "best-effort"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


@pytest.mark.parametrize(("section", "field"), [
    ({"resourceCountName": ""}, "metax.resourceCountName"),
    ({"resourceVCountName": ""}, "metax.resourceVCountName"),
    ({"resourceVCountName": 7}, "metax.resourceVCountName"),
    ({"sgpuTopologyAware": "sometimes"}, "metax.sgpuTopologyAware"),
    ({"sgpuTopologyAwre": True}, "metax.sgpuTopologyAwre"),
    ({"resourceVMemoryName": ["metax-tech.com/vmemory"]}, "metax.resourceVMemoryName"),
])
def test_bad_values_name_the_field(section: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(section)
    assert f"{field}:" in str(info.value)


def test_bad_value_fails_the_engine_with_the_field() -> None:
    with pytest.raises(ConfigError, match=r"metax\.sgpuTopologyAware"):
        make_engine({"sgpuTopologyAware": "sometimes"})


def test_section_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="metax: must be a mapping, got list"):
        parse_config(["metax-tech.com/gpu"])
