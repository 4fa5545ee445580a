"""The installed distribution: entry point, loading, registration of both backends (vendors G, J.1)."""

from __future__ import annotations

import importlib.metadata

from metax_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames


def test_distribution_declares_the_metax_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-metax")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("metax", "hami_metax.plugin")]
    assert dist.version == "0.1.0"


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "metax"]
    assert len(reports) == 1
    report = reports[0]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-metax"
    assert report.version == importlib.metadata.version("hami-metax")
    assert pm.distribution_of("metax") == "hami-metax"


def test_metax_section_gives_both_backends() -> None:
    backends = get_plugin_manager().backends({"metax": {}})
    mine = {b.name: b for b in backends if b.vendor == "metax"}
    assert sorted(mine) == ["Metax-GPU", "Metax-SGPU"]
    assert {b.plugin for b in mine.values()} == {"metax"}

    gpu = mine["Metax-GPU"]
    assert gpu.resource_names == ResourceNames(count="metax-tech.com/gpu", memory_factor=1)
    assert gpu.register_annotation is None
    assert gpu.handshake_annotation is None
    assert gpu.to_allocate_annotation == "hami.io/metax-gpu-devices-to-allocate"
    assert gpu.allocated_annotation == "hami.io/metax-gpu-devices-allocated"
    assert (gpu.use_uuid_annotation, gpu.nouse_uuid_annotation) == (None, None)
    assert (gpu.use_type_annotation, gpu.nouse_type_annotation) == (None, None)
    assert gpu.lock_annotation is None
    assert gpu.standard_capacity is True

    sgpu = mine["Metax-SGPU"]
    assert sgpu.resource_names == ResourceNames(count="metax-tech.com/sgpu", memory="metax-tech.com/vmemory",
                                                cores="metax-tech.com/vcore", memory_factor=1024)
    assert sgpu.register_annotation == "metax-tech.com/node-gpu-devices"
    assert sgpu.handshake_annotation is None
    assert sgpu.to_allocate_annotation == "hami.io/metax-sgpu-devices-to-allocate"
    assert sgpu.allocated_annotation == "hami.io/metax-sgpu-devices-allocated"
    assert sgpu.use_uuid_annotation == "metax-tech.com/use-gpuuuid"
    assert sgpu.nouse_uuid_annotation == "metax-tech.com/nouse-gpuuuid"
    assert (sgpu.use_type_annotation, sgpu.nouse_type_annotation) == (None, None)
    assert sgpu.lock_annotation == "hami.io/mutex.lock"
    assert sgpu.standard_capacity is False
    # One section, one config object: the two backends share the sGPU state.
    assert gpu.config is sgpu.config


def test_null_metax_section_means_defaults() -> None:
    # `metax:` with an empty body in YAML is None: enabled with the chart defaults.
    gpu, sgpu = plugin_manager().backends({"metax": None})
    assert (gpu.name, sgpu.name) == ("Metax-GPU", "Metax-SGPU")
    assert gpu.resource_names.count == "metax-tech.com/gpu"


def test_no_metax_section_gives_no_backend() -> None:
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}}) == []


def test_each_engine_gets_its_own_state() -> None:
    first = plugin_manager().backends({"metax": {}})[1].config
    second = plugin_manager().backends({"metax": {}})[1].config
    assert first == second
    assert first.state is not second.state
