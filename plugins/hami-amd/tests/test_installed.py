"""The installed distribution: entry point, loading, backend registration (HAMi ``InitAMDGPUDevice``)."""

from __future__ import annotations

from amd_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-amd", "amd", "hami_amd.plugin", "0.1.0"
    enabled_config, backend_names = {"amd": {}}, ["AMD"]
    configs_without_backend = ({}, {"nvidia": {}}, {"hygon": {}})

    def test_amd_section_gives_one_backend_with_hamis_keys(self) -> None:
        (b,) = self.installed_backends({"amd": {}}).values()
        names = ResourceNames(count="amd.com/gpu", memory="amd.com/gpumem", cores="amd.com/gpucores")
        assert_fields(b, name="AMD", plugin="amd", resource_names=names, standard_capacity=False,
                      register_annotation="hami.io/node-amd-register", handshake_annotation=None,
                      to_allocate_annotation="hami.io/amd-devices-to-allocate",
                      allocated_annotation="hami.io/amd-devices-allocated", lock_annotation="hami.io/mutex.lock",
                      use_type_annotation="amd.com/use-gputype", nouse_type_annotation="amd.com/nouse-gputype",
                      use_uuid_annotation="amd.com/use-gpu-uuid", nouse_uuid_annotation="amd.com/nouse-gpu-uuid")


def test_null_amd_section_means_defaults() -> None:
    # `amd:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"amd": None})
    assert b.name == "AMD"
    assert b.resource_names.count == "amd.com/gpu"
