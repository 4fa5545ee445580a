"""Builders for the hami-ascend tests: the Ascend defaults over :mod:`hami_core.testing`'s builders.

Units follow HAMi: memory in MiB; cores are the registered ``devcore`` units (AI cores) in template mode
and percent of a card in hami-core mode. The vendor-neutral pieces (``Clock``, ``chosen``, ``requesting``,
``local_time``, ``gpu_policy``...) come from the kit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import hami_ascend.plugin
from hami_ascend import backend as npu
from hami_ascend.config import CHART_CONFIGS, SECTION, AscendConfig, ChipConfig
from hami_core import testing as kit
from hami_core.plugins import DeviceRequest, DeviceUsage, FitResult, GpuPolicy, ResourceNames
from hami_core.testing import T0 as T0
from hami_core.testing import Clock as Clock
from hami_core.testing import chosen as chosen
from hami_core.testing import gpu_policy as gpu_policy
from hami_core.testing import local_time as local_time
from hami_core.testing import requesting as requesting
from hami_core.wire import keys

VGPU_NODE = keys.VGPU_NODE
GPU_POLICY = keys.GPU_SCHEDULER_POLICY
NODE_POLICY = keys.NODE_SCHEDULER_POLICY
VNPU_MODE = npu.VNPU_MODE
HAMI_CORE = {npu.VNPU_MODE: npu.VNPU_MODE_HAMI_CORE}


# --------------------------------------------------------------------------------------------- names
def res(word: str, kind: str = "") -> str:
    """HAMi's chart resource names: ``huawei.com/<cw>``, ``huawei.com/<cw>-memory``, ``huawei.com/<cw>-core``."""
    return f"huawei.com/{word}" + (f"-{kind}" if kind else "")


def register_key(word: str) -> str:
    return f"hami.io/node-register-{word}"


def handshake_key(word: str) -> str:
    return f"hami.io/node-handshake-{word}"


def allocated_key(word: str) -> str:
    return f"hami.io/{word}-devices-allocated"


def to_allocate_key(word: str) -> str:
    return f"hami.io/{word}-devices-to-allocate"


# --------------------------------------------------------------------------------------------- engine
ASCEND = kit.VendorKit(hami_ascend.plugin, SECTION, AscendConfig, empty=None)
#: The plugin manager with hami-ascend; an engine on a ``vnpus:`` section (the chart's chips when ``None``) at a
#: fake time; the section as the plugin validates it.
plugin_manager, make_engine, parse_config = ASCEND.plugin_manager, ASCEND.engine, ASCEND.parse_config


def chart_chip(word: str) -> ChipConfig:
    return next(c for c in CHART_CONFIGS if c.common_word == word)


def chip_section(word: str, **overrides: Any) -> dict[str, Any]:
    """One ``configs[]`` entry: the chart's entry for ``word`` with camelCase ``overrides``."""
    entry = chart_chip(word).model_dump(by_alias=True)
    entry.update(overrides)
    return entry


def make_backend(word: str = "Ascend910A", *, hami_vnpu_core: bool = False, **overrides: Any) -> npu.NpuBackend:
    """The backend of one chip (chart defaults with camelCase ``overrides``)."""
    cfg = parse_config({"hamiVnpuCore": hami_vnpu_core, "configs": [chip_section(word, **overrides)]})
    (backend,) = npu.backends(cfg)
    return backend


# --------------------------------------------------------------------------------------------- pods
#: A container whose quantities stay as given; the kit's pod, named ``p`` with UID ``uid-<name>`` unless given.
container, make_pod = ASCEND.container, ASCEND.pod


def npu_container(word: str = "Ascend910A", count: int | str = 1, mem: int | str | None = None,
                  cores: int | str | None = None, name: str = "c") -> dict[str, Any]:
    """A container with Ascend limits for chip ``word`` (values as strings, as in Kubernetes JSON)."""
    names = ResourceNames(res(word), res(word, "memory"), cores=res(word, "core"))
    return kit.device_container(names, count, mem, cores, name=name)


def running_pod(name: str, node: str, word: str, allocated: str, *, containers: int = 1,
                annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus the chip's allocated annotation."""
    return kit.running_pod(name, node, {allocated_key(word): allocated}, uid=f"uid-{name}", containers=containers,
                           annotations=annotations)


# --------------------------------------------------------------------------------------------- nodes
def reg(id: str, *, index: int = 0, count: int = 4, devmem: int = 32768, devcore: int = 30,
        type: str = "Ascend910A", health: bool = True, network: int | None = None,
        **extra: Any) -> dict[str, Any]:
    """One device as Project-HAMi/ascend-device-plugin registers it (``custominfo.NetworkID`` if given)."""
    out: dict[str, Any] = {"id": id, "index": index, "count": count, "devmem": devmem, "devcore": devcore,
                           "type": type, "health": health}
    if network is not None:
        out["custominfo"] = {"NetworkID": network}
    out.update(extra)
    return out


def chips(word: str, n: int, *, devmem: int, devcore: int, count: int = 4, network: bool = False,
          prefix: str = "npu") -> list[dict[str, Any]]:
    """``n`` chips of one model, indexed 0..n-1; with ``network``, chips 0-3 on NetworkID 0 and 4-7 on 1."""
    return [reg(f"{prefix}-{i}", index=i, count=count, devmem=devmem, devcore=devcore, type=word,
                network=(i // 4) if network else None) for i in range(n)]


def make_node(name: str, registrations: Mapping[str, Sequence[Mapping[str, Any]] | str] | None = None, *,
              annotations: Mapping[str, str] | None = None,
              allocatable: Mapping[str, int | str] | None = None) -> dict[str, Any]:
    """A Node with one registration annotation per common word (a device list, or the raw text)."""
    annos: dict[str, str] = {}
    for word, devices in (registrations or {}).items():
        annos[register_key(word)] = devices if isinstance(devices, str) else json.dumps(list(devices))
        annos[handshake_key(word)] = "Reported_2025.06.15 12:00:00"
    annos.update(annotations or {})
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annos},
                            "status": {}}
    if allocatable is not None:
        node["status"]["allocatable"] = {k: str(v) for k, v in allocatable.items()}
    return node


# --------------------------------------------------------------------------------------------- fit
def usage(id: str, *, count: int = 4, totalmem: int = 32000, totalcore: int = 20, type: str = "Ascend910A",
          network: int | None = None, custom_info: Mapping[str, Any] | None = None, **kwargs: Any) -> DeviceUsage:
    """A chip of model ``type`` with its usage; ``network`` sets the ``NetworkID`` custom info. Other keywords
    as :func:`hami_core.testing.usage`."""
    if network is not None:
        custom_info = {"NetworkID": network}
    return kit.usage(id, vendor=type, count=count, totalmem=totalmem, totalcore=totalcore, custom_info=custom_info,
                     **kwargs)


def request(nums: int = 1, memreq: int = 0, coresreq: int = 0, *, word: str = "Ascend910A",
            pct: int | None = None) -> DeviceRequest:
    """An Ascend request as ``GenerateResourceRequests`` builds it (pct 100 without memory, else 0)."""
    return kit.request(word, nums, memreq, coresreq, (100 if memreq == 0 else 0) if pct is None else pct)


def fit(devices: Sequence[DeviceUsage], req: DeviceRequest, *, backend: npu.NpuBackend | None = None,
        pod_annotations: Mapping[str, str] | None = None, node_annotations: Mapping[str, str] | None = None,
        policy: GpuPolicy | None = None) -> FitResult:
    """The backend's ``hami_filter_nodes`` on one node whose devices are given in HAMi's sorted order.

    Fit walks the list from the last device to the first, like HAMi.
    """
    b = backend or make_backend(req.backend)
    return kit.fit_one(b.hami_filter_nodes, b, devices, req, pod_annotations=pod_annotations,
                       node_annotations=node_annotations, policy=policy)
