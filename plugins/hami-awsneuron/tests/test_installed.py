"""The installed distribution: entry point, loading, backend registration."""

from __future__ import annotations

from awsneuron_testlib import plugin_manager

from hami_core.plugins.types import ResourceNames
from hami_core.testing import InstalledDistribution, assert_fields


class TestInstalled(InstalledDistribution):
    distribution, entry_point, module, version = "hami-awsneuron", "awsneuron", "hami_awsneuron.plugin", "0.1.0"
    enabled_config, backend_names = {"awsneuron": {}}, ["AWSNeuron"]
    configs_without_backend = ({}, {"nvidia": {}}, {"amd": {}})

    def test_awsneuron_section_gives_one_backend_with_hamis_keys(self) -> None:
        (b,) = self.installed_backends({"awsneuron": {}}).values()
        names = ResourceNames(count="aws.amazon.com/neuron", cores="aws.amazon.com/neuroncore")
        assert_fields(b, name="AWSNeuron", plugin="awsneuron", resource_names=names, standard_capacity=False,
                      register_annotation=None, handshake_annotation=None, to_allocate_annotation=None,
                      allocated_annotation="hami.io/aws-neuron-devices-allocated", lock_annotation=None,
                      use_type_annotation=None, nouse_type_annotation=None,
                      use_uuid_annotation="aws.amazon.com/use-neuron-uuid",
                      nouse_uuid_annotation="aws.amazon.com/nouse-neuron-uuid")


def test_null_awsneuron_section_means_defaults() -> None:
    # `awsneuron:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"awsneuron": None})
    assert b.name == "AWSNeuron"
    assert b.resource_names.cores == "aws.amazon.com/neuroncore"
