"""The installed distribution: entry point, loading, backend registration (vendors B.1)."""

from __future__ import annotations

from nvidia_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields
from hami_core.wire import keys


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module = "hami-nvidia", "nvidia", "hami_nvidia.plugin"
    enabled_config, backend_names = {"nvidia": {}}, ["NVIDIA"]
    configs_without_backend = ({}, {"cambricon": {}})

    def test_nvidia_section_gives_one_backend_with_the_default_names(self) -> None:
        (b,) = self.installed_backends({"nvidia": {}}).values()
        names = ResourceNames(count="nvidia.com/gpu", memory="nvidia.com/gpumem",
                              memory_percentage="nvidia.com/gpumem-percentage", cores="nvidia.com/gpucores",
                              priority="nvidia.com/priority", memory_factor=1)
        assert_fields(b, name="NVIDIA", plugin="nvidia", resource_names=names,
                      register_annotation="hami.io/node-nvidia-register", handshake_annotation="hami.io/node-handshake",
                      to_allocate_annotation="hami.io/vgpu-devices-to-allocate",
                      allocated_annotation="hami.io/vgpu-devices-allocated",
                      use_type_annotation="nvidia.com/use-gputype", nouse_type_annotation="nvidia.com/nouse-gputype",
                      use_uuid_annotation="nvidia.com/use-gpuuuid", nouse_uuid_annotation="nvidia.com/nouse-gpuuuid")
        assert b.lock_annotation == keys.NODE_LOCK == "hami.io/mutex.lock"


def test_null_nvidia_section_means_defaults() -> None:
    # `nvidia:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"nvidia": None})
    assert b.name == "NVIDIA"
    assert b.resource_names.count == "nvidia.com/gpu"
