"""The installed distribution: entry point, loading, backend registration (vendors E.1-E.3, J.1)."""

from __future__ import annotations

from hygon_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-hygon", "hygon", "hami_hygon.plugin", "0.1.0"
    enabled_config, backend_names = {"hygon": {}}, ["DCU"]
    configs_without_backend = ({}, {"nvidia": {}})

    def test_hygon_section_gives_one_dcu_backend_with_hamis_keys(self) -> None:
        (b,) = self.installed_backends({"hygon": {}}).values()
        names = ResourceNames(count="hygon.com/dcunum", memory="hygon.com/dcumem", cores="hygon.com/dcucores",
                              memory_factor=1)
        assert_fields(b, name="DCU", plugin="hygon", resource_names=names, standard_capacity=True,
                      register_annotation="hami.io/node-dcu-register",
                      handshake_annotation="hami.io/node-handshake-dcu",
                      to_allocate_annotation="hami.io/dcu-devices-to-allocate",
                      allocated_annotation="hami.io/dcu-devices-allocated", lock_annotation="hami.io/mutex.lock",
                      use_type_annotation="hygon.com/use-dcutype", nouse_type_annotation="hygon.com/nouse-dcutype",
                      use_uuid_annotation="hygon.com/use-gpuuuid", nouse_uuid_annotation="hygon.com/nouse-gpuuuid")


def test_null_hygon_section_means_defaults() -> None:
    # `hygon:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"hygon": None})
    assert b.name == "DCU"
    assert b.resource_names.count == "hygon.com/dcunum"
