"""Engine configuration: HAMi's device-config.yaml shape plus a ``scheduler:`` section for defaults.

Vendor sections (``nvidia:``, ``cambricon:``, ``iluvatars:``, ``vnpus:`` ...) are validated by the vendor
plugins that own them; this module validates the file's overall shape and the ``scheduler:`` section, into which
the built-in policy packages mount their own sections (``scheduler.fgd``, see
:func:`hami_core.policies.scheduler_sections`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model, field_validator

from hami_core.engine.policy import validate_gpu_policy
from hami_core.plugins.errors import ConfigError
from hami_core.plugins.helpers import pydantic_error
from hami_core.plugins.yamlload import MAX_CONFIG_BYTES, YamlInputError, load_yaml, read_text
from hami_core.policies import scheduler_sections
from hami_core.wire import keys

#: Upper bounds of numeric settings. A device config is operator input, but a typo (``nodeLockTimeout: 3e9``,
#: ``window: 10000000000``) must fail start-up with the field named, not hang it or overflow later; ``.inf`` and
#: ``.nan`` are refused everywhere (``allow_inf_nan=False``).
MAX_NODE_LOCK_TIMEOUT_S = 86_400.0
#: Largest magnitude of a score weight (``scheduler.scoreWeights``): past it a weight can only be a typo.
MAX_SCORE_WEIGHT = 1e9

#: Top-level sections of HAMi's device-config.yaml (spec §10.1).
HAMI_SECTIONS = frozenset({"nvidia", "cambricon", "hygon", "metax", "mthreads", "iluvatars", "enflame", "kunlun",
                           "awsneuron", "amd", "vastai", "biren", "vnpus"})

#: Used when a configuration names no device section at all (HAMi's built-in test default is NVIDIA).
DEFAULT_DEVICE_CONFIG: dict[str, Any] = {"nvidia": {}}


def _score_weight(value: Any) -> Any:
    """A weight is a plain number: YAML's ``true`` or ``"2"`` is a mistake, not 1 or 2."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number, got {value!r}")
    return value


#: One scorer's weight (``scheduler.scoreWeights.<scorer>``): finite, at most :data:`MAX_SCORE_WEIGHT` either way.
ScoreWeight = Annotated[float, BeforeValidator(_score_weight),
                        Field(ge=-MAX_SCORE_WEIGHT, le=MAX_SCORE_WEIGHT, allow_inf_nan=False)]


class _SchedulerSettings(BaseModel):
    """The ``scheduler:`` section: HAMi's scheduler flags that shape decisions (spec §10.2), the score weights, and
    (mounted by :data:`SchedulerConfig`) the built-in policy packages' own sections.

    ``scoreWeights`` maps a scorer (``hami``: HAMi's node score; ``fgd``; a backend or plugin name, ``<name>.neutral``
    for its policy-neutral NodeScores; see :mod:`hami_core.engine.scoring`) to its weight: the points a full score of
    that scorer is worth, its value normalised to 0..1 by the scale the scorer declares (HAMi's node score: 30; fgd:
    100 x its score steps + 50; a scorer that declares none has scale 1, so its weight multiplies its raw points). A
    scorer without a weight counts its own points (the node policy's default aside: ``fgd`` weighs ``hami`` 0), and
    a policy-neutral one 10000 points per unit, so the defaults are HAMi's arithmetic. ``0`` turns a scorer off; a
    negative weight prefers what the scorer dislikes; under ``spread`` every scorer but the policy-neutral ones
    counts against a node. Example::

        scheduler:
          scoreWeights:
            hami: 10        # occupancy 0..1 is worth 10 points instead of 30
            kunlun: 0.5     # Kunlun's topology points (0..3000, no scale declared) count half
            Metax-SGPU.neutral: 100   # its policy-neutral points count 100 each instead of 10000
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)

    scheduler_name: str = Field(keys.DEFAULT_SCHEDULER_NAME, alias="schedulerName")
    node_scheduler_policy: str = Field("binpack", alias="nodeSchedulerPolicy")
    gpu_scheduler_policy: str = Field("spread", alias="gpuSchedulerPolicy")
    force_overwrite_default_scheduler: bool = Field(True, alias="forceOverwriteDefaultScheduler")
    node_lock_timeout: float = Field(300.0, alias="nodeLockTimeout", gt=0, le=MAX_NODE_LOCK_TIMEOUT_S)
    score_weights: dict[Annotated[str, Field(min_length=1, max_length=253)], ScoreWeight] = Field(
        default_factory=dict, alias="scoreWeights")
    #: What a node whose registration for a backend is absent or empty (``[]``, capacity 0) keeps while the
    #: backend's health check passes: ``drop`` (default) forgets its devices, ``keep`` is HAMi's rule (the
    #: cached devices stay until the health check fails). docs/devices.md, "Lost registrations", says why.
    lost_registration: Literal["drop", "keep"] = Field("drop", alias="lostRegistration")

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


#: The ``scheduler:`` section's model: :class:`_SchedulerSettings` plus one field per built-in policy package's
#: section (``fgd``: :class:`hami_core.policies.fgd.config.FgdConfig`), each defaulting to that model's defaults.
SchedulerConfig = create_model(  # type: ignore[call-overload]
    "SchedulerConfig", __base__=_SchedulerSettings, __module__=__name__, __doc__=_SchedulerSettings.__doc__,
    **{name: (model, Field(default_factory=model)) for name, model in scheduler_sections().items()})


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Validated configuration: the raw device sections (for plugins) and the scheduler defaults."""

    devices: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_DEVICE_CONFIG))
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    source: str = "<default>"
    #: entry-point or distribution names not to load (the ``plugins.blocked`` list; see
    #: :func:`hami_core.plugins.manager.get_plugin_manager`, which adds ``HAMI_BLOCK_PLUGINS``)
    blocked_plugins: tuple[str, ...] = ()


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
    blocked = _blocked_plugins(source, raw.pop("plugins", None))
    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(f"{source}: section names must be strings, got {key!r}")
    # A section present with an empty body (`nvidia:`) means "enabled with defaults".
    devices = {k: (v if v is not None else {}) for k, v in raw.items()} or dict(DEFAULT_DEVICE_CONFIG)
    return EngineConfig(devices=devices, scheduler=scheduler, source=source, blocked_plugins=blocked)


#: Bounds on the ``plugins:`` section (a config file is operator input like any other).
_MAX_BLOCKED = 64
_MAX_NAME = 128


def _blocked_plugins(source: str, section: Any) -> tuple[str, ...]:
    """The ``plugins: {blocked: [name, ...]}`` section: entry-point or distribution names not to load.

    hami-py's own key (HAMi's config has no ``plugins:``), popped so that it is never taken for a vendor section.
    """
    if section is None:
        return ()
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: plugins: must be a mapping (plugins: {{blocked: [name]}}), "
                          f"got {type(section).__name__}")
    unknown = sorted(str(k) for k in section if k != "blocked")
    if unknown:
        raise ConfigError(f"{source}: plugins.{unknown[0]}: unknown field (the plugins section has only 'blocked')")
    names = section.get("blocked") or []
    if not isinstance(names, list) or len(names) > _MAX_BLOCKED:
        raise ConfigError(f"{source}: plugins.blocked: must be a list of at most {_MAX_BLOCKED} names")
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name.strip() or len(name) > _MAX_NAME:
            raise ConfigError(f"{source}: plugins.blocked[{i}]: must be a plugin or distribution name "
                              f"(a non-empty string of at most {_MAX_NAME} characters), got {name!r}")
    return tuple(name.strip() for name in names)
