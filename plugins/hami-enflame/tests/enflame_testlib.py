"""Builders for the hami-enflame tests: the Enflame defaults over :mod:`hami_core.testing`'s builders."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import hami_enflame.plugin
from hami_core import testing as kit
from hami_core.engine.facade import Engine
from hami_core.plugins.types import DeviceBackend, DeviceUsage
from hami_core.testing import T0 as T0
from hami_core.wire import keys
from hami_enflame import backend as ef
from hami_enflame.config import parse_config

GCU = "enflame.com/gcu"
DRS = "enflame.com/drs-gcu"
MEM = "enflame.com/gcu-memory"
CORE = "enflame.com/gcu-core"
VGPU_NODE = keys.VGPU_NODE
#: The registration of the spec's example (one card of 6 slices, three profiles).
PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}


plugin_manager = partial(kit.plugin_manager, hami_enflame.plugin)


def make_engine(enflame: Mapping[str, Any] | None = None) -> Engine:
    """An engine with only the built-in plugins and hami-enflame, at :data:`T0`."""
    return kit.engine_with(hami_enflame.plugin, config={"enflame": dict(enflame or {})})


def backends(**enflame: Any) -> tuple[DeviceBackend, DeviceBackend]:
    """(GCU, Enflame) backends of one ``enflame:`` section given as keyword arguments."""
    gcu, drs = ef.make_backends(parse_config(enflame))
    return gcu, drs


#: A container whose quantities stay as given.
container = partial(kit.container, as_strings=False)


def make_pod(*containers: Mapping[str, Any], init: Sequence[Mapping[str, Any]] = (), name: str = "p",
             annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The kit's pod, named ``p`` with UID ``uid-<name>``."""
    return kit.pod(*containers, init=init, name=name, uid=f"uid-{name}", annotations=annotations)


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
    return kit.node(name, annotations={ef.DRS_CAPACITY: raw if raw is not None else drs_capacity(**kwargs)})


def gcu_node(name: str, capacity: int | str | None = 4) -> dict[str, Any]:
    """A Node whose Enflame GCU device plugin advertises ``capacity`` cards."""
    return kit.node(name, allocatable=None if capacity is None else {GCU: capacity})


def drs_usage(id: str, *, index: int = 0, count: int = 6, max_gb: int = 40, used: int = 0, usedmem: int = 0,
              usedcores: int = 0, health: bool = True, profiles: Mapping[str, str] | None = None) -> DeviceUsage:
    """A DRS device with its usage (the spec's card: 6 slices, 40 GB, profiles 1g/3g/6g)."""
    info = {"minor": str(index), "index": str(index), "profiles": dict(PROFILES if profiles is None else profiles),
            "maxSlice": 6}
    return kit.usage(id, vendor=ef.DRS_WORD, index=index, count=count, totalmem=max_gb * 1024, totalcore=100,
                     health=health, custom_info=info, used=used, usedmem=usedmem, usedcores=usedcores)


def gcu_usage(id: str, *, index: int = 0, used: int = 0, health: bool = True) -> DeviceUsage:
    """A whole GCU card (split 1); each task books all of it."""
    return kit.usage(id, vendor=ef.GCU_WORD, index=index, count=1, totalmem=100, totalcore=100, health=health,
                     used=used, usedmem=100 * used, usedcores=100 * used)
