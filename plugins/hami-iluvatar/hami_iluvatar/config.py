"""The ``iluvatars:`` section of HAMi's device-config.yaml: a list of chips, one backend each (vendors F.1).

Each entry is HAMi's ``IluvatarConfig`` (``chipName``, ``commonWord``, ``resourceCountName``,
``resourceMemoryName``, ``resourceCoreName``). An empty section (YAML ``iluvatars:`` with no body, which
the engine turns into ``{}``, or ``None``) means HAMi's chart default chips; an explicit empty list
``[]`` enables no chip.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from hami_core.plugins import ConfigError, pydantic_error

SECTION = "iluvatars"

#: Longest common word whose derived annotation keys (``hami.io/<word>-devices-to-allocate``) still have a
#: Kubernetes-valid name part (63 characters).
MAX_COMMON_WORD = 63 - len("-devices-to-allocate")

#: HAMi's chart order (``charts/hami/templates/scheduler/device-configmap.yaml``).
CHART_CHIPS: tuple[str, ...] = ("MR-V100", "MR-V50", "BI-V150", "BI-V100")


#: The keys an entry may leave out, with the chart's pattern for its ``chipName``: ``(alias, field, pattern)``.
CHART_PATTERN: tuple[tuple[str, str, str], ...] = (
    ("commonWord", "common_word", "{chip}"),
    ("resourceCountName", "resource_count_name", "iluvatar.ai/{chip}-vgpu"),
    ("resourceMemoryName", "resource_memory_name", "iluvatar.ai/{chip}.vMem"),  # 1 unit = 256 MiB
    ("resourceCoreName", "resource_core_name", "iluvatar.ai/{chip}.vCore"),  # percent of one card
)


class IluvatarChipConfig(BaseModel):
    """One ``iluvatars:`` entry (HAMi ``IluvatarConfig``). Keys are HAMi's camelCase names.

    Keys left out of an entry take the chart's pattern for its ``chipName`` (``commonWord`` = the chip
    name, ``iluvatar.ai/<chip>-vgpu``, ``.vMem``, ``.vCore``); HAMi would read them as empty strings,
    which leaves the chip unusable. An explicit ``""`` memory or core name means "no such resource".
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    chip_name: str = Field(alias="chipName", min_length=1)
    # The common word becomes the request Type and part of annotation keys: a Kubernetes name segment.
    common_word: str = Field(alias="commonWord", min_length=1, max_length=MAX_COMMON_WORD,
                             pattern=r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    resource_count_name: str = Field(alias="resourceCountName", min_length=1)
    resource_memory_name: str = Field(alias="resourceMemoryName")
    resource_core_name: str = Field(alias="resourceCoreName")

    @model_validator(mode="before")
    @classmethod
    def _chart_pattern(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        chip = data.get("chipName", data.get("chip_name"))
        if not isinstance(chip, str) or not chip:
            return data
        out = dict(data)
        for alias, name, pattern in CHART_PATTERN:
            if alias not in out and name not in out:
                out[alias] = pattern.format(chip=chip)
        return out


_CHIPS = TypeAdapter(list[IluvatarChipConfig])


def chart_defaults() -> tuple[IluvatarChipConfig, ...]:
    """HAMi's chart default chips: MR-V100, MR-V50, BI-V150, BI-V100 with the chart's resource names."""
    return tuple(IluvatarChipConfig(chipName=chip) for chip in CHART_CHIPS)


def parse_config(section: Any) -> tuple[IluvatarChipConfig, ...]:
    """Validate the ``iluvatars:`` section into one config per chip.

    ``None`` or ``{}`` gives :func:`chart_defaults`; a list is validated entry by entry. A bad field raises
    :class:`ConfigError` naming ``iluvatars.<index>.<field>``; two entries with the same common word (HAMi
    would silently keep the last) are an error too.

    Not :func:`hami_core.plugins.parse_section`: that validates one mapping, and this section is a list (one
    entry per chip); the errors are named the same way, by :func:`hami_core.plugins.pydantic_error`.
    """
    if section is None or (isinstance(section, dict) and not section):
        return chart_defaults()
    if not isinstance(section, list):
        raise ConfigError(f"{SECTION}: must be a list of chip entries ({{chipName, commonWord, resourceCountName, "
                          f"resourceMemoryName, resourceCoreName}}), got {type(section).__name__}")
    try:
        chips = _CHIPS.validate_python(section)
    except ValidationError as exc:
        raise pydantic_error(SECTION, exc) from None
    seen: dict[str, int] = {}
    for i, chip in enumerate(chips):
        if chip.common_word in seen:
            raise ConfigError(f"invalid configuration: {SECTION}.{i}.commonWord: {chip.common_word!r} is already "
                              f"used by {SECTION}.{seen[chip.common_word]}")
        seen[chip.common_word] = i
    return tuple(chips)
