"""Small helpers every vendor backend needs: container resources, integer quantities, node capacity, selection
annotations, environment edits, config sections and times. Each one replaces copies that lived in several vendor
packages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from hami_core.plugins.errors import ConfigError, WireFormatError
from hami_core.plugins.objects import metadata
from hami_core.plugins.types import HealthReport
from hami_core.wire.common import INT64_MAX, INT64_MIN, check_device_count, split_list
from hami_core.wire.quantity import parse_quantity, quantity_to_int

__all__ = ["Selection", "as_int64", "as_whole", "capacity_count", "capacity_health", "node_capacity", "parse_section",
           "pydantic_error", "quantity_value", "resource", "set_env", "unix_nanos"]

ModelT = TypeVar("ModelT", bound=BaseModel)


def resource(container: Mapping[str, Any], name: str | None, *, limits_only: bool = False) -> Any:
    """A container resource quantity as written: limits first, then requests (HAMi's lookup), ``None`` if absent
    (or ``name`` is empty). ``limits_only`` skips requests, as HAMi does for some resources."""
    if not name:
        return None
    res = container.get("resources") or {}
    value = (res.get("limits") or {}).get(name)
    if value is None and not limits_only:
        value = (res.get("requests") or {}).get(name)
    return value


def as_int64(value: Any) -> int | None:
    """Kubernetes ``Quantity.AsInt64``: the exact integer value, or ``None`` when it is fractional, not a
    quantity, or beyond int64."""
    try:
        number = quantity_to_int(value)
    except WireFormatError:
        return None
    if number is None or not INT64_MIN <= number <= INT64_MAX:
        return None
    return number


def as_whole(value: Any) -> int | None:
    """The exact integer value of a quantity of any size; ``None`` when ``value`` is ``None``, fractional or not a
    quantity. Unlike :func:`as_int64` it keeps a value beyond int64 (vendors whose rules never bounded one)."""
    if value is None:
        return None
    try:
        return quantity_to_int(value)
    except WireFormatError:
        return None


def quantity_value(value: Any) -> int | None:
    """Go ``Quantity.Value``: the value rounded up to an integer (``"1.5"`` → 2, ``"-1.5"`` → -1); ``None`` when it
    is not a quantity."""
    try:
        number = parse_quantity(value)
    except WireFormatError:
        return None
    return -((-number.numerator) // number.denominator)


def node_capacity(node: Mapping[str, Any], name: str) -> Any:
    """``status.capacity[name]`` of a Node as written, ``None`` when absent (vendors that synthesise their devices
    from a capacity read it so)."""
    return ((node.get("status") or {}).get("capacity") or {}).get(name)


def capacity_count(node: Mapping[str, Any], name: str) -> int | None:
    """The number of whole cards a node's ``status.capacity[name]`` announces, for backends that synthesise their
    devices from it (Enflame GCU, MetaX GPU): ``None`` when absent; a value Kubernetes' ``AsInt64`` cannot read
    raises :class:`WireFormatError` naming the node and field, as does a count beyond what a node may register.
    A negative count is returned as it is (no devices to the caller).
    """
    raw = node_capacity(node, name)
    if raw is None:
        return None
    where = f"node {metadata(node).get('name', '')}: status.capacity[{name}]"
    count = as_int64(raw)
    if count is None:
        raise WireFormatError(f"{where}: {raw!r} is not a whole number of devices")
    return check_device_count(count, where)


def capacity_health(node: Mapping[str, Any], name: str) -> HealthReport:
    """HAMi's ``CheckHealth`` for whole cards counted by ``status.capacity[name]`` (Enflame GCU, MetaX GPU): healthy
    when the capacity is above 0, refreshed every time. An absent, 0 or unreadable capacity is unhealthy, as in
    HAMi (Go reads it as 0): a node that had such cards loses them whatever ``scheduler.lostRegistration`` says;
    the engine reports nothing for a node that never had them (HAMi skips the clean-up of a vendor not cached)."""
    raw = node_capacity(node, name)
    if raw is None:
        return HealthReport(False, True, reason=f"status.capacity[{name}] is absent")
    if (as_int64(raw) or 0) > 0:
        return HealthReport(True, True)
    return HealthReport(False, True, reason=f"status.capacity[{name}] is {raw!r}")


def unix_nanos(now: float) -> int:
    """``now`` (Unix seconds) in Unix nanoseconds, as Go's ``time.Now().UnixNano()`` writes annotation times.

    The whole seconds are split off first: a float cannot hold today's time in nanoseconds exactly.
    """
    whole = int(now)
    return whole * 1_000_000_000 + round((now - whole) * 1_000_000_000)


def set_env(container: dict[str, Any], name: str, value: str) -> None:
    """Set ``name=value`` in a container's ``env`` list, replacing an existing entry of that name."""
    env = container.setdefault("env", [])
    for item in env:
        if item.get("name") == name:
            item["value"] = value
            return
    env.append({"name": name, "value": value})


class Selection:
    """A pod's device selection annotations (vendors.md A.8): use/no-use lists of card types and of UUIDs.

    Type lists match when the upper-cased card type contains an upper-cased entry; UUID lists match exactly.
    Entries are trimmed and empty ones ignored, so an empty or blank value is no constraint. A device must match
    the use list (when set) and no entry of the no-use list (when set).
    """

    __slots__ = ("nouse_type", "nouse_uuid", "use_type", "use_uuid")

    def __init__(self, annotations: Mapping[str, str], *, use_type: str | None, nouse_type: str | None,
                 use_uuid: str | None, nouse_uuid: str | None) -> None:
        self.use_type = tuple(t.upper() for t in split_list(annotations.get(use_type or "")))
        self.nouse_type = tuple(t.upper() for t in split_list(annotations.get(nouse_type or "")))
        self.use_uuid = frozenset(split_list(annotations.get(use_uuid or "")))
        self.nouse_uuid = frozenset(split_list(annotations.get(nouse_uuid or "")))

    def type_ok(self, card_type: str) -> bool:
        card = card_type.upper()
        if self.use_type and not any(t in card for t in self.use_type):
            return False
        return not (self.nouse_type and any(t in card for t in self.nouse_type))

    def uuid_ok(self, uuid: str) -> bool:
        if self.use_uuid and uuid not in self.use_uuid:
            return False
        return not (self.nouse_uuid and uuid in self.nouse_uuid)

    @property
    def filters_type(self) -> bool:
        return bool(self.use_type or self.nouse_type)

    @property
    def filters_uuid(self) -> bool:
        return bool(self.use_uuid or self.nouse_uuid)


def pydantic_error(section: str, exc: ValidationError) -> ConfigError:
    """A :class:`ConfigError` naming every offending field as ``section.field``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in (section, *err["loc"]) if p != "")
        parts.append(f"{loc}: {err['msg']}")
    return ConfigError("invalid configuration: " + "; ".join(parts))


def parse_section(name: str, model: type[ModelT], value: Any) -> ModelT:
    """Validate the ``name:`` section of device-config.yaml into ``model``.

    ``None`` (a YAML key with an empty body) and ``{}`` mean the model's defaults; anything but a mapping, and
    every invalid field, raise :class:`ConfigError` naming ``name.<field>``.
    """
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: must be a mapping, got {type(value).__name__}")
    try:
        return model.model_validate(dict(value))
    except ValidationError as exc:
        raise pydantic_error(name, exc) from None
