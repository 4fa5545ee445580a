"""Builders for the hami-iluvatar tests: the Iluvatar defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: memory in MiB (``.vMem`` units are 256 MiB), cores in percent of one card. The default
chip is HAMi's ``MR-V100`` with the chart's resource names. The vendor-neutral pieces (``Clock``,
``FakeNode``, ``chosen``, ``requesting``, ``gpu_policy``...) come from the kit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_iluvatar.plugin
from hami_core import testing as kit
from hami_core.plugins.types import DeviceRequest, DeviceUsage, FitResult, GpuPolicy, ResourceNames
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import FakeNode as FakeNode
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.testing import requesting as requesting
from hami_core.wire import keys
from hami_iluvatar.backend import IluvatarBackend
from hami_iluvatar.config import IluvatarChipConfig

CHIP = "MR-V100"
VGPU = "iluvatar.ai/MR-V100-vgpu"
VMEM = "iluvatar.ai/MR-V100.vMem"
VCORE = "iluvatar.ai/MR-V100.vCore"
REGISTER = "hami.io/node-MR-V100-register"
HANDSHAKE = "hami.io/node-handshake-MR-V100"
TO_ALLOCATE = "hami.io/MR-V100-devices-to-allocate"
ALLOCATED = "hami.io/MR-V100-devices-allocated"
USE_UUID = "hami.io/use-MR-V100-uuid"
NOUSE_UUID = "hami.io/no-use-MR-V100-uuid"
VGPU_NODE = keys.VGPU_NODE
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
ENV = "SOL_CONTINER_NAME"


# --------------------------------------------------------------------------------------------- engine
ILUVATAR = kit.VendorKit(hami_iluvatar.plugin, "iluvatars")
#: The plugin manager with hami-iluvatar; an engine on an ``iluvatars:`` section (a list of chips; the chart's
#: chips when ``None``) at a fake time.
plugin_manager, make_engine = ILUVATAR.plugin_manager, ILUVATAR.engine


def make_backend(chip: str = CHIP, **entry: Any) -> IluvatarBackend:
    """The backend of one ``iluvatars:`` entry given by chip name and HAMi's camelCase keys."""
    return IluvatarBackend.from_config(IluvatarChipConfig.model_validate({"chipName": chip, **entry}))


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given; the kit's pod, named ``p`` with UID ``uid-<name>``.
container, make_pod = ILUVATAR.container, ILUVATAR.pod


def ilu_container(name: str = "c", gpus: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, chip: str = CHIP, **extra: Any) -> dict[str, Any]:
    """A container with Iluvatar limits for ``chip`` (``mem`` in 256 MiB units; values as strings)."""
    names = ResourceNames(f"iluvatar.ai/{chip}-vgpu", f"iluvatar.ai/{chip}.vMem", cores=f"iluvatar.ai/{chip}.vCore")
    return kit.device_container(names, gpus, mem, cores, name=name, **extra)


def running_pod(name: str, node: str, allocated: Mapping[str, str] | str, *, containers: int = 1) -> dict[str, Any]:
    """A pod placed earlier: ``hami.io/vgpu-node`` plus allocated annotations (a string means MR-V100's key)."""
    values = {ALLOCATED: allocated} if isinstance(allocated, str) else dict(allocated)
    return kit.running_pod(name, node, values, uid=f"uid-{name}", containers=containers)


# --------------------------------------------------------------------------------------------- nodes
def csv(*devices: str) -> str:
    """A legacy registration value: each device terminated by ``:``."""
    return "".join(d + ":" for d in devices)


def card(id: str, *, count: int = 10, devmem: int = 8192, devcore: int = 100, type: str = CHIP, numa: int = 0,
         health: bool = True, index: int | None = None, mode: str | None = None) -> str:
    """One legacy device: 7 fields, or 9 when ``index``/``mode`` are given."""
    fields = [id, str(count), str(devmem), str(devcore), type, str(numa), "true" if health else "false"]
    if index is not None or mode is not None:
        fields += [str(index or 0), mode or "hami-core"]
    return ",".join(fields)


def make_node(name: str, registers: Mapping[str, str | None] | str | None = None, *,
              annotations: Mapping[str, str | None] | None = None,
              allocatable: Mapping[str, int | str] | None = None) -> dict[str, Any]:
    """A Node with registration annotations (a string means MR-V100's register key).

    Annotations mapped to ``None`` are left out.
    """
    regs = {REGISTER: registers} if isinstance(registers, str) else dict(registers or {})
    annos = {k: v for k, v in {**regs, **(annotations or {})}.items() if v is not None}
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
                            "status": {}}
    if allocatable is not None:
        node["status"]["allocatable"] = {k: str(v) for k, v in allocatable.items()}
    return node


# --------------------------------------------------------------------------------------------- fit
#: A device with its usage (defaults: an MR-V100, 8192 MiB / 100 cores, split 10, ``hami-core`` mode).
usage = partial(kit.usage, vendor=CHIP, count=10, totalmem=8192, mode="hami-core")


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, pct: int | None = None,
            type: str = CHIP) -> DeviceRequest:
    """An Iluvatar request; ``pct`` defaults as the backend sets it (100 without memory, else 0)."""
    return kit.request(type, nums, memreq, coresreq, (100 if memreq == 0 else 0) if pct is None else pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, pod_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None, backend: IluvatarBackend | None = None) -> FitResult:
    """:meth:`IluvatarBackend.hami_filter_nodes` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    chip = backend or make_backend()
    return kit.fit_one(chip.hami_filter_nodes, chip, devices, req, pod_annotations=pod_annotations, policy=policy)
