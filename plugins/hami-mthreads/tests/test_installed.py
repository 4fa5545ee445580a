"""The installed distribution: entry point, loading, backend registration (vendors H.1, J.1)."""

from __future__ import annotations

import importlib.metadata

from mthreads_testlib import plugin_manager

from hami_core.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hami_core.plugins.types import ResourceNames


def test_distribution_declares_the_mthreads_entry_point() -> None:
    dist = importlib.metadata.distribution("hami-mthreads")
    eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert [(ep.name, ep.value) for ep in eps] == [("mthreads", "hami_mthreads.plugin")]
    assert dist.version == "0.1.0"


def test_entry_point_is_loaded_by_the_plugin_manager() -> None:
    pm = get_plugin_manager()
    reports = [r for r in pm.reports if r.name == "mthreads"]
    assert len(reports) == 1
    report = reports[0]
    assert report.status == "loaded", report.reason
    assert report.distribution == "hami-mthreads"
    assert report.version == importlib.metadata.version("hami-mthreads")
    assert pm.distribution_of("mthreads") == "hami-mthreads"


def test_mthreads_section_gives_one_backend_with_hami_names() -> None:
    backends = get_plugin_manager().backends({"mthreads": {}})
    mine = [b for b in backends if b.vendor == "mthreads"]
    assert len(mine) == 1
    b = mine[0]
    assert b.name == "Mthreads"
    assert b.plugin == "mthreads"
    assert b.resource_names == ResourceNames(count="mthreads.com/vgpu", memory="mthreads.com/sgpu-memory",
                                             cores="mthreads.com/sgpu-core", memory_factor=512)
    # Capacity based: no registration or handshake annotation; only the allocated pod key (J.1, J.3).
    assert b.register_annotation is None
    assert b.handshake_annotation is None
    assert b.to_allocate_annotation is None
    assert b.allocated_annotation == "hami.io/mthreads-vgpu-devices-allocated"
    assert b.use_type_annotation is None and b.nouse_type_annotation is None
    assert b.use_uuid_annotation == "mthreads.ai/use-gpuuuid"
    assert b.nouse_uuid_annotation == "mthreads.ai/nouse-gpuuuid"
    # No node lock (LockNode/ReleaseNodeLock are no-ops).
    assert b.lock_annotation is None
    assert b.standard_capacity is True


def test_null_mthreads_section_means_defaults() -> None:
    # `mthreads:` with an empty body in YAML is None: enabled with the chart defaults.
    (b,) = plugin_manager().backends({"mthreads": None})
    assert b.name == "Mthreads"
    assert b.resource_names.count == "mthreads.com/vgpu"


def test_no_mthreads_section_gives_no_backend() -> None:
    assert plugin_manager().backends({}) == []
    assert plugin_manager().backends({"nvidia": {}, "cambricon": {}}) == []
