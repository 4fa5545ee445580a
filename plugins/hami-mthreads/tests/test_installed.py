"""The installed distribution: entry point, loading, backend registration (vendors H.1, J.1)."""

from __future__ import annotations

from mthreads_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-mthreads", "mthreads", "hami_mthreads.plugin", "0.1.0"
    enabled_config, backend_names = {"mthreads": {}}, ["Mthreads"]
    configs_without_backend = ({}, {"nvidia": {}, "cambricon": {}})

    def test_mthreads_section_gives_one_backend_with_hami_names(self) -> None:
        (b,) = self.installed_backends({"mthreads": {}}).values()
        names = ResourceNames(count="mthreads.com/vgpu", memory="mthreads.com/sgpu-memory",
                              cores="mthreads.com/sgpu-core", memory_factor=512)
        assert_fields(b, name="Mthreads", plugin="mthreads", resource_names=names, standard_capacity=True,
                      # Capacity based: no registration or handshake annotation; only the allocated pod key (J.1, J.3).
                      register_annotation=None, handshake_annotation=None, to_allocate_annotation=None,
                      allocated_annotation="hami.io/mthreads-vgpu-devices-allocated",
                      use_type_annotation=None, nouse_type_annotation=None,
                      use_uuid_annotation="mthreads.ai/use-gpuuuid", nouse_uuid_annotation="mthreads.ai/nouse-gpuuuid",
                      # No node lock (LockNode/ReleaseNodeLock are no-ops).
                      lock_annotation=None)


def test_null_mthreads_section_means_defaults() -> None:
    # `mthreads:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"mthreads": None})
    assert b.name == "Mthreads"
    assert b.resource_names.count == "mthreads.com/vgpu"
