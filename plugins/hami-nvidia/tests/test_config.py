"""The ``nvidia:`` section of device-config.yaml (vendors B.1, scheduler §10.1)."""

from __future__ import annotations

import pytest
from nvidia_testlib import container, make_engine, make_pod, parse_config

import hami_nvidia.plugin
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.types import DeviceRequest
from hami_core.testing import ConfigSectionChecks, assert_fields
from hami_nvidia.config import NvidiaConfig


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_nvidia.plugin, "nvidia", NvidiaConfig, ["nvidia.com/gpu"]
    bad_sections = [
        {"defaultCores": 200}, {"defaultCores": -1}, {"gpuCorePolicy": "fast"}, {"defaultMemory": -5},
        {"resourceCountNmae": "nvidia.com/gpu"}, {"defaultGPUNum": "two"}, {"overwriteEnv": "sometimes"},
        {"resourceCountName": ""},
        ({"migProfileAllowlist": [{"models": ["A100"], "profiles": ["1g.5gb", "five-gigs"]}]},
         "migProfileAllowlist.0.profiles"),
        ({"migProfileAllowlist": [{"models": ["A100"], "profiles": ["g.5gb"]}]}, "migProfileAllowlist.0.profiles"),
        ({"migProfileAllowlist": [{"models": [], "profiles": ["1g.5gb"]}]}, "migProfileAllowlist.0.models"),
    ]


def test_chart_defaults() -> None:
    cfg = parse_config({})
    assert_fields(cfg, resource_count_name="nvidia.com/gpu", resource_memory_name="nvidia.com/gpumem",
                  resource_memory_percentage_name="nvidia.com/gpumem-percentage",
                  resource_core_name="nvidia.com/gpucores", resource_priority_name="nvidia.com/priority",
                  default_memory=0, default_cores=0, default_gpu_num=1,
                  memory_factor=1, gpu_core_policy="default", runtime_class_name="", mig_profile_allowlist=[],
                  device_split_count=10, device_memory_scaling=1.0, device_core_scaling=1.0)
    assert cfg.overwrite_env is False and cfg.disable_core_limit is False


def test_camel_case_keys_as_in_the_chart() -> None:
    cfg = parse_config({
        "resourceCountName": "nvidia.com/gpu", "defaultMemory": 512, "defaultCores": 30, "defaultGPUNum": 2,
        "memoryFactor": 4, "overwriteEnv": True, "gpuCorePolicy": "force", "runtimeClassName": "nvidia",
        "disableCoreLimit": True, "libCudaLogLevel": 3, "deviceSplitCount": 4, "deviceMemoryScaling": 1.5,
        "migProfileAllowlist": [{"models": ["A100-SXM4-40GB"], "profiles": ["1g.5gb", "3g.20gb"]}],
    })
    assert isinstance(cfg, NvidiaConfig)
    assert (cfg.default_memory, cfg.default_cores, cfg.default_gpu_num, cfg.memory_factor) == (512, 30, 2, 4)
    assert (cfg.overwrite_env, cfg.gpu_core_policy, cfg.runtime_class_name) == (True, "force", "nvidia")
    assert cfg.mig_profile_allowlist[0].profiles == ["1g.5gb", "3g.20gb"]


def test_custom_resource_names_flow_into_requests() -> None:
    engine = make_engine({"resourceCountName": "hami.io/gpu", "resourceMemoryName": "hami.io/gpumem",
                          "resourceMemoryPercentageName": "hami.io/gpumem-percentage",
                          "resourceCoreName": "hami.io/gpucores"})
    pod = make_pod(container("custom", limits={"hami.io/gpu": "2", "hami.io/gpumem": "3000",
                                               "hami.io/gpucores": "30"}),
                   container("default-names", limits={"nvidia.com/gpu": "1"}))
    reqs = engine.requests(pod)
    assert reqs.containers[0] == {"NVIDIA": DeviceRequest("NVIDIA", 2, 3000, 101, 30)}
    # The chart names are no longer read.
    assert reqs.containers[1] == {}
    assert engine.backends["NVIDIA"].resource_names.count == "hami.io/gpu"


def test_custom_resource_names_flow_into_admission() -> None:
    engine = make_engine({"resourceCountName": "hami.io/gpu", "resourceCoreName": "hami.io/gpucores",
                          "resourceMemoryName": "hami.io/gpumem"})
    out = engine.admit(make_pod(container(limits={"hami.io/gpu": "1"})))
    assert out["spec"]["containers"][0]["resources"]["limits"] == {"hami.io/gpu": "1", "hami.io/gpucores": "100"}
    assert out["spec"]["schedulerName"] == "hami-scheduler"


# ------------------------------------------------------------------------------------ bounds (issue 26)
@pytest.mark.parametrize(("text", "field"), [
    ("deviceSplitCount: 3000000", "nvidia.deviceSplitCount"),
    ("deviceSplitCount: 1025", "nvidia.deviceSplitCount"),
    ("deviceSplitCount: 0", "nvidia.deviceSplitCount"),
    ("deviceMemoryScaling: .inf", "nvidia.deviceMemoryScaling"),
    ("deviceMemoryScaling: 1e308", "nvidia.deviceMemoryScaling"),
    ("deviceMemoryScaling: .nan", "nvidia.deviceMemoryScaling"),
    ("deviceMemoryScaling: 0", "nvidia.deviceMemoryScaling"),
    ("deviceCoreScaling: .inf", "nvidia.deviceCoreScaling"),
    ("deviceCoreScaling: 1e308", "nvidia.deviceCoreScaling"),
    ("defaultMemory: 99999999999999999999", "nvidia.defaultMemory"),
    ("preConfiguredDeviceMemory: 4294967296", "nvidia.preConfiguredDeviceMemory"),
])
def test_huge_and_infinite_values_are_refused_naming_the_field(tmp_path, text: str, field: str) -> None:
    # As the device plugin reads them: a device-config.yaml file, its nvidia section validated by the plugin.
    path = tmp_path / "device-config.yaml"
    path.write_text(f"nvidia:\n  {text}\n")
    from hami_core.engine.config import load_config

    with pytest.raises(ConfigError) as info:
        parse_config(load_config(str(path)).devices["nvidia"])
    assert f"{field}:" in str(info.value), info.value


def test_the_bounds_themselves_are_accepted() -> None:
    from hami_nvidia.config import MAX_DEVICE_SPLIT_COUNT, MAX_SCALING

    cfg = parse_config({"deviceSplitCount": MAX_DEVICE_SPLIT_COUNT, "deviceMemoryScaling": MAX_SCALING,
                        "deviceCoreScaling": MAX_SCALING})
    assert (cfg.device_split_count, cfg.device_memory_scaling) == (MAX_DEVICE_SPLIT_COUNT, MAX_SCALING)
