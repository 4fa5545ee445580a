"""The installed distribution: entry point, loading, one backend per chip (vendors C.1, C.3, C.8)."""

from __future__ import annotations

import importlib.metadata

from ascend_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames

CHART_WORDS = ["Ascend310P", "Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4", "Ascend910B4-1",
               "Ascend910C"]


def test_distribution_declares_the_ascend_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-ascend")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("ascend", "hami_ascend.plugin")]


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "ascend"]
    assert len(reports) == 1
    report = reports[0]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-ascend"
    assert report.version == importlib.metadata.version("hami-ascend") == "0.1.0"
    assert pm.distribution_of("ascend") == "hami-ascend"


def test_empty_vnpus_section_gives_one_backend_per_chart_chip() -> None:
    backends = get_plugin_manager().backends({"vnpus": {}})
    ascend = sorted((b for b in backends if b.vendor == "ascend"), key=lambda b: b.name)
    assert [b.name for b in ascend] == CHART_WORDS
    assert {b.plugin for b in ascend} == {"ascend"}


def test_backend_keys_follow_the_common_word() -> None:
    by_name = {b.name: b for b in plugin_manager().backends({"vnpus": None})}
    b = by_name["Ascend910B3"]
    assert b.vendor == "ascend"
    assert b.resource_names == ResourceNames(count="huawei.com/Ascend910B3", memory="huawei.com/Ascend910B3-memory",
                                             cores="huawei.com/Ascend910B3-core", memory_factor=1)
    assert b.register_annotation == "hami.io/node-register-Ascend910B3"
    assert b.handshake_annotation == "hami.io/node-handshake-Ascend910B3"
    assert b.to_allocate_annotation == "hami.io/Ascend910B3-devices-to-allocate"
    assert b.allocated_annotation == "hami.io/Ascend910B3-devices-allocated"
    assert b.use_uuid_annotation == "hami.io/use-Ascend910B3-uuid"
    assert b.nouse_uuid_annotation == "hami.io/no-use-Ascend910B3-uuid"
    assert b.use_type_annotation is None and b.nouse_type_annotation is None
    assert b.lock_annotation == "hami.io/mutex.lock"
    # hami-core pods count cores against 100 whatever devcore says, so the numeric prefilter is off.
    assert b.standard_capacity is False
    assert by_name["Ascend910B4-1"].resource_names.count == "huawei.com/Ascend910B4-1"
    assert by_name["Ascend910B4-1"].allocated_annotation == "hami.io/Ascend910B4-1-devices-allocated"


def test_configured_chips_replace_the_chart_list() -> None:
    (b,) = plugin_manager().backends({"vnpus": {"configs": [
        {"chipName": "910B3", "commonWord": "Ascend910B3", "resourceName": "example.com/npu",
         "resourceMemoryName": "example.com/npu-mem", "memoryFactor": 1024}]}})
    assert b.name == "Ascend910B3"
    assert b.resource_names == ResourceNames(count="example.com/npu", memory="example.com/npu-mem",
                                             memory_factor=1024)


def test_no_vnpus_section_gives_no_backend() -> None:
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}}) == []
    assert plugin_manager().backends({"vnpus": {"configs": []}}) == []
