"""The ``mthreads:`` section of device-config.yaml (vendors H.1)."""

from __future__ import annotations

from mthreads_testlib import container, make_engine, make_node, make_pod, parse_config

import hami_mthreads.plugin
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks, assert_fields
from hami_mthreads.config import MthreadsConfig


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_mthreads.plugin, "mthreads", MthreadsConfig, ["mthreads.com/vgpu"]
    bad_sections = [{"resourceCountNmae": "mthreads.com/vgpu"}, {"resourceCountName": ""}, {"resourceMemoryName": ""},
                    {"resourceCoreName": 16}, {"resourceCoreName": ""}, {"memoryFactor": 512}]


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert isinstance(cfg, MthreadsConfig)
    assert_fields(cfg, resource_count_name="mthreads.com/vgpu", resource_memory_name="mthreads.com/sgpu-memory",
                  resource_core_name="mthreads.com/sgpu-core")


def test_camel_case_keys_as_in_the_chart() -> None:
    cfg = parse_config({"resourceCountName": "mt.io/gpu", "resourceMemoryName": "mt.io/mem",
                        "resourceCoreName": "mt.io/core"})
    assert (cfg.resource_count_name, cfg.resource_memory_name, cfg.resource_core_name) == (
        "mt.io/gpu", "mt.io/mem", "mt.io/core")


CUSTOM = {"resourceCountName": "mt.io/gpu", "resourceMemoryName": "mt.io/mem", "resourceCoreName": "mt.io/core"}


def test_custom_resource_names_flow_into_requests() -> None:
    engine = make_engine(CUSTOM)
    pod = make_pod(container("custom", limits={"mt.io/gpu": "1", "mt.io/mem": "4", "mt.io/core": "8"}),
                   container("chart-names", limits={"mthreads.com/vgpu": "1"}))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"Mthreads": DeviceRequest("Mthreads", 1, 2048, 0, 8)}
    assert reqs.containers[1] == {}
    assert engine.backends["Mthreads"].resource_names.memory_factor == 512


def test_custom_resource_names_flow_into_registration_and_admission() -> None:
    engine = make_engine(CUSTOM)
    node = make_node("n1", cores=None, memory=None, capacity={"mt.io/core": "32", "mt.io/mem": "192"})
    assert engine.upsert_node(node).devices == {"Mthreads": 2}
    out = engine.admit(make_pod(container(limits={"mt.io/gpu": "1"})))
    assert out["spec"]["containers"][0]["resources"]["limits"] == {"mt.io/gpu": "1", "mt.io/core": "16",
                                                                   "mt.io/mem": "96"}
