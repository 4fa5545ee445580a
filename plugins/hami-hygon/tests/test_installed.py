"""The installed distribution: entry point, loading, backend registration (vendors E.1-E.3, J.1)."""

from __future__ import annotations

import importlib.metadata

from hygon_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames


def test_distribution_declares_the_hygon_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-hygon")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("hygon", "hami_hygon.plugin")]
    assert dist.version == "0.1.0"


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "hygon"]
    assert len(reports) == 1
    report = reports[0]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-hygon"
    assert report.version == importlib.metadata.version("hami-hygon")
    assert pm.distribution_of("hygon") == "hami-hygon"


def test_hygon_section_gives_one_dcu_backend_with_hamis_keys() -> None:
    backends = get_plugin_manager().backends({"hygon": {}})
    mine = [b for b in backends if b.vendor == "hygon"]
    assert len(mine) == 1
    b = mine[0]
    assert b.name == "DCU"
    assert b.plugin == "hygon"
    assert b.resource_names == ResourceNames(count="hygon.com/dcunum", memory="hygon.com/dcumem",
                                             cores="hygon.com/dcucores", memory_factor=1)
    assert b.register_annotation == "hami.io/node-dcu-register"
    assert b.handshake_annotation == "hami.io/node-handshake-dcu"
    assert b.to_allocate_annotation == "hami.io/dcu-devices-to-allocate"
    assert b.allocated_annotation == "hami.io/dcu-devices-allocated"
    assert b.use_type_annotation == "hygon.com/use-dcutype"
    assert b.nouse_type_annotation == "hygon.com/nouse-dcutype"
    assert b.use_uuid_annotation == "hygon.com/use-gpuuuid"
    assert b.nouse_uuid_annotation == "hygon.com/nouse-gpuuuid"
    assert b.lock_annotation == "hami.io/mutex.lock"
    assert b.standard_capacity is True


def test_null_hygon_section_means_defaults() -> None:
    # `hygon:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"hygon": None})
    assert b.name == "DCU"
    assert b.resource_names.count == "hygon.com/dcunum"


def test_no_hygon_section_gives_no_backend() -> None:
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}}) == []
