"""The installed distribution: entry point, loading, registration of both backends (vendors I, J.1)."""

from __future__ import annotations

import importlib.metadata

from enflame_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames


def test_distribution_declares_the_enflame_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-enflame")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("enflame", "hami_enflame.plugin")]
    assert dist.version == "0.1.0"


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "enflame"]
    assert len(reports) == 1
    assert reports[0].status == "loaded", reports[0].reason
    assert reports[0].distribution == "hami-enflame"
    assert pm.distribution_of("enflame") == "hami-enflame"


def test_enflame_section_gives_both_backends() -> None:
    mine = {b.name: b for b in get_plugin_manager().backends({"enflame": {}}) if b.vendor == "enflame"}
    assert sorted(mine) == ["Enflame", "GCU"]
    assert {b.plugin for b in mine.values()} == {"enflame"}

    gcu = mine["GCU"]
    assert gcu.resource_names == ResourceNames(count="enflame.com/gcu")
    assert (gcu.register_annotation, gcu.handshake_annotation) == (None, None)
    assert gcu.to_allocate_annotation == "hami.io/enflame-gcu-devices-to-allocate"
    assert gcu.allocated_annotation == "hami.io/enflame-gcu-devices-allocated"
    assert (gcu.use_uuid_annotation, gcu.nouse_uuid_annotation) == (None, None)
    assert gcu.lock_annotation is None
    assert gcu.standard_capacity is True

    drs = mine["Enflame"]
    assert drs.resource_names == ResourceNames(count="enflame.com/drs-gcu", memory="enflame.com/gcu-memory",
                                               cores="enflame.com/gcu-core")
    assert drs.register_annotation == "enflame.com/gcu-drs-capacity"
    assert drs.handshake_annotation is None
    assert drs.to_allocate_annotation is None
    assert drs.allocated_annotation == "hami.io/enflame-vgpu-devices-allocated"
    assert drs.use_uuid_annotation == "enflame.com/use-gpuuuid"
    assert drs.nouse_uuid_annotation == "enflame.com/nouse-gpuuuid"
    assert drs.lock_annotation is None
    assert drs.standard_capacity is False


def test_null_section_means_defaults_and_no_section_means_none() -> None:
    # Backends come back sorted by name.
    assert [b.name for b in plugin_manager().backends({"enflame": None})] == ["Enflame", "GCU"]
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}}) == []
