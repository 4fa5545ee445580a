"""The installed distribution: entry point, loading, backend registration (HAMi ``InitVastaiDevice``)."""

from __future__ import annotations

from vastai_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-vastai", "vastai", "hami_vastai.plugin", "0.1.0"
    enabled_config, backend_names = {"vastai": {}}, ["Vastai"]
    configs_without_backend = ({}, {"nvidia": {}}, {"hygon": {}})

    def test_vastai_section_gives_one_backend_with_hamis_keys(self) -> None:
        (b,) = self.installed_backends({"vastai": {}}).values()
        assert_fields(b, name="Vastai", plugin="vastai", resource_names=ResourceNames(count="vastaitech.com/va"),
                      standard_capacity=False, cleanup_handshake=True,
                      register_annotation="hami.io/node-va-register", handshake_annotation="hami.io/node-handshake-va",
                      to_allocate_annotation="hami.io/Vastai-devices-to-allocate",
                      allocated_annotation="hami.io/Vastai-devices-allocated", lock_annotation="hami.io/mutex.lock",
                      use_type_annotation=None, nouse_type_annotation=None,
                      use_uuid_annotation="vastaitech.com/use-gpuuuid",
                      nouse_uuid_annotation="vastaitech.com/nouse-gpuuuid")


def test_null_vastai_section_means_defaults() -> None:
    # `vastai:` with an empty body in YAML is None: enabled with the chart default.
    (b,) = plugin_manager().backends({"vastai": None})
    assert (b.name, b.resource_names.count) == ("Vastai", "vastaitech.com/va")
