"""The installed distribution: entry point, loading, backend registration (vendors B.1)."""

from __future__ import annotations

import importlib.metadata

from nvidia_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames
from hami_core.wire import keys


def test_distribution_declares_the_nvidia_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-nvidia")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("nvidia", "hami_nvidia.plugin")]


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "nvidia"]
    assert len(reports) == 1
    report = reports[0]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-nvidia"
    assert report.version == importlib.metadata.version("hami-nvidia")
    assert pm.distribution_of("nvidia") == "hami-nvidia"


def test_nvidia_section_gives_one_backend_with_the_default_names() -> None:
    backends = get_plugin_manager().backends({"nvidia": {}})
    nvidia = [b for b in backends if b.vendor == "nvidia"]
    assert len(nvidia) == 1
    b = nvidia[0]
    assert b.name == "NVIDIA"
    assert b.plugin == "nvidia"
    assert b.resource_names == ResourceNames(count="nvidia.com/gpu", memory="nvidia.com/gpumem",
                                             memory_percentage="nvidia.com/gpumem-percentage",
                                             cores="nvidia.com/gpucores", priority="nvidia.com/priority",
                                             memory_factor=1)
    assert b.register_annotation == "hami.io/node-nvidia-register"
    assert b.handshake_annotation == "hami.io/node-handshake"
    assert b.to_allocate_annotation == "hami.io/vgpu-devices-to-allocate"
    assert b.allocated_annotation == "hami.io/vgpu-devices-allocated"
    assert b.use_type_annotation == "nvidia.com/use-gputype"
    assert b.nouse_type_annotation == "nvidia.com/nouse-gputype"
    assert b.use_uuid_annotation == "nvidia.com/use-gpuuuid"
    assert b.nouse_uuid_annotation == "nvidia.com/nouse-gpuuuid"
    assert b.lock_annotation == keys.NODE_LOCK == "hami.io/mutex.lock"


def test_null_nvidia_section_means_defaults() -> None:
    # `nvidia:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"nvidia": None})
    assert b.name == "NVIDIA"
    assert b.resource_names.count == "nvidia.com/gpu"


def test_no_nvidia_section_gives_no_backend() -> None:
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"cambricon": {}}) == []
