"""The ``mthreads:`` section of device-config.yaml (vendors H.1)."""

from __future__ import annotations

import pytest
from mthreads_testlib import container, make_engine, make_node, make_pod

from hami_core.plugins.errors import ConfigError
from hami_core.plugins.types import DeviceRequest
from hami_mthreads.config import MthreadsConfig, parse_config


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert cfg == parse_config(None)
    assert isinstance(cfg, MthreadsConfig)
    assert cfg.resource_count_name == "mthreads.com/vgpu"
    assert cfg.resource_memory_name == "mthreads.com/sgpu-memory"
    assert cfg.resource_core_name == "mthreads.com/sgpu-core"


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


@pytest.mark.parametrize(("section", "field"), [
    ({"resourceCountNmae": "mthreads.com/vgpu"}, "mthreads.resourceCountNmae"),
    ({"resourceCountName": ""}, "mthreads.resourceCountName"),
    ({"resourceMemoryName": ""}, "mthreads.resourceMemoryName"),
    ({"resourceCoreName": 16}, "mthreads.resourceCoreName"),
    ({"memoryFactor": 512}, "mthreads.memoryFactor"),
])
def test_bad_values_name_the_field(section: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(section)
    assert f"{field}:" in str(info.value)


def test_bad_value_fails_the_engine_with_the_field() -> None:
    with pytest.raises(ConfigError, match=r"mthreads\.resourceCoreName"):
        make_engine({"resourceCoreName": ""})


def test_section_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError, match="mthreads"):
        parse_config(["mthreads.com/vgpu"])
