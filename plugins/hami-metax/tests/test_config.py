"""The ``metax:`` section of device-config.yaml (vendors G, scheduler §10.1)."""

from __future__ import annotations

from metax_testlib import container, make_engine, make_pod, parse_config

import hami_metax.plugin
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks, assert_fields
from hami_metax.config import MetaxConfig


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_metax.plugin, "metax", MetaxConfig, ["metax-tech.com/gpu"]
    bad_sections = [{"resourceCountName": ""}, {"resourceVCountName": ""}, {"resourceVCountName": 7},
                    {"sgpuTopologyAware": "sometimes"}, {"sgpuTopologyAwre": True},
                    {"resourceVMemoryName": ["metax-tech.com/vmemory"]}]


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert_fields(cfg, resource_count_name="metax-tech.com/gpu", resource_vcount_name="metax-tech.com/sgpu",
                  resource_vmemory_name="metax-tech.com/vmemory", resource_vcore_name="metax-tech.com/vcore")
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
