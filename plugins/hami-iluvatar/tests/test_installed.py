"""The installed distribution: entry point, loading, one backend per chip (vendors F.1-F.2, J.1)."""

from __future__ import annotations

import importlib.metadata

import pytest
from iluvatar_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames
from hami_iluvatar.config import IluvatarChipConfig


def test_distribution_declares_the_iluvatar_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-iluvatar")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("iluvatar", "hami_iluvatar.plugin")]
    assert dist.version == "0.1.0"


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "iluvatar"]
    assert len(reports) == 1
    report = reports[0]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-iluvatar"
    assert report.version == importlib.metadata.version("hami-iluvatar")
    assert pm.distribution_of("iluvatar") == "hami-iluvatar"


def test_empty_section_gives_the_four_chart_chips() -> None:
    backends = [b for b in get_plugin_manager().backends({"iluvatars": {}}) if b.vendor == "iluvatar"]
    assert [b.name for b in backends] == ["BI-V100", "BI-V150", "MR-V100", "MR-V50"]
    assert {b.plugin for b in backends} == {"iluvatar"}


@pytest.mark.parametrize("chip", ["MR-V100", "MR-V50", "BI-V150", "BI-V100"])
def test_chart_chip_backend(chip: str) -> None:
    (b,) = [b for b in plugin_manager().backends({"iluvatars": None}) if b.name == chip]
    assert b.vendor == "iluvatar"
    assert b.resource_names == ResourceNames(count=f"iluvatar.ai/{chip}-vgpu", memory=f"iluvatar.ai/{chip}.vMem",
                                             cores=f"iluvatar.ai/{chip}.vCore", memory_factor=256)
    assert b.register_annotation == f"hami.io/node-{chip}-register"
    assert b.handshake_annotation == f"hami.io/node-handshake-{chip}"
    assert b.to_allocate_annotation == f"hami.io/{chip}-devices-to-allocate"
    assert b.allocated_annotation == f"hami.io/{chip}-devices-allocated"
    assert b.use_uuid_annotation == f"hami.io/use-{chip}-uuid"
    assert b.nouse_uuid_annotation == f"hami.io/no-use-{chip}-uuid"
    assert b.use_type_annotation is None and b.nouse_type_annotation is None
    assert b.lock_annotation == "hami.io/mutex.lock"
    assert b.standard_capacity is True
    assert isinstance(b.config, IluvatarChipConfig) and b.config.chip_name == chip


def test_configured_chips_only() -> None:
    section = [{"chipName": "BI-V150", "commonWord": "BI-V150", "resourceCountName": "iluvatar.ai/BI-V150-vgpu",
                "resourceMemoryName": "iluvatar.ai/BI-V150.vMem", "resourceCoreName": "iluvatar.ai/BI-V150.vCore"}]
    (b,) = plugin_manager().backends({"iluvatars": section})
    assert b.name == "BI-V150"
    assert b.resource_names.count == "iluvatar.ai/BI-V150-vgpu"


def test_explicit_empty_list_enables_no_chip() -> None:
    assert plugin_manager().backends({"iluvatars": []}) == []


def test_no_section_gives_no_backend() -> None:
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}, "hygon": {}}) == []
