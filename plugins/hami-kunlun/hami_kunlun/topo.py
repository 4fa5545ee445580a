"""HAMi's Kunlunxin wing/interconnect selector and bubble score (``pkg/device/kunlun/topo.go``).

An eight-card node has two wings of four: indexes 0-3 (left) and 4-7 (right). Both backends place devices with
:func:`graph_select`, implemented over device *indexes* (HAMi's latest ``graghSelect`` orders devices by index
itself, since the framework hands the fit a score-sorted list); the whole-card score counts the wings' "bubbles".
Pure functions over hami-core's types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from hami_core.plugins import DeviceUsage

__all__ = ["Predicate", "calc_score", "count_bubbles", "graph_select"]

#: Cross-wing links (``InterGroupConnection``) and in-wing links (``GroupConnection``).
INTER_PAIRS: tuple[tuple[int, int], ...] = ((0, 4), (1, 5), (2, 6), (3, 7))
GROUP_PAIRS: tuple[tuple[int, int], ...] = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3),
                                            (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7))
#: Connected quads (``InterGroupConnection2``), in HAMi's preference order.
QUADS: tuple[tuple[int, int, int, int], ...] = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7),
                                                (0, 3, 4, 7), (1, 2, 5, 6))
#: Wing free counts tried, in order, for a one-device request (``oddorder``).
ODD_ORDER: tuple[int, ...] = (1, 3, 2, 4)
WING = 4

Predicate = Callable[[DeviceUsage], bool]


# ------------------------------------------------------------------------------------------ selector
def _fitting(devices: Sequence[DeviceUsage], ok: Predicate) -> list[int]:
    return [d.index for d in devices if ok(d)]


def _pick(devices: Sequence[DeviceUsage], start: int, count: int, ok: Predicate) -> list[int]:
    """HAMi ``devicepick``: the first ``count`` fitting devices from index ``start`` on."""
    out: list[int] = []
    for d in devices:
        if d.index >= start and ok(d):
            out.append(d.index)
            if len(out) == count:
                break
    return out


def _interconnect(devices: Sequence[DeviceUsage], count: int, ok: Predicate) -> list[int]:
    """HAMi ``interconnect``: a cross-wing pair for 2 devices, a connected quad for 4.

    With 6 free devices the first quad that leaves a connected pair (in-wing or cross-wing) wins; when
    none does, the last quad that fits.
    """
    free = _fitting(devices, ok)
    have = set(free)
    if count == 2:
        for a in free:
            for b in free:
                if a != b and ((a, b) in INTER_PAIRS or (b, a) in INTER_PAIRS):
                    return [a, b]
    if count == 4:
        if len(free) in (4, 5):
            for quad in QUADS:
                if have.issuperset(quad):
                    return list(quad)
        if len(free) == 6:
            chosen: list[int] = []
            for quad in QUADS:
                if have.issuperset(quad):
                    chosen = list(quad)
                    rest = have.difference(quad)
                    if any(rest.issuperset(pair) for pair in INTER_PAIRS + GROUP_PAIRS):
                        return chosen
            return chosen
    return []


def graph_select(devices: Sequence[DeviceUsage], count: int, ok: Predicate) -> list[int]:
    """HAMi ``graghSelect``: device indexes for ``count`` devices, or ``[]``.

    Indexes 0-3 are the left wing, 4-7 the right. 8 ⇒ all eight fit or nothing. 1, 2 or 4 ⇒ when a wing
    has at least ``count`` fitting devices, take the first fitting devices of the wing whose fitting
    count equals ``count``, ``count + 1`` ... 4 (1, 3, 2, 4 for one device), left before right;
    otherwise :func:`_interconnect`. Other counts never fit.
    """
    ordered = sorted(devices, key=lambda d: d.index)
    left = sum(1 for d in ordered if d.index < WING and ok(d))
    right = sum(1 for d in ordered if d.index >= WING and ok(d))
    if count == 8:
        return _fitting(ordered, ok) if left + right == count else []
    if count not in (1, 2, 4):
        return []
    if left >= count or right >= count:
        for slots in range(count, WING + 1):
            wanted = ODD_ORDER[slots - 1] if count % 2 == 1 else slots
            if left == wanted:
                return _pick(ordered, 0, count, ok)
            if right == wanted:
                return _pick(ordered, WING, count, ok)
    return _interconnect(ordered, count, ok)


# ------------------------------------------------------------------------------------------ score
def count_bubbles(indexes: Iterable[int]) -> int:
    """HAMi ``countbubble``: per wing, 4 used → 0, 1 → 2, otherwise 1; no index at all → 1."""
    idx = list(indexes)
    left = sum(1 for i in idx if i < WING)
    right = len(idx) - left
    if left == 0 and right == 0:
        return 1

    def value(n: int) -> int:
        return 0 if n == 4 else 2 if n == 1 else 1
    return value(left) + value(right)


def calc_score(previous: Iterable[int], current: Iterable[int]) -> float:
    """HAMi ``calcscore``: bubble delta (current - previous) -1 → 3000, 0 → 2000, +1 → 1000, +2 → 0,
    anything else 1000."""
    delta = count_bubbles(current) - count_bubbles(previous)
    return {-1: 3000.0, 0: 2000.0, 1: 1000.0, 2: 0.0}.get(delta, 1000.0)
