"""The installed distribution: entry point, loading, backend registration (vendors D.1, J.1)."""

from __future__ import annotations

import importlib.metadata

from cambricon_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames


def test_distribution_declares_the_cambricon_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-cambricon")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("cambricon", "hami_cambricon.plugin")]


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "cambricon"]
    assert len(reports) == 1
    report = reports[0]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-cambricon"
    assert report.version == importlib.metadata.version("hami-cambricon") == "0.1.0"
    assert pm.distribution_of("cambricon") == "hami-cambricon"


def test_cambricon_section_gives_hamis_mlu_backend() -> None:
    backends = [b for b in get_plugin_manager().backends({"cambricon": {}}) if b.vendor == "cambricon"]
    assert len(backends) == 1
    b = backends[0]
    assert b.name == "MLU"
    assert b.plugin == "cambricon"
    assert b.resource_names == ResourceNames(count="cambricon.com/vmlu", memory="cambricon.com/mlu.smlu.vmemory",
                                             cores="cambricon.com/mlu.smlu.vcore", memory_factor=256)
    assert b.register_annotation is None
    assert b.handshake_annotation is None
    assert b.to_allocate_annotation == "hami.io/cambricon-mlu-devices-to-allocate"
    assert b.allocated_annotation == "hami.io/cambricon-mlu-devices-allocated"
    assert b.use_type_annotation is None
    assert b.nouse_type_annotation is None
    assert b.use_uuid_annotation == "cambricon.com/use-gpuuuid"
    assert b.nouse_uuid_annotation == "cambricon.com/nouse-gpuuuid"
    assert b.lock_annotation == "cambricon.com/dsmlu.lock"
    assert b.standard_capacity is True


def test_null_section_means_chart_defaults() -> None:
    # `cambricon:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"cambricon": None})
    assert b.name == "MLU"
    assert b.resource_names.count == "cambricon.com/vmlu"


def test_no_cambricon_section_gives_no_backend() -> None:
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}}) == []
