"""The installed distribution: entry point, loading, one backend per chip (vendors F.1-F.2, J.1)."""

from __future__ import annotations

import pytest
from iluvatar_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields
from hami_iluvatar.config import IluvatarChipConfig


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-iluvatar", "iluvatar", "hami_iluvatar.plugin", "0.1.0"
    # An empty section gives the four chart chips.
    enabled_config, backend_names = {"iluvatars": {}}, ["BI-V100", "BI-V150", "MR-V100", "MR-V50"]
    configs_without_backend = ({}, {"nvidia": {}, "hygon": {}})


@pytest.mark.parametrize("chip", ["MR-V100", "MR-V50", "BI-V150", "BI-V100"])
def test_chart_chip_backend(chip: str) -> None:
    (b,) = [b for b in plugin_manager().backends({"iluvatars": None}) if b.name == chip]
    names = ResourceNames(count=f"iluvatar.ai/{chip}-vgpu", memory=f"iluvatar.ai/{chip}.vMem",
                          cores=f"iluvatar.ai/{chip}.vCore", memory_factor=256)
    assert_fields(b, vendor="iluvatar", resource_names=names, lock_annotation="hami.io/mutex.lock",
                  register_annotation=f"hami.io/node-{chip}-register",
                  handshake_annotation=f"hami.io/node-handshake-{chip}",
                  to_allocate_annotation=f"hami.io/{chip}-devices-to-allocate",
                  allocated_annotation=f"hami.io/{chip}-devices-allocated", standard_capacity=True,
                  use_uuid_annotation=f"hami.io/use-{chip}-uuid", nouse_uuid_annotation=f"hami.io/no-use-{chip}-uuid",
                  use_type_annotation=None, nouse_type_annotation=None)
    assert isinstance(b.config, IluvatarChipConfig) and b.config.chip_name == chip


def test_configured_chips_only() -> None:
    section = [{"chipName": "BI-V150", "commonWord": "BI-V150", "resourceCountName": "iluvatar.ai/BI-V150-vgpu",
                "resourceMemoryName": "iluvatar.ai/BI-V150.vMem", "resourceCoreName": "iluvatar.ai/BI-V150.vCore"}]
    (b,) = plugin_manager().backends({"iluvatars": section})
    assert b.name == "BI-V150"
    assert b.resource_names.count == "iluvatar.ai/BI-V150-vgpu"


def test_explicit_empty_list_enables_no_chip() -> None:
    assert plugin_manager().backends({"iluvatars": []}) == []
