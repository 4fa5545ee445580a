"""``scheduler.fgd``: the ``fgd`` policy's own configuration section, validated with the scheduler's (mounted on
:class:`~hami_core.engine.config.SchedulerConfig` by :mod:`hami_core.policies`) and read by the policy when an
engine starts (``hami_policy_setup``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hami_core.engine.workload import DEVICELESS, Shape
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET
from hami_core.wire.common import INT32_MAX, MAX_NODE_DEVICES

__all__ = ["MAX_FGD_CACHE_MIB", "MAX_FGD_CLASSES", "MAX_FGD_WEIGHT", "MAX_FGD_WINDOW", "SECTION", "FgdClass",
           "FgdConfig"]

#: The section's name under ``scheduler:``.
SECTION = "fgd"
#: Upper bounds of the numeric settings: a typo (``window: 10000000000``) must fail start-up with the field named,
#: not hang it or overflow later; ``.inf`` and ``.nan`` are refused (``allow_inf_nan=False``).
MAX_FGD_WINDOW = 1_000_000
MAX_FGD_CACHE_MIB = 1 << 20
MAX_FGD_CLASSES = 10_000
MAX_FGD_WEIGHT = 1e12


class FgdClass(BaseModel):
    """One request shape of a fixed workload mix (``scheduler.fgd.workload[]``). ``nums: 0`` is a class of pods
    without devices: every free device share is a fragment for them (give only its weight and CPU/memory)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    backend: str = Field("NVIDIA", min_length=1)
    nums: int = Field(1, ge=0, le=MAX_NODE_DEVICES)
    cores: int = Field(0, ge=0, le=100)
    memory: int = Field(0, ge=0, le=INT32_MAX, description="MiB per device")
    mem_percentage: int | None = Field(None, alias="memPercentage", ge=0, le=100)
    types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = Field((), alias="nouseTypes")
    weight: float = Field(1.0, gt=0, le=MAX_FGD_WEIGHT)
    #: CPU (milli) and memory (MiB) a pod of this class requests from the node.
    cpu_milli: float = Field(0, alias="cpuMilli", ge=0, le=INT32_MAX)
    host_memory: float = Field(0, alias="hostMemoryMiB", ge=0, le=INT32_MAX)

    @model_validator(mode="after")
    def _deviceless(self) -> FgdClass:
        if self.nums == 0 and (self.cores or self.memory or self.mem_percentage is not None or self.types
                               or self.nouse_types):
            raise ValueError("a class with nums: 0 (pods without devices) takes no cores, memory, memPercentage, "
                             "types or nouseTypes")
        return self

    def shape(self) -> Shape:
        if self.nums == 0:
            return DEVICELESS
        pct = MEM_PERCENTAGE_UNSET if self.mem_percentage is None else self.mem_percentage
        return Shape(self.backend, self.nums, self.cores, self.memory, pct,
                     tuple(t.upper() for t in self.types), tuple(t.upper() for t in self.nouse_types))


class FgdConfig(BaseModel):
    """``scheduler.fgd``: the fragmentation-aware node policy's view of the workload mix."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    #: Online learning covers the last ``window`` pods the scheduler was asked about.
    window: int = Field(1000, gt=0, le=MAX_FGD_WINDOW)
    #: A new mix is used once it moved by more than this (total variation distance; 0 = every pod).
    tolerance: float = Field(0.02, ge=0, le=1)
    #: How finely fragmentation growth is scored (the paper uses 100; ties go to packing).
    #: None (unset): 25 steps, 100 for a mix with device-type constraints (``Workload.steps``); a value: exactly that.
    score_steps: int | None = Field(None, alias="scoreSteps", ge=1, le=10000)
    #: Keep the most popular classes covering this fraction of pods.
    coverage: float = Field(0.95, gt=0, le=1)
    #: MiB of growth caches the policy keeps (least recently used request signatures dropped first); 0 = none
    #: kept between decisions. The default holds ~100 signatures of a 5,000-node cluster (docs/fgd.md, Cost).
    cache_mib: int = Field(256, alias="cacheMiB", ge=0, le=MAX_FGD_CACHE_MIB)
    #: How nodes in one score step are ordered: ``packing`` (the fullest first), ``order`` (the node the
    #: scheduler learned first, as the paper's simulator does), ``balance`` (the node whose free CPU and device
    #: share the pod brings closest to the mix's ratio) or ``auto`` (balance; order for a mix with device-type
    #: constraints); see ``TIE_BREAKS``.
    ties: Literal["packing", "order", "balance", "auto"] = "auto"
    #: Weight of the reservation term (:mod:`.scarcity`): a pod taking share of a device type that classes accepting
    #: fewer types will ask for grows the score's fragmentation by this much per milli taken (1 = as if it all
    #: became fragments); 0 turns it off. Only a mix with device-type constraints claims anything.
    reserve: float = Field(1.0, ge=0, le=1000)
    #: A fixed mix; when given, online learning is off.
    workload: tuple[FgdClass, ...] = Field((), max_length=MAX_FGD_CLASSES)

    def fixed_mix(self) -> list[tuple[Shape, float, float, float]] | None:
        if not self.workload:
            return None
        return [(c.shape(), c.weight, c.cpu_milli, c.host_memory) for c in self.workload]
