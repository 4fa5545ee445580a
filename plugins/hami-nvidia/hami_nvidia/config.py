"""The ``nvidia:`` section of HAMi's device-config.yaml, and the device plugin's per-node ``config.json``."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hami_core.plugins import ConfigError
from hami_core.wire import keys
from hami_core.wire.common import INT32_MAX

#: Replicas per GPU. The device plugin advertises every replica in ListAndWatch (about 63 bytes each), so
#: 16 GPUs x 1024 is 1.0 MB, a quarter of gRPC's 4 MiB default message limit that the kubelet applies; HAMi
#: sets no bound, and 3,000,000 made one message of 190 MB that the kubelet refused (it then sees no device).
MAX_DEVICE_SPLIT_COUNT = 1024
#: deviceMemoryScaling / deviceCoreScaling: registered memory (MiB) and cores go on the wire as int32; 100x
#: oversubscription is far past useful and still fits any GPU's memory into int32.
MAX_SCALING = 100.0


class MigAllowlistEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: list[str] = Field(min_length=1)
    profiles: list[str] = Field(min_length=1)

    @field_validator("profiles")
    @classmethod
    def _profile_names(cls, profiles: list[str]) -> list[str]:
        # HAMi ValidateMigProfileAllowlist (spec vendors B.1): every profile looks like "<N>g.<mem>".
        for profile in profiles:
            head, dot, _ = profile.partition(".")
            if not dot or len(head) < 2 or not head.endswith("g"):
                raise ValueError(f"invalid MIG profile {profile!r} (expected <N>g.<memory>, e.g. 1g.5gb)")
        return profiles


class NvidiaConfig(BaseModel):
    """HAMi's ``NvidiaConfig`` with the chart defaults (spec §10.1). Keys are HAMi's camelCase names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    resource_count_name: str = Field(keys.NVIDIA_RESOURCE_COUNT, alias="resourceCountName", min_length=1)
    resource_memory_name: str = Field(keys.NVIDIA_RESOURCE_MEMORY, alias="resourceMemoryName")
    resource_memory_percentage_name: str = Field(keys.NVIDIA_RESOURCE_MEMORY_PERCENTAGE,
                                                 alias="resourceMemoryPercentageName")
    resource_core_name: str = Field(keys.NVIDIA_RESOURCE_CORES, alias="resourceCoreName")
    resource_priority_name: str = Field(keys.NVIDIA_RESOURCE_PRIORITY, alias="resourcePriorityName")
    overwrite_env: bool = Field(False, alias="overwriteEnv")
    default_memory: int = Field(0, alias="defaultMemory", ge=0, le=INT32_MAX)
    default_cores: int = Field(0, alias="defaultCores", ge=0, le=100)
    default_gpu_num: int = Field(1, alias="defaultGPUNum", ge=0, le=INT32_MAX)
    memory_factor: int = Field(1, alias="memoryFactor", ge=1, le=INT32_MAX)
    disable_core_limit: bool = Field(False, alias="disableCoreLimit")
    gpu_core_policy: Literal["default", "force", "disable", ""] = Field("default", alias="gpuCorePolicy")
    runtime_class_name: str = Field("", alias="runtimeClassName")
    #: hami-py's key: what a negative ``nvidia.com/gpucores`` books. ``clamp`` (the default) books 0; ``keep`` books
    #: it as written, as HAMi v2.10.0 does, which lowers the card's used cores below what its pods hold (others then
    #: overcommit the SMs) and hands the pod a negative ``CUDA_DEVICE_SM_LIMIT`` (HAMi-core: no limit).
    negative_cores: Literal["clamp", "keep"] = Field("clamp", alias="negativeCores")
    mig_profile_allowlist: list[MigAllowlistEntry] = Field(default_factory=list, alias="migProfileAllowlist")
    # Device-plugin-side node defaults: they reach the scheduler only through the registration.
    device_split_count: int = Field(10, alias="deviceSplitCount", ge=1, le=MAX_DEVICE_SPLIT_COUNT)
    device_memory_scaling: float = Field(1.0, alias="deviceMemoryScaling", gt=0, le=MAX_SCALING)
    device_core_scaling: float = Field(1.0, alias="deviceCoreScaling", gt=0, le=MAX_SCALING)
    pre_configured_device_memory: int = Field(0, alias="preConfiguredDeviceMemory", ge=0, le=INT32_MAX)
    lib_cuda_log_level: int | None = Field(None, alias="libCudaLogLevel", ge=0, le=INT32_MAX)
    enable_numa_topology: bool = Field(False, alias="enableNumaTopology")
    # HAMi's chart ships MIG geometry tables in this section; accepted and passed through.
    known_mig_geometries: list[Any] | None = Field(None, alias="knownMigGeometries")


# ------------------------------------------------------------------------------------------ node config
#: The per-node override file (spec node.md §2.2 b): the device plugin's ConfigMap, ``config.json``.
NODE_CONFIG_ENV = "HAMI_NVIDIA_NODE_CONFIG"
DEFAULT_NODE_CONFIG = "/config/config.json"
OPERATING_MODES = ("hami-core", "mig", "mps")
#: HAMi's ``--mig-strategy`` (chart ``devicePlugin.migStrategy``), read from the same environment variable.
MIG_STRATEGY_ENV = "MIG_STRATEGY"
MIG_STRATEGIES = ("none", "single", "mixed")

log = logging.getLogger("hami.nvidia.config")


class FilterDevices(BaseModel):
    """``filterdevices``: GPUs this node's device plugin leaves out (HAMi ``FilterDeviceToRegister``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    uuid: list[str] | None = None
    index: list[Annotated[int, Field(ge=0)]] | None = None

    def excludes(self, uuid: str, index: int) -> bool:
        return uuid in (self.uuid or ()) or index in (self.index or ())

    @property
    def empty(self) -> bool:
        return not self.uuid and not self.index


class NodeConfigEntry(BaseModel):
    """One ``nodeconfig`` entry, HAMi's ``DevicePluginConfigs.Nodeconfig[i]`` (lowercase JSON keys).

    Types are strict, as Go's ``json.Unmarshal`` is (``"10"`` is no ``devicesplitcount``), and the bounds are the
    ``nvidia:`` section's. Keys HAMi does not know are logged and ignored, as Go ignores them. ``None`` = not
    given: only given values override (HAMi merges with ``mergo.WithOverride``, which skips nil pointers).
    """

    model_config = ConfigDict(extra="allow", frozen=True, strict=True, allow_inf_nan=False)

    name: str
    operatingmode: Literal["", "hami-core", "mig", "mps"] | None = None
    migstrategy: Literal["", "none", "single", "mixed"] | None = None
    devicesplitcount: int | None = Field(None, ge=1, le=MAX_DEVICE_SPLIT_COUNT)
    devicememoryscaling: float | None = Field(None, gt=0, le=MAX_SCALING)
    devicecorescaling: float | None = Field(None, gt=0, le=MAX_SCALING)
    preconfigureddevicememory: int | None = Field(None, ge=0, le=INT32_MAX)
    # HAMi's LibCudaLogLevel is a string type ("0", "1", "3", "4"); a plain number is accepted too.
    libcudaloglevel: Annotated[int, Field(ge=0, le=INT32_MAX)] | str | None = None
    enablenumatopology: bool | None = None
    filterdevices: FilterDevices | None = None
    enablegetpreferredallocation: bool | None = None

    @field_validator("libcudaloglevel")
    @classmethod
    def _log_level(cls, value: int | str | None) -> int | None:
        if isinstance(value, str):
            if not value.isdigit() or int(value) > INT32_MAX:
                raise ValueError("must be a non-negative integer or its decimal string")
            return int(value)
        return value


#: nodeconfig key -> the ``NvidiaConfig`` field it overrides (HAMi's ``NodeDefaultConfig``).
NODE_OVERRIDES = {"devicesplitcount": "device_split_count", "devicememoryscaling": "device_memory_scaling",
                  "devicecorescaling": "device_core_scaling",
                  "preconfigureddevicememory": "pre_configured_device_memory",
                  "libcudaloglevel": "lib_cuda_log_level", "enablenumatopology": "enable_numa_topology"}


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """What ``config.json`` says for one node, merged over every entry with its name, in file order.

    As HAMi's ``readFromConfigFile``: each given ``NodeDefaultConfig`` value overrides (the last entry wins),
    ``operatingmode`` and ``filterdevices`` only when non-empty, ``enablegetpreferredallocation`` whenever an
    entry matches. ``migstrategy`` is kept for the log only: HAMi v2.10.0 parses it and never reads it (its MIG
    strategy is the ``--mig-strategy`` flag, :data:`MIG_STRATEGY_ENV`).
    """

    node_name: str
    source: str = ""
    #: positions of this node's entries in ``nodeconfig``
    entries: tuple[int, ...] = ()
    operating_mode: str = "hami-core"
    overrides: Mapping[str, Any] = dc_field(default_factory=dict)
    filter_devices: FilterDevices | None = None
    enable_get_preferred_allocation: bool = False
    mig_strategy: str = ""

    def apply(self, cfg: NvidiaConfig) -> NvidiaConfig:
        """``cfg`` with this node's overrides (values were validated with the same bounds as ``cfg``'s)."""
        return cfg.model_copy(update=dict(self.overrides)) if self.overrides else cfg

    def excludes(self, uuid: str, index: int) -> bool:
        """Whether ``filterdevices`` leaves the GPU out of this node's registration and kubelet list."""
        return self.filter_devices is not None and self.filter_devices.excludes(uuid, index)


def _entry_errors(source: str, i: int, exc: ValidationError) -> str:
    """``config.json: nodeconfig[2].devicesplitcount: Input should be ...`` for each problem, ``; ``-joined."""
    out = []
    for err in exc.errors(include_url=False):
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        value = f", got {err['input']!r}" if err["type"] != "missing" and "input" in err else ""
        out.append(f"{source}: nodeconfig[{i}]{where}: {err['msg']}{value}")
    return "; ".join(out)


def parse_node_config(text: str, node_name: str, source: str) -> NodeConfig:
    """:class:`NodeConfig` of ``node_name`` from the text of ``config.json`` (``source`` names it in errors).

    Every entry is validated, not only this node's: the file is one ConfigMap for the whole cluster, and an
    error on another node's line is the same error here (HAMi drops the whole file on a type error anywhere,
    silently; hami-py refuses it with the file and field named). Raises :class:`ConfigError`.
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{source}: not JSON: {exc}") from None
    if data is None:
        return NodeConfig(node_name, source)
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a JSON object with a nodeconfig list, got {type(data).__name__}")
    entries = data.get("nodeconfig")
    if entries is None:
        return NodeConfig(node_name, source)
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: nodeconfig: must be a list, got {type(entries).__name__}")
    parsed: list[NodeConfigEntry] = []
    for i, raw in enumerate(entries):
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: nodeconfig[{i}]: must be an object, got {type(raw).__name__}")
        try:
            entry = NodeConfigEntry.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(_entry_errors(source, i, exc)) from None
        if entry.model_extra:
            log.warning("%s: nodeconfig[%d] (%s): unknown keys %s ignored", source, i, entry.name,
                        ", ".join(sorted(entry.model_extra)))
        parsed.append(entry)
    mine = [(i, e) for i, e in enumerate(parsed) if e.name == node_name]
    overrides: dict[str, Any] = {}
    mode, strategy, filters, preferred = "", "", None, False
    for _, e in mine:
        for key, target in NODE_OVERRIDES.items():
            value = getattr(e, key)
            if value is not None:
                overrides[target] = value
        if e.operatingmode:
            mode = e.operatingmode
        if e.migstrategy:
            strategy = e.migstrategy
        if e.filterdevices is not None and not e.filterdevices.empty:
            filters = e.filterdevices
        preferred = bool(e.enablegetpreferredallocation)
    return NodeConfig(node_name, source, tuple(i for i, _ in mine), mode or "hami-core", overrides, filters,
                      preferred, strategy)


def load_node_config(node_name: str, path: str | None = None) -> NodeConfig:
    """This node's :class:`NodeConfig` from ``path`` (default ``$HAMI_NVIDIA_NODE_CONFIG``, else
    ``/config/config.json``). A missing file means no overrides (``hami-core``; HAMi logs the read error and
    goes on with the ``nvidia:`` section); an unreadable or invalid one raises :class:`ConfigError`."""
    path = path or os.environ.get(NODE_CONFIG_ENV) or DEFAULT_NODE_CONFIG
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return NodeConfig(node_name)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the node config: {exc}") from None
    return parse_node_config(text, node_name, path)


def operating_mode(node_name: str, path: str | None = None) -> str:
    """This node's ``operatingmode`` (:func:`load_node_config`): ``hami-core`` unless an entry sets another."""
    return load_node_config(node_name, path).operating_mode


def mig_strategy(environ: Mapping[str, str] | None = None) -> str:
    """HAMi's ``--mig-strategy`` from ``$MIG_STRATEGY`` (``none`` when unset or empty); raises
    :class:`ConfigError` naming the variable for any other value than ``none``, ``single``, ``mixed``."""
    environ = os.environ if environ is None else environ
    value = environ.get(MIG_STRATEGY_ENV, "") or "none"
    if value not in MIG_STRATEGIES:
        raise ConfigError(f"{MIG_STRATEGY_ENV}: must be one of {', '.join(MIG_STRATEGIES)}, got {value!r}")
    return value


def allowlisted_profiles(cfg: NvidiaConfig, model: str) -> list[str] | None:
    """The MIG profiles allowed on a GPU named ``model``: the first allowlist entry with a matching
    ``models`` substring (spec §2.12 b), or ``None`` when no entry matches."""
    for entry in cfg.mig_profile_allowlist:
        if any(sub and sub in model for sub in entry.models):
            return list(entry.profiles)
    return None
