"""Compute-unit ID lists: HSA's ``CU_list`` grammar (``0-3,8,10-12``) and first-fit CU selection.

HAMi's AMD design (``docs/develop/amd-vgpu.md`` §4.2, §5.2) has the scheduler book a CU *count* per device and the
device plugin turn it into CU IDs during ``Allocate``: IDs no other pod on that GPU holds, so the masks of pods
sharing a GPU never overlap. The AMD device plugin picks them first-fit (the lowest free IDs, in ascending order);
so does :func:`first_fit`. Initial scope is CDNA (MI300X), where every CU can be masked on its own: no WGP pairs.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami_core.plugins import WireFormatError


def parse_cu_list(text: str) -> frozenset[int]:
    """The CU IDs of an ID list (``"0-3,8,10-12"``); blank entries are skipped.

    Raises :class:`ValueError` for an entry that is not ``N`` or ``A-B`` with ``0 <= A <= B``.
    """
    ids: set[int] = set()
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        lo, sep, hi = entry.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise ValueError(f"CU list entry {entry!r} is not N or A-B")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"CU range {entry!r} runs backwards")
        ids.update(range(first, last + 1))
    return frozenset(ids)


def format_cu_list(ids: Iterable[int]) -> str:
    """The shortest ID list for ``ids``: ascending, runs of consecutive IDs as ``A-B`` (``{0,1,2,8}`` → ``0-2,8``)."""
    out: list[str] = []
    ordered = sorted(set(ids))
    start = prev = None
    for cu in [*ordered, None]:
        if prev is not None and cu == prev + 1:
            prev = cu
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cu
    return ",".join(out)


def first_fit(used: frozenset[int], count: int, *, where: str) -> frozenset[int]:
    """The ``count`` lowest CU IDs not in ``used``.

    The scheduler books at most ``devcore`` CUs per GPU, so the IDs chosen stay below ``devcore`` (the k-th free ID
    is at most ``len(used) + k - 1``). ``count`` below 1 is a broken allocation annotation: a
    :class:`WireFormatError` naming ``where``.
    """
    if count < 1:
        raise WireFormatError(f"{where}: a device needs at least 1 compute unit, got {count}")
    chosen: list[int] = []
    cu = 0
    while len(chosen) < count:
        if cu not in used:
            chosen.append(cu)
        cu += 1
    return frozenset(chosen)
