"""The installed distribution: entry point, loading, registration of both backends (vendors G, J.1)."""

from __future__ import annotations

from metax_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-metax", "metax", "hami_metax.plugin", "0.1.0"
    enabled_config, backend_names = {"metax": {}}, ["Metax-GPU", "Metax-SGPU"]
    configs_without_backend = ({}, {"nvidia": {}})

    def test_metax_section_gives_both_backends(self) -> None:
        mine = self.installed_backends(self.enabled_config)
        gpu, sgpu = mine["Metax-GPU"], mine["Metax-SGPU"]
        assert_fields(gpu, resource_names=ResourceNames(count="metax-tech.com/gpu", memory_factor=1),
                      register_annotation=None, handshake_annotation=None, lock_annotation=None,
                      to_allocate_annotation="hami.io/metax-gpu-devices-to-allocate",
                      allocated_annotation="hami.io/metax-gpu-devices-allocated", standard_capacity=True,
                      use_uuid_annotation=None, nouse_uuid_annotation=None,
                      use_type_annotation=None, nouse_type_annotation=None)
        names = ResourceNames(count="metax-tech.com/sgpu", memory="metax-tech.com/vmemory",
                              cores="metax-tech.com/vcore", memory_factor=1024)
        assert_fields(sgpu, resource_names=names, register_annotation="metax-tech.com/node-gpu-devices",
                      handshake_annotation=None, lock_annotation="hami.io/mutex.lock", standard_capacity=False,
                      to_allocate_annotation="hami.io/metax-sgpu-devices-to-allocate",
                      allocated_annotation="hami.io/metax-sgpu-devices-allocated",
                      use_uuid_annotation="metax-tech.com/use-gpuuuid",
                      nouse_uuid_annotation="metax-tech.com/nouse-gpuuuid",
                      use_type_annotation=None, nouse_type_annotation=None)
        # One section, one config object; the sGPU state lives on the sGPU backend (test below).
        assert gpu.config is sgpu.config


def test_null_metax_section_means_defaults() -> None:
    # `metax:` with an empty body in YAML is None: enabled with the chart defaults.
    gpu, sgpu = plugin_manager().backends({"metax": None})
    assert (gpu.name, sgpu.name) == ("Metax-GPU", "Metax-SGPU")
    assert gpu.resource_names.count == "metax-tech.com/gpu"


def test_each_engine_gets_its_own_state() -> None:
    first = plugin_manager().backends({"metax": {}})[1]
    second = plugin_manager().backends({"metax": {}})[1]
    assert first == second
    assert first.jittery is not second.jittery
    assert first.pods is not second.pods
