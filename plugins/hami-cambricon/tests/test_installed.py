"""The installed distribution: entry point, loading, backend registration (vendors D.1, J.1)."""

from __future__ import annotations

from cambricon_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-cambricon", "cambricon", "hami_cambricon.plugin", "0.1.0"
    enabled_config, backend_names = {"cambricon": {}}, ["MLU"]
    configs_without_backend = ({}, {"nvidia": {}})

    def test_cambricon_section_gives_hamis_mlu_backend(self) -> None:
        (b,) = self.installed_backends({"cambricon": {}}).values()
        names = ResourceNames(count="cambricon.com/vmlu", memory="cambricon.com/mlu.smlu.vmemory",
                              cores="cambricon.com/mlu.smlu.vcore", memory_factor=256)
        assert_fields(b, name="MLU", plugin="cambricon", resource_names=names, standard_capacity=True,
                      register_annotation=None, handshake_annotation=None,
                      to_allocate_annotation="hami.io/cambricon-mlu-devices-to-allocate",
                      allocated_annotation="hami.io/cambricon-mlu-devices-allocated",
                      use_type_annotation=None, nouse_type_annotation=None,
                      use_uuid_annotation="cambricon.com/use-gpuuuid",
                      nouse_uuid_annotation="cambricon.com/nouse-gpuuuid", lock_annotation="cambricon.com/dsmlu.lock")


def test_null_section_means_chart_defaults() -> None:
    # `cambricon:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"cambricon": None})
    assert b.name == "MLU"
    assert b.resource_names.count == "cambricon.com/vmlu"
