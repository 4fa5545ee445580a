"""The installed distribution: entry point, loading, registration of both backends (vendors I, J.1)."""

from __future__ import annotations

from enflame_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-enflame", "enflame", "hami_enflame.plugin", "0.1.0"
    enabled_config, backend_names = {"enflame": {}}, ["Enflame", "GCU"]
    configs_without_backend = ({}, {"nvidia": {}})

    def test_enflame_section_gives_both_backends(self) -> None:
        mine = self.installed_backends(self.enabled_config)
        assert_fields(mine["GCU"], resource_names=ResourceNames(count="enflame.com/gcu"), lock_annotation=None,
                      register_annotation=None, handshake_annotation=None, standard_capacity=True,
                      to_allocate_annotation="hami.io/enflame-gcu-devices-to-allocate",
                      allocated_annotation="hami.io/enflame-gcu-devices-allocated",
                      use_uuid_annotation=None, nouse_uuid_annotation=None)
        names = ResourceNames(count="enflame.com/drs-gcu", memory="enflame.com/gcu-memory",
                              cores="enflame.com/gcu-core")
        assert_fields(mine["Enflame"], resource_names=names, register_annotation="enflame.com/gcu-drs-capacity",
                      handshake_annotation=None, to_allocate_annotation=None, lock_annotation=None,
                      allocated_annotation="hami.io/enflame-vgpu-devices-allocated", standard_capacity=False,
                      use_uuid_annotation="enflame.com/use-gpuuuid", nouse_uuid_annotation="enflame.com/nouse-gpuuuid")


def test_null_section_means_defaults_and_no_section_means_none() -> None:
    # Backends come back sorted by name.
    assert [b.name for b in plugin_manager().backends({"enflame": None})] == ["Enflame", "GCU"]
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}}) == []
