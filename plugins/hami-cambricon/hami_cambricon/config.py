"""The ``cambricon:`` section of HAMi's device-config.yaml (vendors D.1, scheduler §10.1), plus MLU models.

HAMi reads three keys (``resourceCountName``, ``resourceMemoryName``, ``resourceCoreName``) and runs one
backend, ``MLU``. hami-cambricon keeps that as the default and adds an optional ``models:`` list: one backend
per listed MLU model (``MLU370``, ``MLU590`` ...), each with its own resource names, so that a cluster
mixing models can ask for one of them by resource name. See the README for the design.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from hami_core.plugins import ConfigError, parse_section

SECTION = "cambricon"
#: HAMi's common word: the backend name, request ``Type`` and registered device type of the default path.
COMMON_WORD = "MLU"
#: Chart values (``charts/hami/values.yaml``); the CLI fallback count name is ``cambricon.com/mlu``.
DEFAULT_COUNT = "cambricon.com/vmlu"
DEFAULT_MEMORY = "cambricon.com/mlu.smlu.vmemory"
DEFAULT_CORES = "cambricon.com/mlu.smlu.vcore"

#: A model name becomes the backend name, the device type and part of annotation keys
#: (``hami.io/cambricon-<name>-devices-to-allocate`` must stay within Kubernetes' 63-character name part).
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")


@dataclass(frozen=True, slots=True)
class MluModelSpec:
    """One resolved MLU backend: what it is called and which resources and node capacity it reads.

    The default (HAMi) path resolves to a single spec named ``MLU``. ``slug`` (the lower-cased name)
    shapes device IDs (``<node>-cambricon-<slug>-<i>``) and the pod annotation keys, so a spec named
    ``MLU`` is wire-identical to HAMi.
    """

    name: str
    count: str
    memory: str
    cores: str
    node_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def slug(self) -> str:
        return self.name.lower()

    @property
    def to_allocate_annotation(self) -> str:
        return f"hami.io/cambricon-{self.slug}-devices-to-allocate"

    @property
    def allocated_annotation(self) -> str:
        return f"hami.io/cambricon-{self.slug}-devices-allocated"

    def device_id(self, node: str, index: int) -> str:
        """HAMi's synthesised device ID (vendors D.2): ``<node>-cambricon-mlu-<i>`` on the default path."""
        return f"{node}-cambricon-{self.slug}-{index}"

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether a node with ``labels`` may carry this model (every ``nodeSelector`` pair matches)."""
        return all(labels.get(k) == v for k, v in self.node_selector.items())


class MluModel(BaseModel):
    """One entry of ``cambricon.models``: an MLU model served by its own backend (not in HAMi)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str
    resource_count_name: str = Field(alias="resourceCountName", min_length=1)
    #: Default ``cambricon.com/<lower name>.smlu.vmemory``, the per-model name of Cambricon's dynamic-smlu plugin.
    resource_memory_name: str | None = Field(None, alias="resourceMemoryName")
    #: Default ``cambricon.com/<lower name>.smlu.vcore``.
    resource_core_name: str | None = Field(None, alias="resourceCoreName", min_length=1)
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _MODEL_NAME.fullmatch(value):
            raise ValueError(f"{value!r} must be 1-32 letters, digits, '.', '_' or '-', starting with a letter "
                             "or digit")
        return value

    def spec(self) -> MluModelSpec:
        slug = self.name.lower()
        memory = f"cambricon.com/{slug}.smlu.vmemory" if self.resource_memory_name is None \
            else self.resource_memory_name
        cores = self.resource_core_name or f"cambricon.com/{slug}.smlu.vcore"
        return MluModelSpec(self.name, self.resource_count_name, memory, cores,
                            MappingProxyType(dict(self.node_selector)))


class CambriconConfig(BaseModel):
    """HAMi's ``CambriconConfig`` with the chart defaults, plus ``models`` and ``legacyAssignedAnnotation``.

    Keys are HAMi's camelCase names. With ``models`` empty (the default) the section is HAMi's: one
    backend ``MLU`` reading the three top-level resource names.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(DEFAULT_COUNT, alias="resourceCountName", min_length=1)
    resource_memory_name: str = Field(DEFAULT_MEMORY, alias="resourceMemoryName")
    resource_core_name: str = Field(DEFAULT_CORES, alias="resourceCoreName", min_length=1)
    models: list[MluModel] = Field(default_factory=list)
    #: Also write ``CAMBRICON_DSMLU_ASSIGHED=false``: the misspelled key that HAMi wrote before it fixed the
    #: spelling, and that Cambricon device plugins of that era still look for.
    legacy_assigned_annotation: bool = Field(False, alias="legacyAssignedAnnotation")

    _specs: tuple[MluModelSpec, ...] = PrivateAttr(default=())

    def model_post_init(self, context: Any, /) -> None:
        if self.models:
            specs = tuple(m.spec() for m in self.models)
        else:
            specs = (MluModelSpec(COMMON_WORD, self.resource_count_name, self.resource_memory_name,
                                  self.resource_core_name),)
        self._specs = specs

    @property
    def specs(self) -> tuple[MluModelSpec, ...]:
        """Every backend this section enables, in configuration order."""
        return self._specs

    def spec(self, name: str) -> MluModelSpec | None:
        """The spec of backend ``name``, or ``None`` when this section does not declare it."""
        return next((s for s in self._specs if s.name == name), None)


def _check_models(cfg: CambriconConfig) -> None:
    """Rules across ``models`` entries that pydantic cannot see one field at a time."""
    problems: list[str] = []
    if cfg.models:
        for name in ("resource_count_name", "resource_memory_name", "resource_core_name"):
            if name in cfg.model_fields_set:
                key = CambriconConfig.model_fields[name].alias
                problems.append(f"{SECTION}.{key}: cannot be combined with {SECTION}.models; set the resource "
                                "names on each model")
    specs: Sequence[MluModelSpec] = cfg.specs if cfg.models else ()
    for i, a in enumerate(specs):
        for j, b in enumerate(specs):
            if j <= i:
                continue
            where = f"{SECTION}.models.{j}"
            if a.slug == b.slug:
                problems.append(f"{where}.name: {b.name!r} repeats models.{i} (names are compared ignoring case)")
            elif a.slug in b.slug or b.slug in a.slug:
                # The engine hands a backend every device whose type contains its name (vendors A.3, J.3).
                problems.append(f"{where}.name: {b.name!r} and models.{i} {a.name!r} must not contain one "
                                "another (a backend receives every device whose type contains its name)")
            if a.count == b.count:
                problems.append(f"{where}.resourceCountName: {b.count!r} is also the count resource of models.{i} "
                                f"{a.name!r}; the count resource says which model a container asks for")
            if a.cores == b.cores and not _exclusive(a.node_selector, b.node_selector):
                problems.append(f"{where}.nodeSelector: models.{i} {a.name!r} reads the same capacity "
                                f"{a.cores!r}; give both models a nodeSelector with a label key they set to "
                                "different values, so that a node registers one of them")
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))


def _exclusive(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """No node can match both selectors: some label key is required with two different values."""
    return any(k in b and b[k] != v for k, v in a.items())


def parse_config(section: Any) -> CambriconConfig:
    """Validate the ``cambricon:`` section; a bad field raises :class:`ConfigError` naming ``cambricon.<field>``.

    :func:`~hami_core.plugins.parse_section` validates each field; the rules across ``models`` entries follow.
    """
    cfg = parse_section(SECTION, CambriconConfig, section)
    _check_models(cfg)
    return cfg
