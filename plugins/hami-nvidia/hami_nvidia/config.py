"""The ``nvidia:`` section of HAMi's device-config.yaml, and the device plugin's per-node ``config.json``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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


def operating_mode(node_name: str, path: str | None = None) -> str:
    """This node's ``operatingmode`` from ``{"nodeconfig":[{"name":..., "operatingmode":...}, ...]}``.

    ``path`` defaults to ``$HAMI_NVIDIA_NODE_CONFIG`` or ``/config/config.json``. A missing file, no entry for
    the node or no ``operatingmode`` gives ``hami-core`` (HAMi writes an empty mode when the file cannot be
    read, which every reader treats as hami-core). An unreadable file or a bad value raises
    :class:`ConfigError` naming the file and the field. Only ``operatingmode`` is applied here; the other
    per-node overrides are not built.
    """
    import json
    import os
    from pathlib import Path

    path = path or os.environ.get(NODE_CONFIG_ENV) or DEFAULT_NODE_CONFIG
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return "hami-core"
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the node config: {exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    entries = data.get("nodeconfig") if isinstance(data, dict) else None
    if entries is None:
        return "hami-core"
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: nodeconfig must be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ConfigError(f"{path}: nodeconfig[{i}] must be an object")
        if entry.get("name") != node_name:
            continue
        mode = entry.get("operatingmode")
        if mode is None or mode == "":
            return "hami-core"
        if mode not in OPERATING_MODES:
            raise ConfigError(f"{path}: nodeconfig[{i}].operatingmode must be one of "
                              f"{', '.join(OPERATING_MODES)}, got {mode!r}")
        return str(mode)
    return "hami-core"


def allowlisted_profiles(cfg: NvidiaConfig, model: str) -> list[str] | None:
    """The MIG profiles allowed on a GPU named ``model``: the first allowlist entry with a matching
    ``models`` substring (spec §2.12 b), or ``None`` when no entry matches."""
    for entry in cfg.mig_profile_allowlist:
        if any(sub and sub in model for sub in entry.models):
            return list(entry.profiles)
    return None
