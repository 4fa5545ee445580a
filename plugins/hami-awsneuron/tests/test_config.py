"""The ``awsneuron:`` section of device-config.yaml (HAMi ``AWSNeuronConfig``)."""

from __future__ import annotations

from pathlib import Path

from awsneuron_testlib import container, make_engine, make_pod, parse_config

import hami_awsneuron.plugin
from hami_awsneuron.config import AWSNeuronConfig
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks, assert_fields


class TestSection(ConfigSectionChecks):
    plugin, section, model = hami_awsneuron.plugin, "awsneuron", AWSNeuronConfig
    not_a_mapping = ["aws.amazon.com/neuron"]
    bad_sections = [{"resourceCountName": ""}, {"resourceCountName": 7}, {"resourceCoreName": ["x"]},
                    {"resourceCountNmae": "aws.amazon.com/neuron"}, {"resourceMemoryName": "aws.amazon.com/mem"}]


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert isinstance(cfg, AWSNeuronConfig)
    assert_fields(cfg, resource_count_name="aws.amazon.com/neuron", resource_core_name="aws.amazon.com/neuroncore")


def test_custom_resource_names_flow_into_requests_and_admission() -> None:
    engine = make_engine({"resourceCountName": "example.com/neuron", "resourceCoreName": "example.com/core"})
    pod = make_pod(container("custom-count", limits={"example.com/neuron": "2"}),
                   container("custom-core", limits={"example.com/core": "1"}),
                   container("chart-names", limits={"aws.amazon.com/neuron": "1"}))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"AWSNeuron": DeviceRequest("AWSNeuron", 2, 0, 0, 0)}
    assert reqs.containers[1] == {"AWSNeuron": DeviceRequest("AWSNeuron", 1, 0, 0, 1)}
    assert reqs.containers[2] == {}  # the chart names are no longer read
    assert engine.admit(pod)["spec"]["schedulerName"] == "hami-scheduler"
    assert engine.admit(make_pod(container(limits={"aws.amazon.com/neuron": "1"})))["spec"].get("schedulerName") is None


def test_empty_core_name_turns_core_requests_off() -> None:
    engine = make_engine({"resourceCoreName": ""})
    assert engine.requests(make_pod(container(limits={"aws.amazon.com/neuroncore": "1"}))).containers[0] == {}


def test_yaml_section_with_an_empty_body(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("awsneuron:\n", encoding="utf-8")
    engine = Engine(path, plugins=make_engine().plugins)
    assert sorted(engine.backends) == ["AWSNeuron"]
