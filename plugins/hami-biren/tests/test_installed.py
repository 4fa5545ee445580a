"""The installed distribution: entry point, loading, backend registration (HAMi ``InitBirenDevice``)."""

from __future__ import annotations

from biren_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-biren", "biren", "hami_biren.plugin", "0.1.0"
    enabled_config, backend_names = {"biren": {}}, ["Biren"]
    configs_without_backend = ({}, {"nvidia": {}}, {"vastai": {}})

    def test_biren_section_gives_one_backend_with_hamis_keys(self) -> None:
        (b,) = self.installed_backends({"biren": {}}).values()
        assert_fields(b, name="Biren", plugin="biren", resource_names=ResourceNames(count="birentech.com/gpu"),
                      standard_capacity=False, cleanup_handshake=True,
                      register_annotation="hami.io/node-biren-register",
                      handshake_annotation="hami.io/node-handshake-biren",
                      to_allocate_annotation="hami.io/Biren-devices-to-allocate",
                      allocated_annotation="hami.io/Biren-devices-allocated", lock_annotation="hami.io/mutex.lock",
                      use_type_annotation=None, nouse_type_annotation=None,
                      use_uuid_annotation="birentech.com/use-gpuuuid",
                      nouse_uuid_annotation="birentech.com/nouse-gpuuuid")


def test_null_biren_section_means_defaults() -> None:
    # `biren:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"biren": None})
    assert b.name == "Biren"
    assert b.resource_names.count == "birentech.com/gpu"
