"""Modes of the host directories the device plugin prepares for a container (issue 12: safe modes)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from hami_core.plugins.types import ContainerDevice
from hami_nvidia.config import NvidiaConfig
from hami_nvidia.node import allocation

DEV = ContainerDevice("GPU-0", "NVIDIA", 1000, 10)


def _pod(pod_sc: dict | None = None, ctr_sc: dict | None = None) -> dict:
    ctr: dict = {"name": "main"}
    if ctr_sc is not None:
        ctr["securityContext"] = ctr_sc
    spec: dict = {"containers": [ctr]}
    if pod_sc is not None:
        spec["securityContext"] = pod_sc
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": spec}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("pod_sc", "ctr_sc", "mode"), [
    (None, None, 0o777),  # unknown user: open, as HAMi (any user may run in the container)
    ({"runAsUser": os.getuid()}, None, 0o700),
    (None, {"runAsUser": os.getuid(), "runAsGroup": os.getgid()}, 0o770),
    ({"fsGroup": os.getgid()}, None, 0o770),
    ({"runAsUser": "root"}, None, 0o777),  # not a number: ignored
])
def test_cache_dir_belongs_to_the_container_user(tmp_path: Path, pod_sc: dict | None, ctr_sc: dict | None,
                                                  mode: int) -> None:
    lock = tmp_path / "lock"
    allocation(NvidiaConfig(), _pod(pod_sc, ctr_sc), 0, [DEV], hook=str(tmp_path), lock_dir=str(lock),
               cache_name="c")
    cache = tmp_path / "vgpu" / "containers" / "u-1_main"
    assert _mode(cache) == mode
    if mode != 0o777:
        assert cache.stat().st_uid == os.getuid()
    # the shared lock dir is sticky: a container cannot delete another container's lock file
    assert _mode(lock) == 0o1777
