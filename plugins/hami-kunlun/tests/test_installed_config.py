"""Entry point, backend registration and the ``kunlun:`` config section (vendors.md Part I, J.1)."""

from __future__ import annotations

import importlib.metadata

from kunlun_testlib import make_engine

import hami_kunlun.plugin
from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames
from hami_core.testing import ConfigSectionChecks
from hami_kunlun.config import SECTION, KunlunConfig


def test_entry_point_is_installed_and_loaded() -> None:
    dist = importlib.metadata.distribution("hami-kunlun")
    eps = [(ep.name, ep.value) for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert eps == [("kunlun", "hami_kunlun.plugin")]
    assert dist.version == "0.1.0"
    (report,) = [r for r in get_plugin_manager().reports if r.name == "kunlun"]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-kunlun"


def test_section_enables_both_backends_with_hami_keys() -> None:
    pm = get_plugin_manager(load_entrypoints=False, plugins=[hami_kunlun.plugin])
    by_name = {b.name: b for b in pm.backends({"kunlun": None})}
    assert sorted(by_name) == ["XPU", "kunlun"]
    kunlun, xpu = by_name["kunlun"], by_name["XPU"]
    assert (kunlun.name, kunlun.vendor, xpu.name, xpu.vendor) == ("kunlun", "kunlun", "XPU", "kunlun")
    assert kunlun.resource_names == ResourceNames("kunlunxin.com/xpu")
    assert (kunlun.register_annotation, kunlun.handshake_annotation, kunlun.to_allocate_annotation) == (None,) * 3
    assert kunlun.allocated_annotation == "hami.io/kunlun-allocated"
    assert kunlun.lock_annotation is None and kunlun.standard_capacity is True
    assert xpu.resource_names == ResourceNames("kunlunxin.com/vxpu", memory="kunlunxin.com/vxpu-memory")
    assert xpu.register_annotation == "hami.io/node-register-xpu"
    assert xpu.handshake_annotation == "hami.io/node-handshake-xpu"
    assert xpu.to_allocate_annotation == "hami.io/xpu-devices-to-allocate"
    assert xpu.allocated_annotation == "hami.io/xpu-devices-allocated"
    assert xpu.use_uuid_annotation == "hami.io/use-xpu-uuid"
    assert xpu.nouse_uuid_annotation == "hami.io/no-use-xpu-uuid"
    assert xpu.lock_annotation == "hami.io/mutex.lock" and xpu.standard_capacity is False
    assert pm.backends({}) == [] and pm.backends({"nvidia": {}}) == []


def test_custom_resource_names() -> None:
    engine = make_engine({"resourceCountName": "example.com/xpu", "resourceVCountName": "example.com/vxpu",
                          "resourceVMemoryName": "example.com/vxpu-mem"})
    assert engine.backends["kunlun"].resource_names.count == "example.com/xpu"
    assert engine.backends["XPU"].resource_names.memory == "example.com/vxpu-mem"


class TestSection(ConfigSectionChecks):
    plugin, section, model, not_a_mapping = hami_kunlun.plugin, SECTION, KunlunConfig, ["kunlunxin.com/xpu"]
    bad_sections = [{"resourceCountName": ""}, {"bogus": 1}]
