"""Builders for the hami-enflame tests: the Enflame defaults over :mod:`hami_core.testing`'s builders."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import hami_enflame.plugin
from hami_core import testing as kit
from hami_core.plugins.types import DeviceUsage
from hami_core.testing import T0 as T0
from hami_core.wire import keys
from hami_enflame.config import SECTION, EnflameConfig
from hami_enflame.drs import DRS_CAPACITY, DRS_WORD, DrsBackend
from hami_enflame.gcu import GCU_WORD, GcuBackend

GCU = "enflame.com/gcu"
DRS = "enflame.com/drs-gcu"
MEM = "enflame.com/gcu-memory"
CORE = "enflame.com/gcu-core"
VGPU_NODE = keys.VGPU_NODE
#: The registration of the spec's example (one card of 6 slices, three profiles).
PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}


ENFLAME = kit.VendorKit(hami_enflame.plugin, SECTION, EnflameConfig)
#: The plugin manager with hami-enflame; an engine on an ``enflame:`` section (the defaults when ``None``) at
#: :data:`T0`; the section validated as the plugin validates it.
plugin_manager, make_engine, parse_config = ENFLAME.plugin_manager, ENFLAME.engine, ENFLAME.parse_config


def backends(**enflame: Any) -> tuple[GcuBackend, DrsBackend]:
    """(GCU, Enflame) backends of one ``enflame:`` section given as keyword arguments."""
    cfg = parse_config(enflame)
    return GcuBackend.from_config(cfg), DrsBackend.from_config(cfg)


#: A container whose quantities stay as given; the kit's pod, named ``p`` with UID ``uid-<name>``.
container, make_pod = ENFLAME.container, ENFLAME.pod


def running_pod(name: str, node: str, key: str, allocated: str, containers: int = 1) -> dict[str, Any]:
    """A pod the scheduler placed earlier: ``hami.io/vgpu-node`` plus an allocated annotation."""
    return kit.running_pod(name, node, {key: allocated}, uid=f"uid-{name}", containers=containers)


def drs_capacity(devices: Sequence[tuple[str, str, Any]] = (("0", "0", 6),),
                 profiles: Mapping[str, str] | None = None) -> str:
    """``enflame.com/gcu-drs-capacity`` JSON from ``(index, minor, capacity)`` triples."""
    return json.dumps({"devices": [{"index": i, "minor": m, "capacity": c} for i, m, c in devices],
                       "profiles": dict(PROFILES if profiles is None else profiles)})


def drs_node(name: str, raw: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """A Node registered by the Enflame DRS device plugin (``raw`` replaces the JSON text)."""
    return kit.node(name, annotations={DRS_CAPACITY: raw if raw is not None else drs_capacity(**kwargs)})


def gcu_node(name: str, capacity: int | str | None = 4) -> dict[str, Any]:
    """A Node whose Enflame GCU device plugin advertises ``capacity`` cards."""
    return kit.node(name, allocatable=None if capacity is None else {GCU: capacity})


def drs_usage(id: str, *, index: int = 0, count: int = 6, max_gb: int = 40, used: int = 0, usedmem: int = 0,
              usedcores: int = 0, health: bool = True, profiles: Mapping[str, str] | None = None) -> DeviceUsage:
    """A DRS device with its usage (the spec's card: 6 slices, 40 GB, profiles 1g/3g/6g)."""
    info = {"minor": str(index), "index": str(index), "profiles": dict(PROFILES if profiles is None else profiles),
            "maxSlice": 6}
    return kit.usage(id, vendor=DRS_WORD, index=index, count=count, totalmem=max_gb * 1024, totalcore=100,
                     health=health, custom_info=info, used=used, usedmem=usedmem, usedcores=usedcores)


def gcu_usage(id: str, *, index: int = 0, used: int = 0, health: bool = True) -> DeviceUsage:
    """A whole GCU card (split 1); each task books all of it."""
    return kit.usage(id, vendor=GCU_WORD, index=index, count=1, totalmem=100, totalcore=100, health=health,
                     used=used, usedmem=100 * used, usedcores=100 * used)
