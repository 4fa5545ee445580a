"""Builders for the dynamic-MIG scheduler tests: an A100-40GB's MIG profiles, MIG GPUs as registered and as booked.

The profiles are hand-written (not read from a driver): 1g.5gb x7 (starts 0..6), 2g.10gb at 0/2/4, 3g.20gb at 0/4
(4 slices each, as NVML reports them), 4g.20gb at 0, 7g.40gb at 0 (8 slices).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nvidia_testlib import reg

from hami_core.plugins.types import DeviceInfo, DeviceUsage, MigInstance, MigProfile, Placement
from hami_core.wire import keys
from hami_nvidia import backend as nv

A100 = "NVIDIA A100-SXM4-40GB"
A100_MEM = 40960
#: (name, memoryMB, core, sliceCount, placement starts, placement size)
A100_PROFILES: tuple[tuple[str, int, int, int, tuple[int, ...], int], ...] = (
    ("1g.5gb", 5120, 14, 1, tuple(range(7)), 1),
    ("2g.10gb", 10240, 28, 2, (0, 2, 4), 2),
    ("3g.20gb", 20480, 42, 3, (0, 4), 4),
    ("4g.20gb", 20480, 57, 4, (0,), 4),
    ("7g.40gb", 40960, 100, 7, (0,), 8),
)
PROFILE = {name: (mem, core, size) for name, mem, core, _, _, size in A100_PROFILES}
MIG_ALLOCATIONS = keys.VGPU_MIG_ALLOCATIONS


def a100_profiles() -> tuple[MigProfile, ...]:
    return tuple(MigProfile(name, mem, core, slices, tuple(Placement(s, size) for s in starts))
                 for name, mem, core, slices, starts, size in A100_PROFILES)


def a100_profiles_json() -> list[dict[str, Any]]:
    """``migProfiles`` as the device plugin registers them."""
    return [{"name": name, "memoryMB": mem, "core": core, "sliceCount": slices,
             "placements": [{"start": s, "size": size} for s in starts]}
            for name, mem, core, slices, starts, size in A100_PROFILES]


def mig_reg(id: str, *, index: int = 0, count: int = 7, health: bool = True) -> dict[str, Any]:
    """One MIG-mode A100 in ``hami.io/node-nvidia-register`` (count = max instanceCount, devcore 100)."""
    return reg(id, index=index, count=count, devmem=A100_MEM, devcore=100, type=A100, mode="mig", health=health,
               migProfiles=a100_profiles_json())


def instance(profile: str, start: int) -> MigInstance:
    return MigInstance(profile, Placement(start, PROFILE[profile][2]))


def mig_gpu(id: str, *, index: int = 0, in_use: Iterable[tuple[str, int]] = (), count: int = 7,
            health: bool = True) -> DeviceUsage:
    """A MIG-mode A100 with ``in_use`` (profile, start) instances booked, as the engine's ledger books them."""
    info = DeviceInfo(id=id, index=index, count=count, devmem=A100_MEM, devcore=100, type=A100, mode="mig",
                      health=health, mig_profiles=a100_profiles(), vendor=nv.COMMON_WORD)
    booked = [instance(p, s) for p, s in in_use]
    used = DeviceUsage(info, used=len(booked), usedmem=sum(PROFILE[i.profile][0] for i in booked),
                       usedcores=sum(PROFILE[i.profile][1] for i in booked))
    used.mig_in_use = tuple(booked)
    return used


def placements(devices: Iterable[Any]) -> list[tuple[str, str, int]]:
    """(uuid, profile, start) of each chosen MIG device, in order."""
    out = []
    for d in devices:
        info = d.custom_info or {}
        out.append((d.uuid, info["migProfile"], info["migPlacement"].start))
    return out


def allocation(container: int, device: int, gpu: str, profile: str, start: int,
               runtime: tuple[str, int, int] | None = None) -> dict[str, Any]:
    """One ``hami.io/vgpu-mig-allocations`` entry (``runtime``: migUUID, gpuInstanceID, computeInstanceID)."""
    out: dict[str, Any] = {"containerIndex": container, "deviceIndex": device, "gpuUUID": gpu, "profile": profile,
                           "placement": {"start": start, "size": PROFILE[profile][2]}}
    if runtime is not None:
        out.update(migUUID=runtime[0], gpuInstanceID=runtime[1], computeInstanceID=runtime[2])
    return out


def mig_annotations(node: str, entries: Iterable[tuple[str, str, int]],
                    runtime: Mapping[int, tuple[str, int, int]] | None = None) -> dict[str, str]:
    """What the scheduler writes for a one-container pod holding (gpu, profile, start) instances on ``node``."""
    import json

    entries = list(entries)
    devices = "".join(f"{gpu},NVIDIA,{PROFILE[p][0]},{PROFILE[p][1]}:" for gpu, p, _ in entries) + ";"
    allocs = [allocation(0, i, gpu, p, s, (runtime or {}).get(i)) for i, (gpu, p, s) in enumerate(entries)]
    return {keys.VGPU_NODE: node, keys.VGPU_DEVICES_ALLOCATED: devices, keys.VGPU_DEVICES_TO_ALLOCATE: devices,
            MIG_ALLOCATIONS: json.dumps(allocs, separators=(",", ":"))}
