"""Engine configuration: HAMi's device-config.yaml shape plus a ``scheduler:`` section for defaults.

Vendor sections (``nvidia:``, ``cambricon:``, ``iluvatars:``, ``vnpus:`` ...) are validated by the vendor
plugins that own them; this module validates the file's overall shape and the ``scheduler:`` section.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hami_core.engine.policy import validate_gpu_policy
from hami_core.engine.workload import DEVICELESS, Shape
from hami_core.engine.yamlload import MAX_CONFIG_BYTES, YamlInputError, load_yaml, read_text
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.helpers import pydantic_error
from hami_core.plugins.types import MEM_PERCENTAGE_UNSET
from hami_core.wire import keys
from hami_core.wire.common import INT32_MAX, MAX_NODE_DEVICES

#: Upper bounds of numeric settings. A device config is operator input, but a typo (``nodeLockTimeout: 3e9``,
#: ``window: 10000000000``) must fail start-up with the field named, not hang it or overflow later; ``.inf`` and
#: ``.nan`` are refused everywhere (``allow_inf_nan=False``).
MAX_NODE_LOCK_TIMEOUT_S = 86_400.0
MAX_FGD_WINDOW = 1_000_000
MAX_FGD_CACHE_MIB = 1 << 20
MAX_FGD_CLASSES = 10_000
MAX_FGD_WEIGHT = 1e12

#: Top-level sections of HAMi's device-config.yaml (spec §10.1).
HAMI_SECTIONS = frozenset({"nvidia", "cambricon", "hygon", "metax", "mthreads", "iluvatars", "enflame", "kunlun",
                           "awsneuron", "amd", "vastai", "biren", "vnpus"})

#: Used when a configuration names no device section at all (HAMi's built-in test default is NVIDIA).
DEFAULT_DEVICE_CONFIG: dict[str, Any] = {"nvidia": {}}


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
    #: A fixed mix; when given, online learning is off.
    workload: tuple[FgdClass, ...] = Field((), max_length=MAX_FGD_CLASSES)

    def fixed_mix(self) -> list[tuple[Shape, float, float, float]] | None:
        if not self.workload:
            return None
        return [(c.shape(), c.weight, c.cpu_milli, c.host_memory) for c in self.workload]


class SchedulerConfig(BaseModel):
    """The ``scheduler:`` section: HAMi's scheduler flags that shape decisions (spec §10.2)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    scheduler_name: str = Field(keys.DEFAULT_SCHEDULER_NAME, alias="schedulerName")
    node_scheduler_policy: str = Field("binpack", alias="nodeSchedulerPolicy")
    gpu_scheduler_policy: str = Field("spread", alias="gpuSchedulerPolicy")
    force_overwrite_default_scheduler: bool = Field(True, alias="forceOverwriteDefaultScheduler")
    node_lock_timeout: float = Field(300.0, alias="nodeLockTimeout", gt=0, le=MAX_NODE_LOCK_TIMEOUT_S)
    fgd: FgdConfig = Field(default_factory=FgdConfig)

    @field_validator("node_scheduler_policy")
    @classmethod
    def _node_policy(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v.strip()

    @field_validator("gpu_scheduler_policy")
    @classmethod
    def _gpu_policy(cls, v: str) -> str:
        try:
            return validate_gpu_policy(v, field="gpuSchedulerPolicy")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None




@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Validated configuration: the raw device sections (for plugins) and the scheduler defaults."""

    devices: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_DEVICE_CONFIG))
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    source: str = "<default>"


def load_config(config: Mapping[str, Any] | str | Path | EngineConfig | None) -> EngineConfig:
    """Read and validate a configuration: a mapping, a YAML file path, or ``None`` for the defaults."""
    if isinstance(config, EngineConfig):
        return config
    source = "<mapping>"
    if config is None:
        return EngineConfig()
    if isinstance(config, str | Path):
        path = Path(config)
        source = str(path)
        try:
            data = load_yaml(read_text(path, "config file", max_bytes=MAX_CONFIG_BYTES), f"config file {path}")
        except YamlInputError as exc:
            raise ConfigError(str(exc)) from None
        config = data if data is not None else {}
    if not isinstance(config, Mapping):
        raise ConfigError(f"{source}: the configuration must be a mapping of sections, got {type(config).__name__}")
    raw = dict(config)
    sched_raw = raw.pop("scheduler", None) or {}
    if not isinstance(sched_raw, Mapping):
        raise ConfigError(f"scheduler: must be a mapping, got {type(sched_raw).__name__}")
    try:
        scheduler = SchedulerConfig.model_validate(dict(sched_raw))
    except ValidationError as exc:
        raise pydantic_error("scheduler", exc) from None
    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(f"{source}: section names must be strings, got {key!r}")
    # A section present with an empty body (`nvidia:`) means "enabled with defaults".
    devices = {k: (v if v is not None else {}) for k, v in raw.items()} or dict(DEFAULT_DEVICE_CONFIG)
    return EngineConfig(devices=devices, scheduler=scheduler, source=source)
