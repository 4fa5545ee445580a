"""The ``vnpus:`` section of HAMi's device-config.yaml (vendors.md C.1-C.2, scheduler.md §10.1).

One backend is built per ``configs[]`` entry. A section that is present but empty (``vnpus:`` or
``vnpus: {}``), or one without ``configs``, means HAMi's Helm-chart defaults (:data:`CHART_CONFIGS`).
Validate it with ``parse_section(SECTION, AscendConfig, value)`` (:func:`hami_core.plugins.parse_section`): a bad
field raises :class:`~hami_core.plugins.ConfigError` naming ``vnpus.<field>``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hami_core.wire.common import INT32_MAX  # memory (MiB), AI cores and CPUs are HAMi's int32 on the wire

SECTION = "vnpus"
_FORBIDDEN = (",", ":", ";")


class Template(BaseModel):
    """One vNPU template: a fixed memory/AI-core slice of a chip (``templates[]``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(min_length=1)
    memory: int = Field(ge=0, le=INT32_MAX)
    ai_core: int = Field(0, alias="aiCore", ge=0, le=INT32_MAX)
    ai_cpu: int = Field(0, alias="aiCPU", ge=0, le=INT32_MAX)


class ChipConfig(BaseModel):
    """One chip model (HAMi ``VNPUConfig``): one backend whose common word is ``commonWord``.

    ``templates`` are kept sorted by memory ascending (HAMi sorts them at init; ties keep file order).
    Memory is in MiB; ``memoryFactor`` scales the container's memory quantity (values <= 1 mean none).
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    chip_name: str = Field("", alias="chipName")
    common_word: str = Field(alias="commonWord", min_length=1)
    resource_name: str = Field(alias="resourceName", min_length=1)
    resource_memory_name: str = Field("", alias="resourceMemoryName")
    resource_core_name: str = Field("", alias="resourceCoreName")
    memory_allocatable: int = Field(0, alias="memoryAllocatable", ge=0, le=INT32_MAX)
    memory_capacity: int = Field(0, alias="memoryCapacity", ge=0, le=INT32_MAX)
    memory_factor: int = Field(1, alias="memoryFactor", ge=0, le=INT32_MAX)
    ai_core: int = Field(0, alias="aiCore", ge=0, le=INT32_MAX)
    ai_cpu: int = Field(0, alias="aiCPU", ge=0, le=INT32_MAX)
    runtime_class_name: str = Field("", alias="runtimeClassName")
    overwrite_env: bool = Field(False, alias="overwriteEnv")
    super_pod: bool = Field(False, alias="superPod")
    templates: tuple[Template, ...] = ()

    @field_validator("common_word")
    @classmethod
    def _common_word(cls, value: str) -> str:
        # The common word is the request Type and is written into ``uuid,type,mem,cores:`` pod annotations.
        if any(c in value for c in _FORBIDDEN):
            raise ValueError(f"must not contain ',', ':' or ';' (got {value!r})")
        return value

    @field_validator("templates")
    @classmethod
    def _sorted(cls, templates: tuple[Template, ...]) -> tuple[Template, ...]:
        return tuple(sorted(templates, key=lambda t: t.memory))

    def trim(self, memory: int) -> tuple[int, str]:
        """HAMi ``trimMemory`` (C.4): the first template with memory >= ``memory`` → (its memory, its name);
        else ``memory <= memoryCapacity`` → (``memoryAllocatable``, ``""`` = whole card); else ``(0, "")``."""
        for template in self.templates:
            if memory <= template.memory:
                return template.memory, template.name
        if memory <= self.memory_capacity:
            return self.memory_allocatable, ""
        return 0, ""


class AscendConfig(BaseModel):
    """The whole ``vnpus:`` section: the cluster-wide soft-split default and one entry per chip model."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    hami_vnpu_core: bool = Field(False, alias="hamiVnpuCore")
    configs: tuple[ChipConfig, ...] | None = None

    @model_validator(mode="after")
    def _unique_common_words(self) -> AscendConfig:
        seen: set[str] = set()
        for chip in self.configs or ():
            if chip.common_word in seen:
                raise ValueError(f"configs: commonWord {chip.common_word!r} appears twice")
            seen.add(chip.common_word)
        return self

    def chips(self) -> tuple[ChipConfig, ...]:
        """The configured chips, or the chart defaults when ``configs`` is absent."""
        return CHART_CONFIGS if self.configs is None else self.configs


def _chart(chip: str, word: str, allocatable: int, capacity: int, ai_core: int, ai_cpu: int,
           templates: list[tuple[str, int, int, int]], *, super_pod: bool = False) -> ChipConfig:
    return ChipConfig.model_validate({
        "chipName": chip, "commonWord": word, "resourceName": f"huawei.com/{word}",
        "resourceMemoryName": f"huawei.com/{word}-memory", "resourceCoreName": f"huawei.com/{word}-core",
        "memoryAllocatable": allocatable, "memoryCapacity": capacity, "aiCore": ai_core, "aiCPU": ai_cpu,
        "superPod": super_pod,
        "templates": [{"name": n, "memory": m, "aiCore": c, "aiCPU": p} for n, m, c, p in templates],
    })


#: HAMi's Helm chart ``vnpus.configs`` (vendors.md C.2): what an empty ``vnpus:`` section means.
CHART_CONFIGS: tuple[ChipConfig, ...] = (
    _chart("910A", "Ascend910A", 32768, 32768, 30, 0,
           [("vir02", 2184, 2, 0), ("vir04", 4369, 4, 0), ("vir08", 8738, 8, 0), ("vir16", 17476, 16, 0)]),
    _chart("910B2", "Ascend910B2", 65536, 65536, 24, 6,
           [("vir03_1c_8g", 8192, 3, 1), ("vir06_1c_16g", 16384, 6, 1), ("vir12_3c_32g", 32768, 12, 3)]),
    _chart("910B3", "Ascend910B3", 65536, 65536, 20, 7,
           [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)]),
    _chart("910B4-1", "Ascend910B4-1", 65536, 65536, 20, 7,
           [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)]),
    _chart("910B4", "Ascend910B4", 32768, 32768, 20, 7,
           [("vir05_1c_8g", 8192, 5, 1), ("vir10_3c_16g", 16384, 10, 3)]),
    _chart("310P3", "Ascend310P", 21527, 24576, 8, 7,
           [("vir01", 3072, 1, 1), ("vir02", 6144, 2, 2), ("vir04", 12288, 4, 4)]),
    _chart("Ascend910", "Ascend910C", 65536, 65536, 20, 7,
           [("vir05_1c_16g", 16384, 5, 1), ("vir10_3c_32g", 32768, 10, 3)], super_pod=True),
)

