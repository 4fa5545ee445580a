"""The installed distribution: entry point, loading, one backend per chip (vendors C.1, C.3, C.8)."""

from __future__ import annotations

from ascend_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields

CHART_WORDS = ["Ascend310P", "Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910B4-1",
               "Ascend910C"]


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-ascend", "ascend", "hami_ascend.plugin", "0.1.0"
    # An empty vnpus section gives one backend per chart chip.
    enabled_config, backend_names = {"vnpus": {}}, CHART_WORDS
    configs_without_backend = ({}, {"nvidia": {}}, {"vnpus": {"configs": []}})


def test_backend_keys_follow_the_common_word() -> None:
    by_name = {b.name: b for b in plugin_manager().backends({"vnpus": None})}
    b = by_name["Ascend910B3"]
    names = ResourceNames(count="huawei.com/Ascend910B3", memory="huawei.com/Ascend910B3-memory",
                          cores="huawei.com/Ascend910B3-core", memory_factor=1)
    assert_fields(b, vendor="ascend", resource_names=names, lock_annotation="hami.io/mutex.lock",
                  register_annotation="hami.io/node-register-Ascend910B3",
                  handshake_annotation="hami.io/node-handshake-Ascend910B3",
                  to_allocate_annotation="hami.io/Ascend910B3-devices-to-allocate",
                  allocated_annotation="hami.io/Ascend910B3-devices-allocated",
                  use_uuid_annotation="hami.io/use-Ascend910B3-uuid",
                  nouse_uuid_annotation="hami.io/no-use-Ascend910B3-uuid",
                  use_type_annotation=None, nouse_type_annotation=None,
                  # hami-core pods count cores against 100 whatever devcore says, so the numeric prefilter is off.
                  standard_capacity=False)
    assert by_name["Ascend910B4-1"].resource_names.count == "huawei.com/Ascend910B4-1"
    assert by_name["Ascend910B4-1"].allocated_annotation == "hami.io/Ascend910B4-1-devices-allocated"


def test_configured_chips_replace_the_chart_list() -> None:
    (b,) = plugin_manager().backends({"vnpus": {"configs": [
        {"chipName": "910B3", "commonWord": "Ascend910B3", "resourceName": "example.com/npu",
         "resourceMemoryName": "example.com/npu-mem", "memoryFactor": 1024}]}})
    assert b.name == "Ascend910B3"
    assert b.resource_names == ResourceNames(count="example.com/npu", memory="example.com/npu-mem",
                                             memory_factor=1024)
