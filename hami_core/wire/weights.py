"""Device scoring weights annotation ``hami.io/device-scoring-weights`` (spec §7.1, Appendix C)."""

from __future__ import annotations

from hami_core.plugins.errors import WireFormatError
from hami_core.wire.common import INT64_MAX, INT64_MIN, go_quote, parse_go_int
from hami_core.wire.keys import DEVICE_SCORING_WEIGHTS

__all__ = ["DEFAULT_WEIGHTS", "encode_scoring_weights", "parse_scoring_weights"]

#: (slot, core, memory) weights when the annotation is absent.
DEFAULT_WEIGHTS: tuple[int, int, int] = (1, 1, 1)
_NAMES = ("slot", "core", "memory")


def parse_scoring_weights(value: str, *, key: str = DEVICE_SCORING_WEIGHTS) -> tuple[int, int, int]:
    """Parse device score weights like HAMi ``ParseDeviceScoringWeights``; returns (slot, core, memory).

    Format: exactly three comma items ``key=value`` with keys ``slot``, ``core``, ``memory`` (any order,
    each once), integer values >= 0, not all 0; spaces around items, keys and values are ignored, e.g.
    ``"slot=1, core=1, memory=3"``. Errors read ``invalid <key> annotation "<value>": <why>``.
    """
    def fail(why: str) -> WireFormatError:
        return WireFormatError(f"invalid {key} annotation {go_quote(value)}: {why}")

    parts = value.split(",")
    if len(parts) != 3:
        raise fail("expected slot, core, and memory weights")
    weights: dict[str, int] = {}
    seen: set[str] = set()
    for part in parts:
        name, eq, raw = part.strip().partition("=")
        if not eq:
            raise fail("expected key=value entries")
        name = name.strip()
        if name in seen:
            raise fail(f"duplicate {go_quote(name)} weight")
        try:
            weight = parse_go_int(raw.strip(), INT64_MIN, INT64_MAX)
        except WireFormatError:
            raise fail(f"{go_quote(name)} weight must be an integer") from None
        if weight < 0:
            raise fail(f"{go_quote(name)} weight must not be negative")
        if name not in _NAMES:
            raise fail(f"unknown weight {go_quote(name)}")
        weights[name] = weight
        seen.add(name)
    if not any(weights.values()):
        raise fail("at least one weight must be positive")
    return weights["slot"], weights["core"], weights["memory"]


def encode_scoring_weights(weights: tuple[int, int, int]) -> str:
    """Encode (slot, core, memory) weights. Format: ``slot=<n>,core=<n>,memory=<n>``."""
    return ",".join(f"{name}={int(w)}" for name, w in zip(_NAMES, weights, strict=True))
